// What each backend runs, asked before any work (backends/capability.h, the planner in
// engine/train/step.h), and the CPU's instruction-set dispatch beneath it (backends/cpu/isa.h, simd.h):
// every table of vector loops this CPU can run gives the plain loops' bits; an unsupported
// combination is one line, before any step, naming the op, the dtype, the backend, its ISA and what
// would work; the plan says what runs emulated, as each backend's table says.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/simd.h"
#include "backends/registry.h"
#include "engine/optim/optim.h"
#include "engine/train/step.h"
#include "engine/train/trainer.h"
#include "models/smallcnn/smallcnn.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
using trainlab::cpu::CpuIsa;

namespace {

// The families this CPU can run, lowest first (the first is the plain loops).
std::vector<CpuIsa> runnable_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::x86_64, CpuIsa::avx2, CpuIsa::avx512_core}) {
    if (isa <= cpu::detected_cpu_isa()) out.push_back(isa);
  }
  return out;
}

// f32 bit patterns with every class in them: zeros of both signs, subnormals, normals around the
// rounding ties of bf16 and f16, the f16 overflow edge, infinities, quiet and signalling NaNs of
// both signs, and random words; 1003 of them (not a multiple of any vector width).
std::vector<float> special_floats() {
  std::vector<std::uint32_t> bits = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x3f800000,
                                     0xbf800000, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0xff7fffff,
                                     0x477fe000, 0x477ff000, 0x477fefff, 0x47800000, 0x38800000, 0x33800000,
                                     0x33000001, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
                                     0xff812345, 0x7fbfffff, 0x387fe000, 0x38000000};
  Generator gen(11);
  while (bits.size() < 1003) bits.push_back(static_cast<std::uint32_t>(gen.below(std::uint64_t{1} << 32)));
  std::vector<float> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * sizeof(float));
  return out;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename H>
std::vector<H> every_half() {
  std::vector<H> out(65536 + 7);
  for (std::size_t i = 0; i < out.size(); ++i) out[i].bits = static_cast<std::uint16_t>(i * 40503u);
  return out;
}

// A table's 16-bit pool+ReLU rows (blocks of 8 to 64 and an odd 27, three windows a row) against
// the plain table's, with and without places, and the plain rows against the training pool's
// winners, the ReLU and relu_after's places. `patterns` fill the candidates.
template <typename H, typename Row, typename Forward, typename Relu>
void check_half_pool_relu_rows(const cpu::SimdKernels& k, const cpu::SimdKernels& plain, const std::vector<H>& patterns,
                               Row row_of, Forward forward_of, Relu relu_of) {
  std::size_t next = 0;
  for (const std::int64_t block : {8, 16, 27, 32, 64}) {
    INFO("16-bit rows, block " << block);
    const std::int64_t ow_n = 3, width = 2 * ow_n * block, stride = 70;
    for (int fill = 0; fill < 40; ++fill) {  // 70,560 candidates: every pattern
      std::vector<H> rows(static_cast<std::size_t>(2 * width));
      for (auto& v : rows) v = patterns[next++ % patterns.size()];
      const auto outs = static_cast<std::size_t>(ow_n * stride);
      std::vector<H> got(outs), want(outs), got_nop(outs);
      std::vector<std::uint8_t> got_places(outs, 0xff), want_places(outs, 0xff);
      (k.*row_of)(rows.data(), rows.data() + width, block, ow_n, got.data(), stride, got_places.data());
      (plain.*row_of)(rows.data(), rows.data() + width, block, ow_n, want.data(), stride, want_places.data());
      (k.*row_of)(rows.data(), rows.data() + width, block, ow_n, got_nop.data(), stride, nullptr);
      CHECK(same_bits(got, want));
      CHECK(same_bits(got_nop, want));
      CHECK(got_places == want_places);
      for (std::int64_t ow = 0; ow < ow_n; ++ow)
        for (std::int64_t q = 0; q < block; ++q) {
          const H* a = rows.data() + 2 * ow * block + q;
          H win{}, relu_win{};
          std::uint8_t place = 0;
          (plain.*forward_of)(a, a + block, a + width, a + width + block, &win, &place, 1);
          (plain.*relu_of)(&win, &relu_win, 1);
          const auto at = static_cast<std::size_t>(ow * stride + q);
          CHECK(want[at].bits == relu_win.bits);
          CHECK(want_places[at] == (place | (relu_win.bits == 0 ? 4 : 0)));
        }
    }
  }
}

}  // namespace

TEST_CASE("capability: the instruction-set cap reads oneDNN's names and refuses others", "[capability]") {
  CHECK(cpu::cpu_isa_cap_value("ONEDNN_MAX_CPU_ISA", "AVX2") == CpuIsa::avx2);
  CHECK(cpu::cpu_isa_cap_value("ONEDNN_MAX_CPU_ISA", "avx2_vnni") == CpuIsa::avx2);
  CHECK(cpu::cpu_isa_cap_value("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI") == CpuIsa::avx512_core);
  CHECK(cpu::cpu_isa_cap_value("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16") == CpuIsa::avx512_core_bf16);
  CHECK(cpu::cpu_isa_cap_value("TRAINLAB_MAX_CPU_ISA", "sse41") == CpuIsa::x86_64);
  CHECK(cpu::cpu_isa_cap_value("ONEDNN_MAX_CPU_ISA", "ALL") == CpuIsa::avx512_core_bf16);
  try {
    cpu::cpu_isa_cap_value("ONEDNN_MAX_CPU_ISA", "AVX3");
    FAIL("AVX3 was accepted");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("ONEDNN_MAX_CPU_ISA='AVX3'") != std::string::npos);
    CHECK(message.find("AVX2") != std::string::npos);
  }
  // What is in force: at most what the CPU has, and said in one line with the build's target.
  CHECK(cpu::cpu_isa() <= cpu::detected_cpu_isa());
  CHECK(cpu::describe_cpu_isa().find(cpu::cpu_isa_name(cpu::cpu_isa())) == 0);
  CHECK(cpu::describe_cpu_isa().find(cpu::build_target()) != std::string::npos);
  CHECK(cpu::simd().isa <= cpu::cpu_isa());
}

TEST_CASE("capability: every table of vector loops gives the plain loops' bits", "[capability]") {
  const cpu::SimdKernels& plain = cpu::simd_for(CpuIsa::x86_64);
  const std::vector<float> f = special_floats();
  const auto n = static_cast<std::int64_t>(f.size());
  const std::vector<bf16> b = every_half<bf16>();
  const std::vector<f16> h = every_half<f16>();
  for (CpuIsa isa : runnable_isas()) {
    const cpu::SimdKernels& k = cpu::simd_for(isa);
    INFO("the " << cpu::cpu_isa_name(isa) << " table");
    {  // casts
      std::vector<bf16> got_b(f.size()), want_b(f.size());
      k.f32_to_bf16(f.data(), got_b.data(), n);
      plain.f32_to_bf16(f.data(), want_b.data(), n);
      CHECK(same_bits(got_b, want_b));
      std::vector<f16> got_h(f.size()), want_h(f.size());
      k.f32_to_f16(f.data(), got_h.data(), n);
      plain.f32_to_f16(f.data(), want_h.data(), n);
      CHECK(same_bits(got_h, want_h));
      std::vector<float> got(b.size()), want(b.size());
      k.bf16_to_f32(b.data(), got.data(), static_cast<std::int64_t>(b.size()));
      plain.bf16_to_f32(b.data(), want.data(), static_cast<std::int64_t>(b.size()));
      CHECK(same_bits(got, want));
      k.f16_to_f32(h.data(), got.data(), static_cast<std::int64_t>(h.size()));
      plain.f16_to_f32(h.data(), want.data(), static_cast<std::int64_t>(h.size()));
      CHECK(same_bits(got, want));
      // ... and the scalar conversions of backends/dtype.h themselves.
      for (std::size_t i = 0; i < f.size(); ++i) {
        INFO("f32 bits " << std::hex << float_bits(f[i]));
        CHECK(got_b[i].bits == f32_to_bf16_bits(f[i]));
        CHECK(got_h[i].bits == f32_to_f16_bits(f[i]));
      }
    }
    {  // ReLU and its backward, on every bf16/f16 pattern and the special floats
      std::vector<float> got(f.size()), want(f.size());
      k.relu_f32(f.data(), got.data(), n);
      plain.relu_f32(f.data(), want.data(), n);
      CHECK(same_bits(got, want));
      std::vector<float> dy(f.rbegin(), f.rend());
      k.relu_backward_f32(f.data(), dy.data(), got.data(), n);
      plain.relu_backward_f32(f.data(), dy.data(), want.data(), n);
      CHECK(same_bits(got, want));
      const auto m = static_cast<std::int64_t>(b.size());
      std::vector<bf16> gb(b.size()), wb(b.size()), db(b.rbegin(), b.rend());
      k.relu_bf16(b.data(), gb.data(), m);
      plain.relu_bf16(b.data(), wb.data(), m);
      CHECK(same_bits(gb, wb));
      k.relu_backward_bf16(b.data(), db.data(), gb.data(), m);
      plain.relu_backward_bf16(b.data(), db.data(), wb.data(), m);
      CHECK(same_bits(gb, wb));
      std::vector<f16> gh(h.size()), wh(h.size()), dh(h.rbegin(), h.rend());
      k.relu_f16(h.data(), gh.data(), m);
      plain.relu_f16(h.data(), wh.data(), m);
      CHECK(same_bits(gh, wh));
      k.relu_backward_f16(h.data(), dh.data(), gh.data(), m);
      plain.relu_backward_f16(h.data(), dh.data(), wh.data(), m);
      CHECK(same_bits(gh, wh));
    }
    {                              // max-pool 2x2 runs: four candidate rows, winners, places and the backward's routing
      const std::int64_t c = 250;  // leaves a tail after 16- and 32-wide loops
      std::vector<float> cand(f.begin(), f.begin() + 4 * c);
      std::vector<float> got(static_cast<std::size_t>(c)), want(static_cast<std::size_t>(c));
      std::vector<std::uint8_t> got_place(static_cast<std::size_t>(c)), want_place(static_cast<std::size_t>(c));
      k.pool_forward_f32(cand.data(), cand.data() + c, cand.data() + 2 * c, cand.data() + 3 * c, got.data(),
                         got_place.data(), c);
      plain.pool_forward_f32(cand.data(), cand.data() + c, cand.data() + 2 * c, cand.data() + 3 * c, want.data(),
                             want_place.data(), c);
      CHECK(same_bits(got, want));
      CHECK(got_place == want_place);
      std::vector<bf16> hb(b.begin(), b.begin() + 4 * c), gb(static_cast<std::size_t>(c)),
          wb(static_cast<std::size_t>(c));
      k.pool_forward_bf16(hb.data(), hb.data() + c, hb.data() + 2 * c, hb.data() + 3 * c, gb.data(), got_place.data(),
                          c);
      plain.pool_forward_bf16(hb.data(), hb.data() + c, hb.data() + 2 * c, hb.data() + 3 * c, wb.data(),
                              want_place.data(), c);
      CHECK(same_bits(gb, wb));
      CHECK(got_place == want_place);
      std::vector<f16> hh(h.begin(), h.begin() + 4 * c), gh(static_cast<std::size_t>(c)),
          wh(static_cast<std::size_t>(c));
      k.pool_forward_f16(hh.data(), hh.data() + c, hh.data() + 2 * c, hh.data() + 3 * c, gh.data(), got_place.data(),
                         c);
      plain.pool_forward_f16(hh.data(), hh.data() + c, hh.data() + 2 * c, hh.data() + 3 * c, wh.data(),
                             want_place.data(), c);
      CHECK(same_bits(gh, wh));
      CHECK(got_place == want_place);
      // Every window of four drawn from ten specials (ties, -0 against +0, NaNs of both signs
      // against each other and against infinity): the first maximum in window order wins.
      {
        const std::uint32_t f_bits[10] = {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000,
                                          0xff800000, 0x7fc00000, 0xffc00001, 0x00000001, 0x7f7fffff};
        const std::uint16_t b_bits[10] = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80,
                                          0xff80, 0x7fc0, 0xffc1, 0x0001, 0x7f7f};
        const std::uint16_t h_bits[10] = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00,
                                          0xfc00, 0x7e00, 0xfe01, 0x0001, 0x7bff};
        const std::int64_t windows = 10000;
        std::vector<float> wf(static_cast<std::size_t>(4 * windows));
        std::vector<bf16> wbf(wf.size());
        std::vector<f16> whf(wf.size());
        for (std::int64_t w = 0; w < windows; ++w) {
          for (std::int64_t j = 0, rest = w; j < 4; ++j, rest /= 10) {
            const auto at = static_cast<std::size_t>(j * windows + w);
            const auto pick = static_cast<std::size_t>(rest % 10);
            std::memcpy(&wf[at], &f_bits[pick], sizeof(float));
            wbf[at].bits = b_bits[pick];
            whf[at].bits = h_bits[pick];
          }
        }
        std::vector<std::uint8_t> gp(static_cast<std::size_t>(windows)), wp(gp.size());
        std::vector<float> gf(gp.size()), wfo(gp.size());
        k.pool_forward_f32(wf.data(), wf.data() + windows, wf.data() + 2 * windows, wf.data() + 3 * windows, gf.data(),
                           gp.data(), windows);
        plain.pool_forward_f32(wf.data(), wf.data() + windows, wf.data() + 2 * windows, wf.data() + 3 * windows,
                               wfo.data(), wp.data(), windows);
        CHECK(same_bits(gf, wfo));
        CHECK(gp == wp);
        std::vector<bf16> gbo(gp.size()), wbo(gp.size());
        k.pool_forward_bf16(wbf.data(), wbf.data() + windows, wbf.data() + 2 * windows, wbf.data() + 3 * windows,
                            gbo.data(), gp.data(), windows);
        plain.pool_forward_bf16(wbf.data(), wbf.data() + windows, wbf.data() + 2 * windows, wbf.data() + 3 * windows,
                                wbo.data(), wp.data(), windows);
        CHECK(same_bits(gbo, wbo));
        CHECK(gp == wp);
        std::vector<f16> gho(gp.size()), who(gp.size());
        k.pool_forward_f16(whf.data(), whf.data() + windows, whf.data() + 2 * windows, whf.data() + 3 * windows,
                           gho.data(), gp.data(), windows);
        plain.pool_forward_f16(whf.data(), whf.data() + windows, whf.data() + 2 * windows, whf.data() + 3 * windows,
                               who.data(), wp.data(), windows);
        CHECK(same_bits(gho, who));
        CHECK(gp == wp);
        // The plain rule itself on a few: -0 then +0 keeps -0 (place 0); a NaN beats infinity.
        CHECK(wp[1] == 0);   // window 1: (-0, +0, +0, +0)
        CHECK(wp[64] == 1);  // window 64: (inf, nan, +0, +0)
        CHECK(wp[46] == 0);  // window 46: (nan, inf, +0, +0)
      }
      std::vector<std::uint32_t> dy32(static_cast<std::size_t>(c)), g32(static_cast<std::size_t>(4 * c)),
          w32(static_cast<std::size_t>(4 * c));
      for (std::size_t i = 0; i < dy32.size(); ++i) dy32[i] = 0x3f800000u + static_cast<std::uint32_t>(i);
      std::uint32_t* gp = g32.data();
      std::uint32_t* wp = w32.data();
      k.pool_backward_32(dy32.data(), want_place.data(), gp, gp + c, gp + 2 * c, gp + 3 * c, c);
      plain.pool_backward_32(dy32.data(), want_place.data(), wp, wp + c, wp + 2 * c, wp + 3 * c, c);
      CHECK(g32 == w32);
      std::vector<std::uint16_t> dy16(static_cast<std::size_t>(c)), g16(static_cast<std::size_t>(4 * c)),
          w16(static_cast<std::size_t>(4 * c));
      for (std::size_t i = 0; i < dy16.size(); ++i) dy16[i] = static_cast<std::uint16_t>(0x3c00 + i);
      k.pool_backward_16(dy16.data(), want_place.data(), g16.data(), g16.data() + c, g16.data() + 2 * c,
                         g16.data() + 3 * c, c);
      plain.pool_backward_16(dy16.data(), want_place.data(), w16.data(), w16.data() + c, w16.data() + 2 * c,
                             w16.data() + 3 * c, c);
      CHECK(g16 == w16);
      // Inference's pool+ReLU rows (blocks of 8, 16, 64 and an odd 27, two rows of windows each)
      // against the training loops' winners and torch.relu's rule, and the transpose.
      for (const std::int64_t block : {8, 16, 27, 64}) {
        const std::int64_t ow_n = 3, width = 2 * ow_n * block;
        INFO("block " << block);
        std::vector<float> rows(static_cast<std::size_t>(2 * width)), got_row(static_cast<std::size_t>(ow_n * 70)),
            want_row(got_row.size());
        for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = f[(i * 7) % f.size()];
        k.pool_relu_row_f32(rows.data(), rows.data() + width, block, ow_n, got_row.data(), 70, nullptr);
        plain.pool_relu_row_f32(rows.data(), rows.data() + width, block, ow_n, want_row.data(), 70, nullptr);
        CHECK(same_bits(got_row, want_row));
        // Training's: the same outputs, and the places the training pool and relu_after() keep.
        std::vector<float> got_train(got_row.size());
        std::vector<std::uint8_t> got_places(got_row.size(), 0xff), want_places(got_row.size(), 0xff);
        k.pool_relu_row_f32(rows.data(), rows.data() + width, block, ow_n, got_train.data(), 70, got_places.data());
        CHECK(same_bits(got_train, want_row));
        for (std::int64_t ow = 0; ow < ow_n; ++ow) {
          for (std::int64_t q = 0; q < block; ++q) {
            const float* a = rows.data() + 2 * ow * block + q;
            float win = 0;
            std::uint8_t place = 0;
            plain.pool_forward_f32(a, a + block, a + width, a + width + block, &win, &place, 1);
            float relu_win = 0;
            plain.relu_f32(&win, &relu_win, 1);
            CHECK(float_bits(want_row[static_cast<std::size_t>(ow * 70 + q)]) == float_bits(relu_win));
            // relu_after's rule: the winner's place, plus 4 where the ReLU gave +0.
            CHECK(got_places[static_cast<std::size_t>(ow * 70 + q)] == (place | (float_bits(relu_win) == 0 ? 4 : 0)));
          }
        }
      }
      // The same rows over bf16 and f16 (every bit pattern among the candidates).
      check_half_pool_relu_rows(k, plain, b, &cpu::SimdKernels::pool_relu_row_bf16,
                                &cpu::SimdKernels::pool_forward_bf16, &cpu::SimdKernels::relu_bf16);
      check_half_pool_relu_rows(k, plain, h, &cpu::SimdKernels::pool_relu_row_f16, &cpu::SimdKernels::pool_forward_f16,
                                &cpu::SimdKernels::relu_f16);
      for (const auto& [r, cols] :
           {std::pair<std::int64_t, std::int64_t>{64, 64}, {13, 21}, {8, 8}, {9, 16}, {64, 3}}) {
        std::vector<float> in(static_cast<std::size_t>(r * cols)), got_t(in.size()), want_t(in.size());
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = f[i % f.size()];
        k.transpose_f32(in.data(), got_t.data(), r, cols);
        plain.transpose_f32(in.data(), want_t.data(), r, cols);
        CHECK(same_bits(got_t, want_t));
        for (std::int64_t i = 0; i < r; ++i)
          for (std::int64_t j = 0; j < cols; ++j)
            CHECK(float_bits(want_t[static_cast<std::size_t>(j * r + i)]) ==
                  float_bits(in[static_cast<std::size_t>(i * cols + j)]));
      }
      // NCHW rows split into even and odd elements, and merged back.
      std::vector<std::uint32_t> row32(static_cast<std::size_t>(2 * c)), even32(static_cast<std::size_t>(c)),
          odd32(static_cast<std::size_t>(c)), back32(static_cast<std::size_t>(2 * c));
      for (std::size_t i = 0; i < row32.size(); ++i) row32[i] = static_cast<std::uint32_t>(i * 2654435761u);
      k.split_pairs_32(row32.data(), even32.data(), odd32.data(), c);
      for (std::int64_t i = 0; i < c; ++i) {
        CHECK(even32[static_cast<std::size_t>(i)] == row32[static_cast<std::size_t>(2 * i)]);
        CHECK(odd32[static_cast<std::size_t>(i)] == row32[static_cast<std::size_t>(2 * i + 1)]);
      }
      k.merge_pairs_32(even32.data(), odd32.data(), back32.data(), c);
      CHECK(back32 == row32);
      std::vector<std::uint16_t> row16(static_cast<std::size_t>(2 * c)), even16(static_cast<std::size_t>(c)),
          odd16(static_cast<std::size_t>(c)), back16(static_cast<std::size_t>(2 * c));
      for (std::size_t i = 0; i < row16.size(); ++i) row16[i] = static_cast<std::uint16_t>(i * 40503u);
      k.split_pairs_16(row16.data(), even16.data(), odd16.data(), c);
      k.merge_pairs_16(even16.data(), odd16.data(), back16.data(), c);
      CHECK(back16 == row16);
      CHECK(even16[3] == row16[6]);
      CHECK(odd16[c - 1] == row16[static_cast<std::size_t>(2 * c - 1)]);
    }
  }
  // A family above this CPU's is refused, not run.
  if (cpu::detected_cpu_isa() < CpuIsa::avx512_core) CHECK_THROWS_AS(cpu::simd_for(CpuIsa::avx512_core), Error);
}

TEST_CASE("capability: the first-layer convolution's taps give the plain loop's bits at every ISA", "[capability]") {
  // conv_taps_f32 (backends/cpu/conv_few_channels.h): output channels that use every register
  // blocking (32, 16 and 8 at a time), tap counts that split into blocks of every size up to 12,
  // strided rows and columns; values with every exponent class (NaN and inf propagate alike).
  const cpu::SimdKernels& plain = cpu::simd_for(CpuIsa::x86_64);
  const std::vector<float> f = special_floats();
  Generator gen(12);
  const std::int64_t rows = 3, cols = 5, col_stride = 4, row_stride = cols * col_stride + 7;
  std::vector<float> src(static_cast<std::size_t>(rows * row_stride + 2 * row_stride)), dy_values(200 * 64);
  for (auto& v : src) v = static_cast<float>(gen.uniform(-2, 2));
  for (std::size_t i = 0; i < dy_values.size(); ++i)
    dy_values[i] = i % 11 == 0 ? f[(i * 7) % f.size()] : static_cast<float>(gen.uniform(-1, 1));
  for (CpuIsa isa : runnable_isas()) {
    const cpu::SimdKernels& k = cpu::simd_for(isa);
    for (const std::int64_t oc : {8, 16, 24, 32, 40, 56, 64}) {
      for (const std::int64_t taps : {1, 5, 9, 12, 13, 28, 40}) {
        INFO("the " << cpu::cpu_isa_name(isa) << " table, " << oc << " channels, " << taps << " taps");
        std::vector<std::int64_t> tap(static_cast<std::size_t>(taps));
        for (std::int64_t t = 0; t < taps; ++t) tap[static_cast<std::size_t>(t)] = (t * 5) % (2 * row_stride);
        std::vector<float> got(static_cast<std::size_t>(taps * oc)), want(got.size());
        k.conv_taps_f32(src.data(), row_stride, col_stride, tap.data(), taps, dy_values.data(), rows, cols, oc,
                        got.data());
        plain.conv_taps_f32(src.data(), row_stride, col_stride, tap.data(), taps, dy_values.data(), rows, cols, oc,
                            want.data());
        CHECK(same_bits(got, want));
        // The plain loop is the sum it says it is.
        const std::int64_t t = taps - 1, o = oc - 1;
        float sum = 0;
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c)
            sum = std::fma(src[static_cast<std::size_t>(r * row_stride + c * col_stride + tap.back())],
                           dy_values[static_cast<std::size_t>((r * cols + c) * oc + o)], sum);
        CHECK(float_bits(want[static_cast<std::size_t>(t * oc + o)]) == float_bits(sum));
      }
    }
  }
}

TEST_CASE("capability: every backend answers for every op and dtype, and its kernels agree", "[capability]") {
  for (const auto& name : cpu_backends()) {
    Backend& backend = get_backend(name);
    INFO(name << " on ISA " << backend.isa());
    CHECK(!backend.isa().empty());
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      for (BackendOp op : kAllBackendOps) {
        const OpSupport s = backend.supports_op(op, dtype, false);
        INFO(backend_op_name(op) << " " << dtype_name(dtype) << ": " << support_name(s.level) << " " << s.how);
        CHECK(s.runs() == (backend.supports_op(op, dtype, true).runs()));  // layout does not decide on the CPU
        if (s.level != Support::native) CHECK(!s.how.empty());             // emulated and unsupported say why
        if (s.runs() || op != BackendOp::conv2d) continue;
        // What the table refuses, the kernel refuses too, with Unsupported (not a library's status).
        const Conv2dShape shape{1, 1, 3, 3, 1, 1, 1, 1, 1, 0, 0};
        std::vector<double> buffer(64);
        CHECK_THROWS_AS(
            backend.conv2d_forward(dtype, shape, buffer.data(), buffer.data(), nullptr, false, buffer.data() + 32),
            Unsupported);
      }
      // f32 runs everywhere, natively.
      CHECK(backend.supports_op(BackendOp::conv2d, DType::f32, false).level == Support::native);
      CHECK(backend.supports_op(BackendOp::linear, DType::f32, false).level == Support::native);
      // bf16 and f16 run on every CPU backend, natively or emulated (the portability promise).
      for (DType low : {DType::bf16, DType::f16}) {
        CHECK(backend.supports_op(BackendOp::conv2d, low, false).runs());
        CHECK(backend.supports_op(BackendOp::linear, low, true).runs());
      }
    }
  }
  // oneDNN's bf16 is native exactly where oneDNN has bf16 primitives (avx512_core and up).
  Backend& onednn = get_backend("onednn");
  const bool bf16_native = onednn.isa().rfind("avx512_core", 0) == 0;  // avx512_core, _vnni, _bf16, _amx, ...
  CHECK((onednn.supports_op(BackendOp::conv2d, DType::bf16, false).level == Support::native) == bf16_native);
}

TEST_CASE("capability: an unsupported combination is one line, before any step", "[capability]") {
  SECTION("the planner, through the trainer") {
    TrainConfig config;
    config.execution.backend = "eigen";
    config.execution.dtype = DType::f64;
    config.steps = 2;
    config.data.train_samples = 64;
    config.data.eval_samples = 16;
    try {
      Trainer trainer(config);
      FAIL("eigen trained in f64");
    } catch (const Unsupported& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.find('\n') == std::string::npos);
      CHECK(message.find("conv2d in f64") == 0);  // the model's first op, the one whose support varies
      CHECK(message.find("backend 'eigen' (ISA ") != std::string::npos);
      CHECK(message.find("what would work: dtype f32 (native)") != std::string::npos);
      CHECK(message.find("--backend reference (native)") != std::string::npos);
      CHECK(message.find("dnnl") == std::string::npos);
    }
  }
  SECTION("the step runner asks before its first batch") {
    Backend& backend = get_backend("eigen");
    Generator gen(1);
    SmallCNN model(InitOptions{&gen, DType::f64, &backend});
    SGD optimizer(model.named_parameters(), SgdOptions{0.01, 0.0, 0.0, 0.0, false});
    StepOptions options;
    options.dtype = DType::f64;
    options.layout = MemoryFormat::channels_last;
    CHECK_THROWS_AS(StepRunner(backend, model, optimizer, options), Unsupported);
    try {
      StepRunner runner(backend, model, optimizer, options);
    } catch (const Unsupported& e) {
      CHECK(std::string(e.what()).find("(channels_last)") != std::string::npos);
    }
  }
}

TEST_CASE("capability: the plan says what runs emulated, as each backend's table does", "[capability]") {
  for (const auto& name : cpu_backends()) {
    Backend& backend = get_backend(name);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (MemoryFormat layout : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        INFO(name << " " << dtype_name(dtype) << " " << memory_format_name(layout));
        Generator gen(2);
        SmallCNN model(InitOptions{&gen, DType::f32, &backend});
        StepOptions options;
        options.dtype = dtype;
        options.layout = layout;
        const StepPlan plan = plan_step(backend, model, options);
        CHECK(plan.backend == name);
        CHECK(plan.isa == backend.isa());
        // Every op SmallCNN's forward and the step run is in it, in the dtype it runs in.
        for (BackendOp op : {BackendOp::conv2d, BackendOp::linear, BackendOp::relu, BackendOp::max_pool2d,
                             BackendOp::bias_add, BackendOp::elementwise}) {
          bool found = false;
          for (const PlannedOp& p : plan.ops) found = found || (p.op == op && p.dtype == dtype);
          CHECK(found);
        }
        for (const PlannedOp& p : plan.ops) {
          CHECK(p.support.level == backend.supports_op(p.op, p.dtype, p.channels_last).level);
          if (p.op == BackendOp::optimizer || p.op == BackendOp::cross_entropy) CHECK(p.dtype == DType::f32);
          const std::string entry = std::string(backend_op_name(p.op)) + " " + dtype_name(p.dtype);
          CHECK((plan.emulated().find(entry + " (") != std::string::npos) == (p.support.level == Support::emulated));
        }
        if (dtype == DType::f32) CHECK(plan.emulated().empty());
      }
    }
  }
}

TEST_CASE("capability: models declare the ops their forward runs", "[capability]") {
  Generator gen(3);
  const InitOptions init{&gen, DType::f32, &get_backend("reference")};
  Sequential net;
  net.add(std::make_shared<Conv2d>(3, 4, 3, 1, 1, init))
      .add(std::make_shared<ReLU>())
      .add(std::make_shared<MaxPool2d>(2))
      .add(std::make_shared<Flatten>())
      .add(std::make_shared<Linear>(4 * 16 * 16, 10, init));
  CHECK(net.ops_used() == std::set<BackendOp>{BackendOp::elementwise, BackendOp::relu, BackendOp::bias_add,
                                              BackendOp::linear, BackendOp::conv2d, BackendOp::max_pool2d});
  // SmallCNN calls relu and max_pool2d itself, beyond its layers', and says so.
  CHECK(SmallCNN(init).ops_used() == net.ops_used());
}
