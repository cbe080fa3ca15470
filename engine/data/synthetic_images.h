// SyntheticImages: the data set the trainlab command trains on, a deterministic and learnable image
// task with a real per-sample CPU cost (decode_cost). A Dataset (engine/data/dataset.h) like any other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace trainlab {

enum class Split { train, held_out };
const char* split_name(Split split);

// 10 classes of 3x32x32 images. Each class has a prototype made of oriented gratings and a
// bright blob, both drawn from the dataset seed; a sample is its class prototype, shifted by up
// to 3 pixels, scaled in contrast, plus Gaussian pixel noise. Sample i of a split is a pure
// function of (seed, split, i): any worker, in any order, produces the same bytes.
//
// decode_cost stands in for JPEG decode and augmentation: each unit is four passes of a 3x3
// stencil over the image (real arithmetic, about 18 flops per pixel per pass), each pass reading
// the previous one's output, folded into a checksum the batch carries so the work cannot be
// optimised away. It never changes the pixels, so the learning problem is the same at every cost.
class SyntheticImages final : public Dataset {
 public:
  static constexpr std::int64_t kChannels = 3, kHeight = 32, kWidth = 32, kClasses = 10;
  static constexpr std::int64_t kSampleElements = kChannels * kHeight * kWidth;

  SyntheticImages(std::uint64_t seed, Split split, std::int64_t size, std::int64_t decode_cost = 0);
  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override { return {kChannels, kHeight, kWidth}; }
  std::int64_t num_classes() const override { return kClasses; }
  std::string describe() const override;
  Split split() const { return split_; }
  std::uint64_t seed() const { return seed_; }
  std::int64_t decode_cost() const { return decode_cost_; }

  // Writes sample `index` ([3, 32, 32] row-major) to `image`; returns its label. `checksum`
  // receives the decode work's result.
  std::int64_t get(std::int64_t index, float* image, double* checksum = nullptr) const override;

 private:
  std::uint64_t seed_;
  Split split_;
  std::int64_t size_, decode_cost_;
  std::vector<float> prototypes_;  // [classes, 3, 32, 32]
};

}  // namespace trainlab
