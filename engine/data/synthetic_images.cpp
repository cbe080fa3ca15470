#include "engine/data/synthetic_images.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "engine/core/rng.h"

namespace trainlab {

const char* split_name(Split split) { return split == Split::train ? "train" : "held_out"; }

namespace {

constexpr float kNoiseStd = 4.0f;
// One unit of decode_cost: four passes of the 3x3 stencil (about 110 K flops per sample). At the
// ladder's decode_cost 60 this makes the input pipeline the baseline's largest stall on a 2-core
// CPU, the situation the seed's SyntheticImages reproduces (a CPU decode starving the model).
constexpr std::int64_t kStencilPassesPerUnit = 4;
constexpr std::int64_t kMaxShift = 3;

// Approximately standard normal and cheap: the sum of four 16-bit uniforms (Irwin-Hall), scaled
// to unit variance. Box-Muller per pixel would cost more than the model's forward pass.
inline float cheap_normal(std::uint64_t bits) {
  const float scale = 1.0f / 65536.0f;
  const float total = static_cast<float>(bits & 0xffff) + static_cast<float>((bits >> 16) & 0xffff) +
                      static_cast<float>((bits >> 32) & 0xffff) + static_cast<float>(bits >> 48);
  return (total * scale - 2.0f) * 1.7320508f;  // var of one U(0,1) is 1/12: 4/12 * 3 = 1
}

// decode_cost passes of a 3x3 smoothing stencil, each reading the previous pass's output, then a
// sum. This is the work; the image itself is left untouched.
double decode_work(const float* image, std::int64_t passes) {
  if (passes <= 0) return 0.0;
  constexpr std::int64_t h = SyntheticImages::kHeight, w = SyntheticImages::kWidth;
  std::vector<float> a(image, image + SyntheticImages::kSampleElements), b(a.size());
  const float k[3][3] = {{0.0625f, 0.125f, 0.0625f}, {0.125f, 0.25f, 0.125f}, {0.0625f, 0.125f, 0.0625f}};
  for (std::int64_t pass = 0; pass < passes; ++pass) {
    for (std::int64_t c = 0; c < SyntheticImages::kChannels; ++c) {
      const float* in = a.data() + c * h * w;
      float* out = b.data() + c * h * w;
      for (std::int64_t y = 0; y < h; ++y) {
        const float* up = in + std::max<std::int64_t>(y - 1, 0) * w;
        const float* mid = in + y * w;
        const float* down = in + std::min<std::int64_t>(y + 1, h - 1) * w;
        out[y * w] = mid[0];
        out[y * w + w - 1] = mid[w - 1];
        for (std::int64_t x = 1; x < w - 1; ++x) {
          out[y * w + x] = k[0][0] * up[x - 1] + k[0][1] * up[x] + k[0][2] * up[x + 1] + k[1][0] * mid[x - 1] +
                           k[1][1] * mid[x] + k[1][2] * mid[x + 1] + k[2][0] * down[x - 1] + k[2][1] * down[x] +
                           k[2][2] * down[x + 1];
        }
      }
    }
    a.swap(b);
  }
  double total = 0;
  for (float v : a) total += v;
  return total;
}

}  // namespace

SyntheticImages::SyntheticImages(std::uint64_t seed, Split split, std::int64_t size, std::int64_t decode_cost)
    : seed_(seed), split_(split), size_(size), decode_cost_(decode_cost) {
  TL_CHECK(size >= 1, "SyntheticImages: size must be >= 1, got " + std::to_string(size));
  TL_CHECK(decode_cost >= 0, "SyntheticImages: decode_cost must be >= 0, got " + std::to_string(decode_cost));
  // Prototypes depend on the seed only, so both splits pose the same classification problem.
  Generator gen(mix_seed(seed, 0x70726f746f747970ull));
  prototypes_.resize(static_cast<std::size_t>(kClasses * kSampleElements));
  for (std::int64_t c = 0; c < kClasses; ++c) {
    float* proto = prototypes_.data() + c * kSampleElements;
    const double blob_y = gen.uniform(6, 26), blob_x = gen.uniform(6, 26);
    for (std::int64_t ch = 0; ch < kChannels; ++ch) {
      const double fy = static_cast<double>(gen.below(4)) + 1, fx = static_cast<double>(gen.below(4)) + 1;
      const double phase = gen.uniform(0, 2 * std::numbers::pi);
      const double blob_amp = gen.uniform(-2, 2);
      for (std::int64_t y = 0; y < kHeight; ++y) {
        for (std::int64_t x = 0; x < kWidth; ++x) {
          const double grating = std::sin(
              2 * std::numbers::pi * (fy * static_cast<double>(y) + fx * static_cast<double>(x)) / 32.0 + phase);
          const double r2 = (static_cast<double>(y) - blob_y) * (static_cast<double>(y) - blob_y) +
                            (static_cast<double>(x) - blob_x) * (static_cast<double>(x) - blob_x);
          proto[(ch * kHeight + y) * kWidth + x] = static_cast<float>(grating + blob_amp * std::exp(-r2 / 32.0));
        }
      }
    }
    // Zero mean, unit variance per prototype, so no class is told apart by brightness alone.
    double mean = 0, sq = 0;
    for (std::int64_t i = 0; i < kSampleElements; ++i) mean += proto[i];
    mean /= kSampleElements;
    for (std::int64_t i = 0; i < kSampleElements; ++i) sq += (proto[i] - mean) * (proto[i] - mean);
    const double inv_std = 1.0 / std::sqrt(sq / kSampleElements + 1e-12);
    for (std::int64_t i = 0; i < kSampleElements; ++i) proto[i] = static_cast<float>((proto[i] - mean) * inv_std);
  }
}

std::int64_t SyntheticImages::get(std::int64_t index, float* image, double* checksum) const {
  TL_CHECK(index >= 0 && index < size_, std::string("SyntheticImages(") + split_name(split_) + "): index " +
                                            std::to_string(index) + " is outside [0, " + std::to_string(size_) + ")");
  Generator gen(mix_seed(mix_seed(seed_, split_ == Split::train ? 1 : 2), static_cast<std::uint64_t>(index)));
  const auto label = static_cast<std::int64_t>(gen.below(kClasses));
  const auto dy = static_cast<std::int64_t>(gen.below(2 * kMaxShift + 1)) - kMaxShift;
  const auto dx = static_cast<std::int64_t>(gen.below(2 * kMaxShift + 1)) - kMaxShift;
  const auto contrast = static_cast<float>(gen.uniform(0.6, 1.4));
  const float* proto = prototypes_.data() + label * kSampleElements;
  for (std::int64_t ch = 0; ch < kChannels; ++ch) {
    for (std::int64_t y = 0; y < kHeight; ++y) {
      const std::int64_t sy = (y - dy + kHeight) % kHeight;
      for (std::int64_t x = 0; x < kWidth; ++x) {
        const std::int64_t sx = (x - dx + kWidth) % kWidth;
        image[(ch * kHeight + y) * kWidth + x] =
            contrast * proto[(ch * kHeight + sy) * kWidth + sx] + kNoiseStd * cheap_normal(gen.next_u64());
      }
    }
  }
  const double work = decode_work(image, kStencilPassesPerUnit * decode_cost_);
  if (checksum) *checksum = work;
  return label;
}

std::string SyntheticImages::describe() const {
  return std::string("SyntheticImages(") + split_name(split_) + ", " + std::to_string(size_) + " samples" +
         (decode_cost_ > 0 ? ", decode cost " + std::to_string(decode_cost_) : std::string()) + ")";
}

}  // namespace trainlab
