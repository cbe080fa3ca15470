// The onednn backend: oneDNN primitives for convolution (forward, backward-data,
// backward-weights) and inner product (each with bias and ReLU fused when asked), in f32, bf16 and
// f16. ReLU, max-pool and the casts are the shared CPU loops: oneDNN's ReLU and pool drop NaN,
// which PyTorch (and the reference) carry, and its bf16 cast flushes subnormals.
//
// bf16 and f16 on every CPU. oneDNN 2.6 has bf16 convolutions and inner products only from
// avx512_core, and f16 ones only on avx512_core_fp16. Which this CPU has is probed once (a primitive
// descriptor per family and dtype, under ONEDNN_MAX_CPU_ISA like everything oneDNN does); where
// there is none the op is emulated with autocast's semantics: the f32 primitive runs between
// reorders that widen the bf16/f16 operands (exactly) and round its outputs once, to nearest even,
// as the native primitive rounds its f32 accumulators. supports_op() says which, per op and dtype,
// and describe() names it, so a reader sees why bf16 is slower on such a machine.
//
// Primitives are created once per shape and cached with everything they need (memory objects,
// reorder primitives, the buffers their reorders write into), so a training step after warm-up
// creates no primitive and allocates nothing; counters() reports primitives_created to prove it.
//
// Layouts: a channels_last activation is handed to oneDNN as nhwc and used in place. An NCHW
// activation lets oneDNN choose its preferred (blocked) layout and is reordered in and out inside
// the op; that cost is counted in the op's time, which is what the layout knob measures. Weights
// are [O, I, kH, kW] in the engine and reordered to the primitive's layout on every call (they
// change every step), except while frozen for inference (backends/backend.h, FrozenWeights): then
// the forwards are oneDNN's inference primitives and each weight is reordered (and, emulated,
// widened) once, into a buffer kept until thawed; counters() reports weight_reorders, so a frozen
// forward's profile shows none after the first. Inference's conv blocks (conv2d_relu_max_pool2d_
// inference) are one call: the convolution reads x in its own layout (NCHW too) and writes the one
// oneDNN likes into scratch, a slice of the batch at a time, and the shared pool loops read it there.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/conv_few_channels.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/max_pool_2x2.h"
#include "backends/registry.h"

namespace trainlab::onednn {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Linear weights of at least this many elements get their gradient in the parameter's layout
// (linear_backward_weights).
constexpr std::int64_t kPlainGradientElements = 1 << 16;

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    default:
      return "other";
  }
}

// A user buffer bound to a memory object, and, when the primitive wants another layout, the
// reorder into (or out of) a buffer of that layout. Emulated (a bf16/f16 operand of an f32
// primitive), the user buffer is first widened to f32 in its own layout (`staged`), or narrowed
// from it, by trainlab's vector casts (backends/cpu/simd.h: oneDNN 2.6's own bf16 reorders below
// avx512_core are scalar reference code, ten times slower than the convolution), and only the
// change of layout is a oneDNN reorder. These buffers live only while the op runs: they come from
// the backend's caching allocator on each call, so ops share one pool of blocks instead of every
// cached primitive holding its own.
struct Operand {
  memory user;                      // the engine's layout and dtype; its data handle is set on every call
  memory staged;                    // emulated only: the engine's layout in f32
  memory inner;                     // the primitive's layout and dtype (`user` or `staged` itself when no reorder)
  dnnl::reorder to_inner, to_user;  // between `staged` (or `user`) and `inner`
  bool reordered = false, widened = false;
  // A plain [rows][cols] input into oneDNN's 2-D weight blocks (pack_weight_blocks): trainlab's
  // loop instead of the reorder primitive (which moves fc1's weight at 5-10 GB/s).
  struct Pack {
    std::int64_t rows = 0, words = 0;  // the plain matrix in 32-bit words (two bf16 per word)
    std::int64_t row_block = 0, word_block = 0;
  } pack;
  DType storage = DType::f32;  // the user buffer's dtype, when widened
  std::int64_t elements = 0;
  std::size_t inner_bytes = 0, staged_bytes = 0;
};

// oneDNN's 2-D weight blocks for `inner` from the plain `outer` ([rows][cols], row-major), when
// they are the kind pack_weight_blocks writes: blocks of row_block rows and word_block 32-bit
// words of columns, blocks in row-block-major order, inside a block the words' column-major
// order ([word][row][the word's 1 or 2 elements]): AB16b64a for f32, AB8b64a2b for bf16 (the
// VNNI pairs); no padding. Else rows == 0. (AVX2's transposed weight, ba, stays with oneDNN's
// reorder: this loop over every row measured no faster there.)
Operand::Pack pack_plan(const memory::desc& outer, const memory::desc& inner) {
  Operand::Pack none;
  const dnnl_memory_desc_t& o = outer.data;
  const dnnl_memory_desc_t& i = inner.data;
  if (o.ndims != 2 || i.ndims != 2 || o.data_type != i.data_type || o.format_kind != dnnl_blocked ||
      i.format_kind != dnnl_blocked || o.offset0 != 0 || i.offset0 != 0)
    return none;
  const std::int64_t rows = o.dims[0], cols = o.dims[1];
  const auto& ob = o.format_desc.blocking;
  if (ob.inner_nblks != 0 || ob.strides[0] != cols || ob.strides[1] != 1) return none;
  const auto& ib = i.format_desc.blocking;
  const int pair = i.data_type == dnnl_bf16 || i.data_type == dnnl_f16 ? 2 : (i.data_type == dnnl_f32 ? 1 : 0);
  if (pair == 0) return none;
  std::int64_t col_block = 0, row_block = 0;
  if (pair == 1 && ib.inner_nblks == 2 && ib.inner_idxs[0] == 1 && ib.inner_idxs[1] == 0) {
    col_block = ib.inner_blks[0];
    row_block = ib.inner_blks[1];
  } else if (pair == 2 && ib.inner_nblks == 3 && ib.inner_idxs[0] == 1 && ib.inner_idxs[1] == 0 &&
             ib.inner_idxs[2] == 1 && ib.inner_blks[2] == 2) {
    col_block = ib.inner_blks[0] * 2;
    row_block = ib.inner_blks[1];
  } else {
    return none;
  }
  if (row_block <= 0 || col_block <= 0 || rows % row_block != 0 || cols % col_block != 0) return none;
  if (i.padded_dims[0] != rows || i.padded_dims[1] != cols) return none;
  const std::int64_t block = row_block * col_block, col_blocks = cols / col_block;
  if (ib.strides[1] != block || ib.strides[0] != col_blocks * block) return none;
  return {rows, cols / pair, row_block, col_block / pair};
}

// The plan's layout from the plain matrix, bit for bit: each block is a strided tile of
// row_block x word_block words, stored transposed.
void pack_weight_blocks(const Operand::Pack& p, const void* plain, void* blocked, int threads) {
  const auto* in = static_cast<const std::uint32_t*>(plain);
  auto* out = static_cast<std::uint32_t*>(blocked);
  const std::int64_t word_blocks = p.words / p.word_block, blocks = p.rows / p.row_block * word_blocks;
  const std::int64_t size = p.row_block * p.word_block;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t r0 = b / word_blocks * p.row_block, w0 = b % word_blocks * p.word_block;
    const std::uint32_t* tile = in + r0 * p.words + w0;
    std::uint32_t* dst = out + b * size;
    for (std::int64_t r = 0; r < p.row_block; ++r) {
      const std::uint32_t* row = tile + r * p.words;
      // The next blocks of a thread read further along the same rows: a stream per row, more than
      // the hardware prefetcher follows (cold weights: 0.55 -> 0.33 ms for fc1's f32 in a test loop).
      __builtin_prefetch(row + 64);
      for (std::int64_t w = 0; w < p.word_block; ++w) dst[w * p.row_block + r] = row[w];
    }
  }
}

class OnednnBackend final : public cpu::CpuBackend, public FrozenWeights {
 public:
  OnednnBackend() : CpuBackend("onednn", /*caching=*/true), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    omp_set_num_threads(threads_);
  }
  ~OnednnBackend() override { thaw(); }

  bool supports(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  }

  std::string isa() const override { return isa_name(dnnl::get_effective_cpu_isa()); }

  OpSupport matrix_op_support(BackendOp op, DType dtype, bool) const override {
    if (dtype == DType::f32) return OpSupport::native("oneDNN f32 primitives");
    const Family family = op == BackendOp::conv2d ? Family::conv : Family::inner_product;
    if (native(dtype, family)) return OpSupport::native(std::string("oneDNN ") + dtype_name(dtype) + " primitives");
    return OpSupport::emulated(emulation_reason(dtype, family));
  }

  FrozenWeights* frozen_weights() override { return this; }
  // Nested scopes make the same promise: the kept weights go when the outermost one ends.
  void freeze() override {
    std::lock_guard lock(mutex_);
    ++frozen_depth_;
  }
  void thaw() noexcept override {
    std::lock_guard lock(mutex_);
    if (frozen_depth_ > 0 && --frozen_depth_ > 0) return;
    for (auto& [where, kept] : kept_) allocator_.deallocate(kept.data, kept.bytes);
    kept_.clear();
  }
  bool frozen() const override {
    std::lock_guard lock(mutex_);
    return frozen_depth_ > 0;
  }

  void set_num_threads(int threads) override {
    CpuBackend::set_num_threads(threads);
    omp_set_num_threads(threads);  // oneDNN (Debian's build) runs on OpenMP
  }

  // ---- casts: the shared vector loops (backends/cpu/simd.h) at every ISA, dtype.h's rounding.
  // oneDNN's bf16 reorder is one vcvtneps2bf16 on avx512_core_bf16, which flushes subnormals, and
  // scalar reference code below avx512_core (an AVX2 step spent 60% of its time in it): one rule
  // everywhere keeps the capped and native runs, and the optimiser's fused working copies
  // (CpuBackend::sgd_step_all), the same bits as a cast. ----

  // ---- ReLU: the shared CPU loops (cpu_backend.cpp). oneDNN's eltwise_relu computes
  // max(x, 0), which turns NaN into 0; PyTorch's relu carries it, and so must we. ----

  // ---- linear: inner product, bias and ReLU fused when asked ----
  // Every operand is given in the engine's dtype and layout (`user`); the primitive's own (`inner`)
  // may differ in layout (weights) and, emulated, in dtype (f32): operand() adds the reorder.
  void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                      std::int64_t batch, std::int64_t in, std::int64_t out) override {
    linear_forward_into(dtype, x, weight, bias, relu, y, batch, in, out, nullptr);
  }

  std::shared_ptr<const PreparedWeight> linear_forward_keeping_weight(DType dtype, const void* x, const void* weight,
                                                                      const void* bias, bool relu, void* y,
                                                                      std::int64_t batch, std::int64_t in,
                                                                      std::int64_t out) override {
    std::shared_ptr<const PreparedWeight> kept;
    linear_forward_into(dtype, x, weight, bias, relu, y, batch, in, out, &kept);
    return kept;
  }

  // The forward; with `keep`, a weight it reorders goes into a buffer of its own, returned there.
  void linear_forward_into(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                           std::int64_t batch, std::int64_t in, std::int64_t out,
                           std::shared_ptr<const PreparedWeight>* keep) {
    check(dtype, BackendOp::linear, false);
    guarded("linear_forward", [&] {
      Scratch scratch(*this);
      const bool inference = frozen();
      const auto prop = inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
      const std::string k = key(dtype, batch, in, out, bias != nullptr, relu);
      Entry& e = entry(inference ? "ip_inference" : "ip_fwd", k, dtype, Family::inner_product, [&](Entry& fresh, dt c) {
        const auto d = data_type(dtype);
        const memory::desc src({batch, in}, c, tag::nc), dst({batch, out}, c, tag::nc);
        const memory::desc weights_any({out, in}, c, tag::any), bias_md({out}, c, tag::x);
        const auto desc = bias ? dnnl::inner_product_forward::desc(prop, src, weights_any, bias_md, dst)
                               : dnnl::inner_product_forward::desc(prop, src, weights_any, dst);
        const dnnl::inner_product_forward::primitive_desc pd(desc, relu_attr(relu), engine_);
        fresh.operands = {operand({{batch, in}, d, tag::nc}, src, true),
                          operand({{out, in}, d, tag::oi}, pd.weights_desc(), true),
                          operand({{out}, d, tag::x}, bias_md, true), operand({{batch, out}, d, tag::nc}, dst, false)};
        fresh.primitive = dnnl::inner_product_forward(pd);
        note_impl(pd.impl_info_str(), dtype, c);
      });
      bind_in(e.operands[0], x, scratch);
      if (keep != nullptr && !inference && (e.operands[1].reordered || e.operands[1].widened))
        *keep = prepare_weight(e.operands[1], weight);
      else
        bind_weights(e.operands[1], weight, inference ? "ip|" + k : "", scratch);
      if (bias) bind_in(e.operands[2], bias, scratch);
      bind_out(e.operands[3], y, scratch);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                           {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                           {DNNL_ARG_DST, e.operands[3].inner}};
      if (bias) args[DNNL_ARG_BIAS] = e.operands[2].inner;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[3]);
      stream_.wait();
    });
  }

  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in, std::int64_t out) override {
    linear_backward_data_prepared(dtype, dy, weight, nullptr, dx, batch, in, out);
  }

  void linear_backward_data_prepared(DType dtype, const void* dy, const void* weight, const PreparedWeight* prepared,
                                     void* dx, std::int64_t batch, std::int64_t in, std::int64_t out) override {
    check(dtype, BackendOp::linear, false);
    guarded("linear_backward_data", [&] {
      Scratch scratch(*this);
      Entry& e =
          entry("ip_bwd_data", key(dtype, batch, in, out), dtype, Family::inner_product, [&](Entry& fresh, dt c) {
            const auto d = data_type(dtype);
            const memory::desc src({batch, in}, c, tag::nc), dst({batch, out}, c, tag::nc);
            const memory::desc weights_any({out, in}, c, tag::any);
            const dnnl::inner_product_forward::primitive_desc hint(
                dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, dst), engine_);
            const dnnl::inner_product_backward_data::primitive_desc pd(
                dnnl::inner_product_backward_data::desc(src, weights_any, dst), engine_, hint);
            fresh.operands = {operand({{batch, out}, d, tag::nc}, dst, true),
                              operand({{out, in}, d, tag::oi}, pd.weights_desc(), true),
                              operand({{batch, in}, d, tag::nc}, src, false)};
            fresh.primitive = dnnl::inner_product_backward_data(pd);
            note_impl(pd.impl_info_str(), dtype, c);
          });
      bind_in(e.operands[0], dy, scratch);
      const auto* kept = dynamic_cast<const KeptWeight*>(prepared);
      const void* copy = kept != nullptr && (e.operands[1].reordered || e.operands[1].widened)
                             ? kept->find(e.operands[1].inner.get_desc())
                             : nullptr;
      if (copy != nullptr) {
        bind(e.operands[1], weight);
        e.operands[1].inner.set_data_handle(const_cast<void*>(copy));
        ++kept_weight_reads_;
      } else {
        if (e.operands[1].reordered || e.operands[1].widened) ++backward_weight_reorders_;
        bind_in(e.operands[1], weight, scratch);
      }
      bind_out(e.operands[2], dx, scratch);
      e.primitive.execute(stream_, {{DNNL_ARG_DIFF_DST, e.operands[0].inner},
                                    {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                    {DNNL_ARG_DIFF_SRC, e.operands[2].inner}});
      finish_out(e.operands[2]);
      stream_.wait();
    });
  }

  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                               std::int64_t batch, std::int64_t in, std::int64_t out) override {
    check(dtype, BackendOp::linear, false);
    guarded("linear_backward_weights", [&] {
      Scratch scratch(*this);
      Entry& e = entry(
          "ip_bwd_weights", key(dtype, batch, in, out, dbias != nullptr), dtype, Family::inner_product,
          [&](Entry& fresh, dt c) {
            const auto d = data_type(dtype);
            const memory::desc src({batch, in}, c, tag::nc), dst({batch, out}, c, tag::nc);
            const memory::desc weights_any({out, in}, c, tag::any), bias_md({out}, c, tag::x);
            const dnnl::inner_product_forward::primitive_desc hint(
                dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, bias_md, dst),
                engine_);
            // A large weight's gradient in the parameter's own layout (oi) where a kernel writes it:
            // a blocked one costs a reorder back every step (fc1, 256x4096 f32 on AVX-512: brgemm
            // 1.39-1.42 ms + 0.59-0.63 reorder against gemm 1.39-1.68; docs/RESULTS.md). A small one
            // keeps the primitive's choice (fc2, 10x256: gemm 0.38-0.51 ms against 0.04 in all).
            const bool plain_gradient = out * in >= kPlainGradientElements;
            auto make_pd = [&](const memory::desc& weights) {
              const auto desc = dbias ? dnnl::inner_product_backward_weights::desc(src, weights, bias_md, dst)
                                      : dnnl::inner_product_backward_weights::desc(src, weights, dst);
              return dnnl::inner_product_backward_weights::primitive_desc(desc, engine_, hint);
            };
            dnnl::inner_product_backward_weights::primitive_desc pd;
            try {
              pd = make_pd(plain_gradient ? memory::desc({out, in}, c, tag::oi) : weights_any);
              if (plain_gradient && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) pd = make_pd(weights_any);
            } catch (const dnnl::error&) {
              if (!plain_gradient) throw;
              pd = make_pd(weights_any);
            }
            fresh.operands = {operand({{batch, in}, d, tag::nc}, src, true),
                              operand({{batch, out}, d, tag::nc}, dst, true),
                              operand({{out, in}, d, tag::oi}, pd.diff_weights_desc(), false),
                              operand({{out}, d, tag::x}, bias_md, false)};
            fresh.primitive = dnnl::inner_product_backward_weights(pd);
            note_impl(pd.impl_info_str(), dtype, c);
          });
      bind_in(e.operands[0], x, scratch);
      bind_in(e.operands[1], dy, scratch);
      bind_out(e.operands[2], dweight, scratch);
      if (dbias) bind_out(e.operands[3], dbias, scratch);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                           {DNNL_ARG_DIFF_DST, e.operands[1].inner},
                                           {DNNL_ARG_DIFF_WEIGHTS, e.operands[2].inner}};
      if (dbias) args[DNNL_ARG_DIFF_BIAS] = e.operands[3].inner;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[2]);
      if (dbias) finish_out(e.operands[3]);
      stream_.wait();
    });
  }

  // ---- convolution ----
  void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight, const void* bias, bool relu,
                      void* y) override {
    check(dtype, BackendOp::conv2d, s.channels_last);
    guarded("conv2d_forward", [&] {
      Scratch scratch(*this);
      const bool inference = frozen();
      const auto prop = inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
      const std::string k = key(dtype, s, bias != nullptr, relu);
      Entry& e = entry(inference ? "conv_inference" : "conv_fwd", k, dtype, Family::conv, [&](Entry& fresh, dt c) {
        const ConvDescs cd = conv_descs(dtype, c, s);
        const auto desc =
            bias
                ? dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                  cd.bias_inner, cd.dst_any, cd.strides, cd.padding, cd.padding)
                : dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                  cd.dst_any, cd.strides, cd.padding, cd.padding);
        const dnnl::convolution_forward::primitive_desc pd(desc, relu_attr(relu), engine_);
        fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                          operand(cd.bias, cd.bias_inner, true), operand(cd.dst, pd.dst_desc(), false)};
        fresh.primitive = dnnl::convolution_forward(pd);
        note_impl(pd.impl_info_str(), dtype, c);
      });
      bind_in(e.operands[0], x, scratch);
      bind_weights(e.operands[1], weight, inference ? "conv|" + k : "", scratch);
      if (bias) bind_in(e.operands[2], bias, scratch);
      bind_out(e.operands[3], y, scratch);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                           {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                           {DNNL_ARG_DST, e.operands[3].inner}};
      if (bias) args[DNNL_ARG_BIAS] = e.operands[2].inner;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[3]);
      stream_.wait();
    });
  }

  // Inference blocks: the convolution reads x where it lies (an NCHW input too: oneDNN's first-layer
  // kernels take it, where a reorder to channels_last would be a pass over the batch) and writes the
  // layout it likes (dst `any`: nChw16c or nChw8c by ISA for such an input); the pool reads that and
  // writes y in the engine's layout (backends/cpu/max_pool_2x2.h, forward_blocked_relu).
  bool fuses_conv_pool_inference() const override { return true; }
  // The slices of the batch conv2d_relu_max_pool2d_inference runs at a time: about this much of the
  // convolution's output (f32 elements' worth), measured against no slices and 256 KiB to 4 MiB
  // slices in interleaved runs (SmallCNN forward only, batch 128, 2 threads: 1 MiB, 15-25% faster
  // than none).
  static constexpr std::int64_t kSliceBytes = std::int64_t{1} << 20;

  void conv2d_relu_max_pool2d_inference(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                        const void* weight, const void* bias, void* y) override {
    conv_pool(dtype, s, p, x, weight, bias, y, nullptr);
  }

  // Training's first block (conv_few_channels.h's shapes; f32, and bf16 where the convolution is
  // native: emulated, the pool would pick its winners before the rounding): the inference blocks'
  // forward with the places kept, and a backward that unpools dy an image at a time into the weight
  // gradient's loop: conv1's output and its gradient (16 MiB each at batch 128, f32) never reach memory.
  bool fuses_conv_pool_training(DType dtype, const Conv2dShape& s, const Pool2dShape& p) const override {
    return (dtype == DType::f32 || (dtype == DType::bf16 && native(dtype, Family::conv))) &&
           cpu::conv_few::applies(dtype, s) && cpu::conv_few::pools_2x2(s, p) && p.relu;
  }

  void conv2d_relu_max_pool2d_forward(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                      const void* weight, const void* bias, void* y, std::uint8_t* places) override {
    TL_CHECK(fuses_conv_pool_training(dtype, s, p),
             "onednn: conv2d_relu_max_pool2d_forward takes what fuses_conv_pool_training() does");
    conv_pool(dtype, s, p, x, weight, bias, y, places);
  }

  void conv2d_relu_max_pool2d_backward_weights(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                               const void* dy, const std::uint8_t* places, void* dweight,
                                               void* dbias) override {
    TL_CHECK(fuses_conv_pool_training(dtype, s, p),
             "onednn: conv2d_relu_max_pool2d_backward_weights takes what fuses_conv_pool_training() does");
    guarded("conv2d_relu_max_pool2d_backward_weights", [&] {
      Scratch scratch(*this);
      void* workspace = scratch.get(cpu::conv_few::pooled_workspace_bytes(dtype, s, p, threads_));
      cpu::conv_few::backward_weights_pooled(dtype, s, p, x, dy, places, dweight, dbias, threads_, workspace);
    });
  }

  // The conv blocks, inference's (places null) and training's.
  void conv_pool(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x, const void* weight,
                 const void* bias, void* y, std::uint8_t* places) {
    check(dtype, BackendOp::conv2d, s.channels_last);
    TL_CHECK(cpu::conv_few::pools_2x2(s, p),
             "onednn: conv2d_relu_max_pool2d pools the convolution's output with 2x2 windows, "
             "stride 2, no padding");
    // A slice of the batch at a time, so that the convolution's output is still in this core's
    // cache when the pool reads it: slices of about kSliceBytes of it (the last one shorter).
    const auto per_sample =
        static_cast<std::int64_t>(s.out_channels * s.out_h() * s.out_w()) * static_cast<std::int64_t>(sizeof(float));
    const std::int64_t slice = std::clamp<std::int64_t>(kSliceBytes / per_sample, 1, s.batch);
    const std::size_t x_sample = dtype_size(dtype) * static_cast<std::size_t>(s.in_channels * s.in_h * s.in_w);
    const std::int64_t y_cells = p.channels * p.out_h() * p.out_w();
    const std::size_t y_sample = dtype_size(dtype) * static_cast<std::size_t>(y_cells);
    for (std::int64_t n0 = 0; n0 < s.batch; n0 += slice) {
      Conv2dShape cs = s;
      Pool2dShape ps = p;
      cs.batch = ps.batch = std::min(slice, s.batch - n0);
      conv_pool_slice(dtype, cs, ps, static_cast<const char*>(x) + static_cast<std::size_t>(n0) * x_sample, weight,
                      bias, static_cast<char*>(y) + static_cast<std::size_t>(n0) * y_sample,
                      places != nullptr ? places + n0 * y_cells : nullptr);
    }
  }

  // conv_pool over one slice of the batch.
  void conv_pool_slice(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x, const void* weight,
                       const void* bias, void* y, std::uint8_t* places) {
    guarded(places != nullptr ? "conv2d_relu_max_pool2d_forward" : "conv2d_relu_max_pool2d_inference", [&] {
      Scratch scratch(*this);
      const std::string k = key(dtype, s, bias != nullptr, p.channels_last);
      Entry& e = entry("conv_pool_inference", k, dtype, Family::conv, [&](Entry& fresh, dt c) {
        const ConvDescs cd = conv_descs(dtype, c, s);
        const memory::dims dst_dims{s.batch, s.out_channels, s.out_h(), s.out_w()};
        // The block size of a layout the pool reads (channels_last: one block of them all), 0 for
        // others. Blocks of 8 or 16 in f32, and in the 16-bit types only where no nhwc output has a
        // kernel (`lenient`: their vector pool loops take 32 channels at a time).
        auto block_of = [&](const memory::desc& d, bool lenient) -> std::int64_t {
          if (d == memory::desc(dst_dims, c, tag::nhwc)) return s.out_channels;
          if (c != dt::f32 && !lenient) return 0;
          if (s.out_channels % 16 == 0 && d == memory::desc(dst_dims, c, tag::nChw16c)) return 16;
          if (s.out_channels % 8 == 0 && d == memory::desc(dst_dims, c, tag::nChw8c)) return 8;
          return 0;
        };
        // x in place with the output oneDNN likes; else with channels_last output; else x reordered
        // too: the first of these that has a kernel (not oneDNN's reference loops) and a layout the
        // pool reads.
        const memory::desc src_here(cd.src.dims(), c, s.channels_last ? tag::nhwc : tag::nchw);
        const memory::desc dst_nhwc(dst_dims, c, tag::nhwc);
        // Each as an inference primitive, then as a training one (the same values: oneDNN 2.6 has
        // some kernels only for training, bf16's first layer on avx512_core among them).
        struct Try {
          dnnl::prop_kind prop;
          memory::desc src, dst;
        };
        const auto inference = dnnl::prop_kind::forward_inference, training = dnnl::prop_kind::forward_training;
        const Try tries[] = {{inference, src_here, cd.dst_any}, {inference, src_here, dst_nhwc},
                             {inference, cd.src_any, dst_nhwc}, {training, src_here, cd.dst_any},
                             {training, src_here, dst_nhwc},    {training, cd.src_any, dst_nhwc}};
        auto pd_of = [&](const Try& t) {
          const auto desc =
              bias ? dnnl::convolution_forward::desc(t.prop, dnnl::algorithm::convolution_direct, t.src, cd.weights_any,
                                                     cd.bias_inner, t.dst, cd.strides, cd.padding, cd.padding)
                   : dnnl::convolution_forward::desc(t.prop, dnnl::algorithm::convolution_direct, t.src, cd.weights_any,
                                                     t.dst, cd.strides, cd.padding, cd.padding);
          return dnnl::convolution_forward::primitive_desc(desc, engine_);
        };
        auto take = [&](const dnnl::convolution_forward::primitive_desc& pd, std::int64_t block) {
          fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                            operand(cd.bias, cd.bias_inner, true)};
          fresh.dst_inner = pd.dst_desc();
          fresh.dst_block = block;
          fresh.primitive = dnnl::convolution_forward(pd);
          note_impl(pd.impl_info_str(), dtype, c);
        };
        for (bool lenient : {false, true}) {
          for (const Try& t : tries) {
            const auto pd = pd_of(t);
            const std::int64_t block = block_of(pd.dst_desc(), lenient);
            if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0 || block == 0) continue;
            take(pd, block);
            return;
          }
        }
        const auto pd = pd_of(tries[std::size(tries) - 1]);  // oneDNN's reference loops, nhwc out
        take(pd, block_of(pd.dst_desc(), true));
      });
      const bool inference = frozen();
      bind_in(e.operands[0], x, scratch);
      bind_weights(e.operands[1], weight, inference ? "conv_pool|" + k : "", scratch);
      if (bias) bind_in(e.operands[2], bias, scratch);
      memory dst(e.dst_inner, engine_, scratch.get(e.dst_inner.get_size()));
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, e.operands[0].inner}, {DNNL_ARG_WEIGHTS, e.operands[1].inner}, {DNNL_ARG_DST, dst}};
      if (bias) args[DNNL_ARG_BIAS] = e.operands[2].inner;
      e.primitive.execute(stream_, args);
      stream_.wait();
      // The pool, in the convolution's dtype (emulated: f32, narrowed to y's dtype after: rounding
      // commutes with max and ReLU, so this is the composed ops' result).
      const dt c = e.dst_inner.data_type();
      const std::int64_t outputs = p.batch * p.channels * p.out_h() * p.out_w();
      void* out = c == data_type(dtype) ? y : scratch.get(static_cast<std::size_t>(outputs) * sizeof(float));
      auto pool = [&](auto* in) {
        using S = std::remove_const_t<std::remove_pointer_t<decltype(in)>>;
        cpu::pool2x2::forward_blocked_relu(in, s.batch, s.out_channels, e.dst_block, s.out_h(), s.out_w(),
                                           static_cast<S*>(out), p.channels_last, places, threads_);
      };
      if (c == dt::bf16) {
        pool(static_cast<const bf16*>(dst.get_data_handle()));
      } else if (c == dt::f16) {
        pool(static_cast<const f16*>(dst.get_data_handle()));
      } else {
        pool(static_cast<const float*>(dst.get_data_handle()));
      }
      if (out != y) CpuBackend::cast(DType::f32, out, dtype, y, outputs);
    });
  }

  void conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight, void* dx) override {
    check(dtype, BackendOp::conv2d, s.channels_last);
    guarded("conv2d_backward_data", [&] {
      Scratch scratch(*this);
      Entry& e = entry("conv_bwd_data", key(dtype, s), dtype, Family::conv, [&](Entry& fresh, dt c) {
        const ConvDescs cd = conv_descs(dtype, c, s);
        const dnnl::convolution_forward::primitive_desc hint(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            cd.src_any, cd.weights_any, cd.dst_any, cd.strides, cd.padding, cd.padding),
            engine_);
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                  cd.dst_any, cd.strides, cd.padding, cd.padding),
            engine_, hint);
        fresh.operands = {operand(cd.dst, pd.diff_dst_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                          operand(cd.src, pd.diff_src_desc(), false)};
        fresh.primitive = dnnl::convolution_backward_data(pd);
        note_impl(pd.impl_info_str(), dtype, c);
      });
      bind_in(e.operands[0], dy, scratch);
      bind_in(e.operands[1], weight, scratch);
      bind_out(e.operands[2], dx, scratch);
      e.primitive.execute(stream_, {{DNNL_ARG_DIFF_DST, e.operands[0].inner},
                                    {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                    {DNNL_ARG_DIFF_SRC, e.operands[2].inner}});
      finish_out(e.operands[2]);
      stream_.wait();
    });
  }

  void conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x, void* dweight,
                               void* dbias) override {
    check(dtype, BackendOp::conv2d, s.channels_last);
    if (conv_few_channels(dtype, s)) {
      guarded("conv2d_backward_weights", [&] {
        Scratch scratch(*this);
        void* workspace = scratch.get(cpu::conv_few::workspace_bytes(dtype, s, threads_));
        cpu::conv_few::backward_weights(dtype, s, x, dy, dweight, dbias, threads_, workspace);
      });
      return;
    }
    guarded("conv2d_backward_weights", [&] {
      Scratch scratch(*this);
      Entry& e =
          entry("conv_bwd_weights", key(dtype, s, dbias != nullptr), dtype, Family::conv, [&](Entry& fresh, dt c) {
            const ConvDescs cd = conv_descs(dtype, c, s);
            const dnnl::convolution_forward::primitive_desc hint(
                dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                cd.src_any, cd.weights_any, cd.bias_inner, cd.dst_any, cd.strides,
                                                cd.padding, cd.padding),
                engine_);
            const auto desc = dbias ? dnnl::convolution_backward_weights::desc(
                                          dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                          cd.bias_inner, cd.dst_any, cd.strides, cd.padding, cd.padding)
                                    : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                                               cd.src_any, cd.weights_any, cd.dst_any,
                                                                               cd.strides, cd.padding, cd.padding);
            const dnnl::convolution_backward_weights::primitive_desc pd(desc, engine_, hint);
            fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.dst, pd.diff_dst_desc(), true),
                              operand(cd.weights, pd.diff_weights_desc(), false),
                              operand(cd.bias, cd.bias_inner, false)};
            fresh.primitive = dnnl::convolution_backward_weights(pd);
            note_impl(pd.impl_info_str(), dtype, c);
          });
      bind_in(e.operands[0], x, scratch);
      bind_in(e.operands[1], dy, scratch);
      bind_out(e.operands[2], dweight, scratch);
      if (dbias) bind_out(e.operands[3], dbias, scratch);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                           {DNNL_ARG_DIFF_DST, e.operands[1].inner},
                                           {DNNL_ARG_DIFF_WEIGHTS, e.operands[2].inner}};
      if (dbias) args[DNNL_ARG_DIFF_BIAS] = e.operands[3].inner;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[2]);
      if (dbias) finish_out(e.operands[3]);
      stream_.wait();
    });
  }

  // ---- max-pool: the shared CPU loops (cpu_backend.cpp). oneDNN's max pooling drops NaN and
  // gives -FLT_MAX for a window of -inf; PyTorch propagates NaN and returns -inf. ----

  std::string describe() const override {
    std::lock_guard lock(mutex_);
    const auto v = dnnl::version();
    std::string impls;
    for (const auto& impl : impls_) impls += (impls.empty() ? "" : ", ") + impl;
    std::string out = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                      std::to_string(v->patch) + ", ISA " + isa_name(dnnl::get_effective_cpu_isa());
    // The low-precision paths, so that a bf16 run says why it is as fast (or slow) as it is.
    for (DType low : {DType::bf16, DType::f16}) {
      const bool conv = native_locked(low, Family::conv), ip = native_locked(low, Family::inner_product);
      out += std::string(", ") + dtype_name(low) + " " +
             (conv && ip     ? "native"
              : !conv && !ip ? "emulated (f32 primitives)"
              : conv         ? "native conv2d, emulated linear"
                             : "emulated conv2d, native linear");
    }
    out += ", " + std::to_string(primitives_created_) + " primitives";
    if (frozen_depth_ > 0) out += ", inference on frozen weights (" + std::to_string(kept_.size()) + " kept in layout)";
    if (shape_fallbacks_ > 0) out += " (" + std::to_string(shape_fallbacks_) + " emulated for want of a native one)";
    if (!impls.empty()) out += " (implementations: " + impls + ")";
    return out;
  }

  std::map<std::string, std::int64_t> counters() const override {
    std::lock_guard lock(mutex_);
    auto out = CpuBackend::counters();
    out["primitives_created"] = primitives_created_;
    out["weight_reorders"] = weight_reorders_;
    out["kept_weight_reads"] = kept_weight_reads_;
    out["backward_weight_reorders"] = backward_weight_reorders_;
    out["frozen_weights_kept"] = static_cast<std::int64_t>(kept_.size());
    out["frozen_weights_changed"] = frozen_weights_changed_;
    return out;
  }

 private:
  struct Entry {
    dnnl::primitive primitive;
    std::vector<Operand> operands;
    // conv2d_relu_max_pool2d_inference: the convolution's output, in scratch only, as channel blocks
    // of `dst_block` (pool2x2::forward_blocked_relu's layout).
    memory::desc dst_inner;
    std::int64_t dst_block = 0;
  };

  struct ConvDescs {
    memory::desc src, weights, bias, dst;                    // the engine's layouts and dtype
    memory::desc src_any, weights_any, bias_inner, dst_any;  // what the primitive may choose, in its dtype
    memory::dims strides, padding;
  };

  static dt data_type(DType dtype) { return dtype == DType::bf16 ? dt::bf16 : dtype == DType::f16 ? dt::f16 : dt::f32; }

  // The primitive families whose native low-precision support oneDNN decides by ISA.
  enum class Family { conv, inner_product };

  // Whether oneDNN has native `dtype` primitives of `family` on this CPU (f32 always): probed once,
  // by creating the forward, backward-data and backward-weights descriptors of a small shape.
  bool native(DType dtype, Family family) const {
    std::lock_guard lock(mutex_);
    return native_locked(dtype, family);
  }
  bool native_locked(DType dtype, Family family) const {
    if (dtype == DType::f32) return true;
    if (!probed_) {
      for (DType low : {DType::bf16, DType::f16}) {
        native_[index(low, Family::conv)] = probe_conv(data_type(low));
        native_[index(low, Family::inner_product)] = probe_inner_product(data_type(low));
      }
      probed_ = true;
    }
    return native_[index(dtype, family)];
  }
  static int index(DType dtype, Family family) {
    return (dtype == DType::bf16 ? 0 : 2) + (family == Family::conv ? 0 : 1);
  }
  bool probe_conv(dt d) const {
    try {
      const memory::desc src({2, 8, 8, 8}, d, tag::any), w({8, 8, 3, 3}, d, tag::any), dst({2, 8, 8, 8}, d, tag::any),
          b({8}, d, tag::x);
      const dnnl::convolution_forward::primitive_desc fwd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src,
                                          w, b, dst, {1, 1}, {1, 1}, {1, 1}),
          engine_);
      const dnnl::convolution_backward_data::primitive_desc bwd_data(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src, w, dst, {1, 1}, {1, 1},
                                                {1, 1}),
          engine_, fwd);
      const dnnl::convolution_backward_weights::primitive_desc bwd_weights(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, w, b, dst, {1, 1}, {1, 1},
                                                   {1, 1}),
          engine_, fwd);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
  bool probe_inner_product(dt d) const {
    try {
      const memory::desc src({4, 16}, d, tag::nc), w({8, 16}, d, tag::any), dst({4, 8}, d, tag::nc), b({8}, d, tag::x);
      const dnnl::inner_product_forward::primitive_desc fwd(
          dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, w, b, dst), engine_);
      const dnnl::inner_product_backward_data::primitive_desc bwd_data(
          dnnl::inner_product_backward_data::desc(src, w, dst), engine_, fwd);
      const dnnl::inner_product_backward_weights::primitive_desc bwd_weights(
          dnnl::inner_product_backward_weights::desc(src, w, b, dst), engine_, fwd);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
  std::string emulation_reason(DType dtype, Family family) const {
    const std::string what = family == Family::conv ? "convolution" : "inner product";
    const std::string needs = dtype == DType::bf16 ? "avx512_core" : "avx512_core_fp16";
    return std::string("f32 primitives on widened ") + dtype_name(dtype) + " operands, outputs rounded once: oneDNN " +
           "2.6 has no " + dtype_name(dtype) + " " + what + " below " + needs + " (this ISA: " + isa() + ")";
  }

  void check(DType dtype, BackendOp op, bool channels_last) const {
    if (!supports(dtype)) {
      throw Unsupported(unsupported_message(*this, op, dtype, channels_last, supports_op(op, dtype, channels_last)));
    }
  }

  template <typename Fn>
  void guarded(const char* op, Fn&& fn) {
    try {
      fn();
    } catch (const dnnl::error& e) {
      throw Error("onednn: " + std::string(op) + ": " + e.what() + " (dnnl status " + std::to_string(e.status) + ")");
    }
  }

  static std::string key_part(std::int64_t v) { return std::to_string(v) + ","; }
  template <typename... Args>
  static std::string key(DType dtype, Args... args) {
    std::string k = std::string(dtype_name(dtype)) + ":";
    ((k += key_part(static_cast<std::int64_t>(args))), ...);
    return k;
  }
  static std::string key(DType dtype, const Conv2dShape& s, bool a = false, bool b = false) {
    return key(dtype, s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h,
               s.stride_w, s.pad_h, s.pad_w, s.channels_last, a, b);
  }

  // The cached entry for (kind, key), built by build(entry, compute type) on first use: in `dtype`
  // where oneDNN has the family natively here, else in f32 (emulated). A shape the native family
  // cannot take after all (oneDNN has no implementation for it) is emulated too, and counted.
  template <typename Build>
  Entry& entry(const char* kind, const std::string& k, DType dtype, Family family, Build&& build) {
    const std::string full = std::string(kind) + "|" + k;
    std::lock_guard lock(mutex_);
    auto it = cache_.find(full);
    if (it != cache_.end()) return *it->second;
    const dt compute = native_locked(dtype, family) ? data_type(dtype) : dt::f32;
    auto fresh = std::make_unique<Entry>();
    try {
      build(*fresh, compute);
    } catch (const dnnl::error& e) {
      if (compute == dt::f32 || e.status != dnnl_unimplemented) throw;
      fresh = std::make_unique<Entry>();
      build(*fresh, dt::f32);
      ++shape_fallbacks_;
    }
    ++primitives_created_;
    return *cache_.emplace(full, std::move(fresh)).first->second;
  }

  // The engine's descriptors in the storage dtype; the primitive's in the compute dtype `c`.
  ConvDescs conv_descs(DType dtype, dt c, const Conv2dShape& s) const {
    const auto d = data_type(dtype);
    const tag act = s.channels_last ? tag::nhwc : tag::nchw;
    // channels_last activations are used in place; NCHW ones may be reordered to what oneDNN likes.
    const tag act_choice = s.channels_last ? tag::nhwc : tag::any;
    const memory::dims src_dims{s.batch, s.in_channels, s.in_h, s.in_w};
    const memory::dims dst_dims{s.batch, s.out_channels, s.out_h(), s.out_w()};
    const memory::dims w_dims{s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
    return ConvDescs{memory::desc(src_dims, d, act),
                     memory::desc(w_dims, d, tag::oihw),
                     memory::desc({s.out_channels}, d, tag::x),
                     memory::desc(dst_dims, d, act),
                     memory::desc(src_dims, c, act_choice),
                     memory::desc(w_dims, c, tag::any),
                     memory::desc({s.out_channels}, c, tag::x),
                     memory::desc(dst_dims, c, act_choice),
                     {s.stride_h, s.stride_w},
                     {s.pad_h, s.pad_w}};
  }

  static dnnl::primitive_attr relu_attr(bool relu) {
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      // ReLU as ELU with alpha 0: x > 0 ? x : 0 * (exp(x) - 1). oneDNN's eltwise_relu with alpha 0
      // is max(x, 0), which turns NaN into 0; this form carries NaN (0 * NaN is NaN), as PyTorch's
      // relu does. A negative x gives -0, which compares and adds as 0.
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_elu, 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    return attr;
  }

  // An operand whose primitive layout (or, emulated, dtype) may differ from the engine's: the inner
  // buffer and the reorder (engine -> primitive for inputs, primitive -> engine for outputs) are
  // made once here; where they agree the primitive uses the engine's buffer in place.
  Operand operand(const memory::desc& user_md, const memory::desc& inner_md, bool input) {
    Operand op;
    op.user = memory(user_md, engine_, DNNL_MEMORY_NONE);
    memory::desc outer_md = user_md;  // what the reorder to or from the primitive's layout sees
    if (user_md.data.data_type != inner_md.data.data_type) {
      TL_CHECK(inner_md.data.data_type == dnnl_f32, "onednn: an emulated operand's primitive must be f32");
      op.widened = true;
      op.storage = user_md.data.data_type == dnnl_bf16 ? DType::bf16 : DType::f16;
      outer_md.data.data_type = dnnl_f32;  // the same dims and strides, in f32
      op.elements = static_cast<std::int64_t>(user_md.get_size() / dtype_size(op.storage));
      op.staged_bytes = outer_md.get_size();
      op.staged = memory(outer_md, engine_, DNNL_MEMORY_NONE);
    }
    const memory& outer = op.widened ? op.staged : op.user;
    if (inner_md == outer_md) {
      op.inner = outer;
      return op;
    }
    op.inner = memory(inner_md, engine_, DNNL_MEMORY_NONE);  // bound to scratch on each call
    op.inner_bytes = inner_md.get_size();
    op.reordered = true;
    if (input) {
      op.to_inner = dnnl::reorder(outer, op.inner);
      op.pack = pack_plan(outer_md, inner_md);
    } else {
      op.to_user = dnnl::reorder(op.inner, outer);
    }
    return op;
  }

  static void bind(Operand& op, const void* ptr) { op.user.set_data_handle(const_cast<void*>(ptr)); }

  // An input from the engine's layout (or its widened copy) into the primitive's, both bound.
  void reorder_in(Operand& op) {
    memory& from = op.widened ? op.staged : op.user;
    // The pack reads 32-bit words: a bf16 view starting at an odd element takes oneDNN's reorder.
    const bool aligned = reinterpret_cast<std::uintptr_t>(from.get_data_handle()) % alignof(std::uint32_t) == 0;
    if (op.pack.rows > 0 && aligned) {
      pack_weight_blocks(op.pack, from.get_data_handle(), op.inner.get_data_handle(), threads_);
    } else {
      op.to_inner.execute(stream_, from, op.inner);
    }
  }

  // Binds an input: widened to f32 in scratch when emulated, then, when the primitive wants another
  // layout, reordered into scratch.
  void bind_in(Operand& op, const void* ptr, Scratch& scratch) {
    bind(op, ptr);
    if (op.widened) {
      void* staged = scratch.get(op.staged_bytes);
      op.staged.set_data_handle(staged);
      CpuBackend::cast(op.storage, ptr, DType::f32, staged, op.elements);
    }
    if (!op.reordered) return;
    op.inner.set_data_handle(scratch.get(op.inner_bytes));
    reorder_in(op);
  }

  // A weight as a forward's primitive read it, in buffers of its own (linear's forward keeps it for
  // its backward-data): the primitive's layout and, where an emulated dtype was widened to f32 and
  // then reordered, the widened copy in the engine's layout too.
  struct KeptWeight final : PreparedWeight {
    explicit KeptWeight(cpu::HostAllocator& a) : allocator(a) {}
    ~KeptWeight() override {
      for (const auto& copy : copies) allocator.deallocate(copy.data, copy.bytes);
    }
    KeptWeight(const KeptWeight&) = delete;
    KeptWeight& operator=(const KeptWeight&) = delete;
    void* add(const memory::desc& layout) {
      copies.push_back({layout, layout.get_size(), allocator.allocate(layout.get_size())});
      return copies.back().data;
    }
    const void* find(const memory::desc& layout) const {
      for (const auto& copy : copies)
        if (copy.layout == layout) return copy.data;
      return nullptr;
    }
    struct Copy {
      memory::desc layout;
      std::size_t bytes;
      void* data;
    };
    cpu::HostAllocator& allocator;
    std::vector<Copy> copies;
  };

  // Binds a forward's weight reordered (or, emulated, widened to f32 and perhaps reordered) into
  // buffers of its own, and returns them.
  std::shared_ptr<const PreparedWeight> prepare_weight(Operand& op, const void* ptr) {
    auto kept = std::make_shared<KeptWeight>(allocator_);
    bind(op, ptr);
    if (op.widened) {  // `staged` is `inner` itself when there is no reorder
      void* staged = kept->add(op.staged.get_desc());
      op.staged.set_data_handle(staged);
      CpuBackend::cast(op.storage, ptr, DType::f32, staged, op.elements);
    }
    if (op.reordered) {
      op.inner.set_data_handle(kept->add(op.inner.get_desc()));
      reorder_in(op);
    }
    ++weight_reorders_;
    return kept;
  }

  // Binds a forward's weight. Unfrozen (`kept_key` empty) as any input, counted in weight_reorders
  // when it is reordered or widened. Frozen: from the buffer kept for (this address, the primitive
  // `kept_key`), derived on first use, and again (counted in frozen_weights_changed) when a sample of
  // the weight's elements differs from the one taken then.
  void bind_weights(Operand& op, const void* ptr, const std::string& kept_key, Scratch& scratch) {
    if (!op.reordered && !op.widened) {
      bind(op, ptr);
      return;
    }
    if (kept_key.empty()) {
      bind_in(op, ptr, scratch);
      ++weight_reorders_;
      return;
    }
    bind(op, ptr);
    const std::size_t bytes = op.reordered ? op.inner_bytes : op.staged_bytes;
    const std::string sample = weight_sample(ptr, op.user.get_desc().get_size());
    Kept* kept = nullptr;
    bool derive = false;
    {
      std::lock_guard lock(mutex_);
      auto [it, fresh] = kept_.try_emplace({ptr, kept_key});
      kept = &it->second;
      if (fresh) {
        kept->data = allocator_.allocate(bytes);
        kept->bytes = bytes;
      } else if (kept->sample != sample) {
        ++frozen_weights_changed_;
      }
      derive = fresh || kept->sample != sample;
      kept->sample = sample;
    }
    // The primitive reads the kept buffer: the reorder's target, or (widened only) the f32 copy.
    (op.reordered ? op.inner : op.staged).set_data_handle(kept->data);
    if (!derive) return;
    ++weight_reorders_;
    if (op.widened) {
      void* staged = op.reordered ? scratch.get(op.staged_bytes) : kept->data;
      op.staged.set_data_handle(staged);
      CpuBackend::cast(op.storage, ptr, DType::f32, staged, op.elements);
    }
    if (op.reordered) {
      reorder_in(op);
      stream_.wait();
    }
  }

  // 32 slices of 8 bytes spread over a weight's `bytes` (all of it when smaller): what a kept weight
  // is compared by.
  static std::string weight_sample(const void* ptr, std::size_t bytes) {
    const auto* p = static_cast<const char*>(ptr);
    if (bytes <= 256) return std::string(p, bytes);
    std::string out;
    out.reserve(256);
    for (std::size_t i = 0; i < 32; ++i) out.append(p + (bytes - 8) * i / 31, 8);
    return out;
  }

  // Binds an output; when the primitive writes another layout or dtype it writes scratch, and
  // finish_out moves that back.
  void bind_out(Operand& op, void* ptr, Scratch& scratch) {
    bind(op, ptr);
    if (op.widened) op.staged.set_data_handle(scratch.get(op.staged_bytes));
    if (op.reordered) op.inner.set_data_handle(scratch.get(op.inner_bytes));
  }

  // After the primitive ran: reorders an output back to the engine's layout, and narrows it to the
  // engine's dtype (rounding once, to nearest even), when needed.
  void finish_out(Operand& op) {
    if (op.reordered) op.to_user.execute(stream_, op.inner, op.widened ? op.staged : op.user);
    if (op.widened) {
      stream_.wait();
      CpuBackend::cast(DType::f32, op.staged.get_data_handle(), op.storage, op.user.get_data_handle(), op.elements);
    }
  }

  // Called with mutex_ held (from entry()): the implementation, and for an emulated op which.
  // A first layer's weight gradient (few input channels: backends/cpu/conv_few_channels.h) goes to
  // the table loops, which run it ~4x faster than oneDNN's kernels.
  bool conv_few_channels(DType dtype, const Conv2dShape& s) {
    if (!cpu::conv_few::applies(dtype, s)) return false;
    std::lock_guard lock(mutex_);
    impls_.insert(std::string("trainlab conv_few_channels:") + cpu::cpu_isa_name(cpu::simd().isa) + " for " +
                  dtype_name(dtype) + " first-layer weight gradients");
    return true;
  }

  void note_impl(const char* impl, DType dtype, dt compute) {
    impls_.insert(compute == data_type(dtype) ? std::string(impl)
                                              : std::string(impl) + " for " + dtype_name(dtype) + ", emulated");
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> cache_;
  std::set<std::string> impls_;
  std::int64_t primitives_created_ = 0;
  std::int64_t shape_fallbacks_ = 0;
  // Frozen weights (FrozenWeights): each weight in its inference primitive's layout, by (address,
  // primitive), in blocks of the caching allocator until thawed.
  struct Kept {
    void* data = nullptr;
    std::size_t bytes = 0;
    std::string sample;  // weight_sample() of the weight it was derived from
  };
  int frozen_depth_ = 0;
  std::map<std::pair<const void*, std::string>, Kept> kept_;
  std::int64_t weight_reorders_ = 0, frozen_weights_changed_ = 0;
  // Linear backward-data calls that read their forward's prepared weight, and those that prepared it again.
  std::int64_t kept_weight_reads_ = 0, backward_weight_reorders_ = 0;
  mutable bool probed_ = false;
  mutable bool native_[4] = {};  // index(dtype, family)
};

const BackendRegistration registration{
    BackendInfo{"onednn",
                "oneDNN primitives (conv, inner product, reorders) in f32, bf16 and f16 (emulated through f32 where "
                "the ISA has none), NCHW and channels-last",
                DeviceType::cpu, 20},
    [] { return std::make_unique<OnednnBackend>(); }};

}  // namespace
}  // namespace trainlab::onednn
