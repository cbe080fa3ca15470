// The onednn backend's class, shared by its files (not a public header: the engine reaches a backend
// through backends/registry.h only). What each file holds:
//   onednn_backend.cpp  the class's infrastructure: ISA probing, the primitive cache, operands and
//                       their reorders, weight packing, describe() and counters(), the registration
//   onednn_linear.cpp   linear: inner product, bias and ReLU fused when asked
//   onednn_conv.cpp     convolution: forward, backward-data, backward-weights
//   onednn_fused.cpp    the fused patterns it runs (backends/fusion.h): the conv block in one call
//
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
// forward's profile shows none after the first. Inference's conv blocks (conv2d_pool_forward,
// backends/fusion.h) are one call: the convolution reads x in its own layout (NCHW too) and writes the one
// oneDNN likes into scratch, a slice of the batch at a time, and the shared pool loops read it there
// (on AVX2 a 3x3 f32 channels_last convolution there is trainlab's Winograd: winograd_pool).
#pragma once

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
#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/max_pool_2x2.h"
#include "backends/registry.h"

namespace trainlab::onednn {

using dt = dnnl::memory::data_type;

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// Linear weights of at least this many elements get their gradient in the parameter's layout
// (linear_backward_weights).
inline constexpr std::int64_t kPlainGradientElements = 1 << 16;

const char* isa_name(dnnl::cpu_isa isa);

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
Operand::Pack pack_plan(const memory::desc& outer, const memory::desc& inner);

// The plan's layout from the plain matrix, bit for bit: each block is a strided tile of
// row_block x word_block words, stored transposed.
void pack_weight_blocks(const Operand::Pack& p, const void* plain, void* blocked, int threads);

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

  OpSupport matrix_op_support(BackendOp op, DType dtype, bool) const override;

  FrozenWeights* frozen_weights() override { return this; }
  // Nested scopes make the same promise: the kept weights go when the outermost one ends.
  void freeze() override {
    std::lock_guard lock(mutex_);
    ++frozen_depth_;
  }
  void thaw() noexcept override;
  bool frozen() const override {
    std::lock_guard lock(mutex_);
    return frozen_depth_ > 0;
  }

  // matmul's operands are activations, never weights: each product goes through linear_forward
  // with the frozen-weights path off (it keeps a weight by its shape, which every product of a
  // batch shares).
  void matmul(DType dtype, const MatmulShape& shape, const void* a, const void* b, void* y) override;

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
                           std::shared_ptr<const PreparedWeight>* keep);

  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in, std::int64_t out) override {
    linear_backward_data_prepared(dtype, dy, weight, nullptr, dx, batch, in, out);
  }

  void linear_backward_data_prepared(DType dtype, const void* dy, const void* weight, const PreparedWeight* prepared,
                                     void* dx, std::int64_t batch, std::int64_t in, std::int64_t out) override;

  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                               std::int64_t batch, std::int64_t in, std::int64_t out) override;

  // ---- convolution ----
  void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight, const void* bias, bool relu,
                      void* y) override;

  // Inference blocks: the convolution reads x where it lies (an NCHW input too: oneDNN's first-layer
  // kernels take it, where a reorder to channels_last would be a pass over the batch) and writes the
  // layout it likes (dst `any`: nChw16c or nChw8c by ISA for such an input); the pool reads that and
  // writes y in the engine's layout (backends/cpu/max_pool_2x2.h, forward_blocked_relu).
  // The conv block's fused forms: inference wherever the convolution runs (f32, bf16, f16, native
  // or emulated); training for the first block (conv_few_channels.h's shapes; f32, and bf16 where
  // the convolution is native: emulated, the pool would pick its winners before the rounding), whose
  // backward unpools dy an image at a time into the weight gradient's loop: conv1's output and its
  // gradient (16 MiB each at batch 128, f32) never reach memory.
  OpSupport supports_fused(const FusedPattern& pattern, DType dtype, bool channels_last,
                           const FusedShapes& shapes) const override;

  // The slices of the batch conv_pool runs at a time: about this much of the convolution's output
  // (f32 elements' worth), measured against no slices and 256 KiB to 4 MiB slices in interleaved
  // runs (SmallCNN forward only, batch 128, 2 threads: 1 MiB, 15-25% faster than none).
  static constexpr std::int64_t kSliceBytes = std::int64_t{1} << 20;

  void conv2d_pool_forward(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x, const void* weight,
                           const void* bias, void* y, std::uint8_t* places) override;

  void conv2d_pool_backward_weights(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                    const void* dy, const std::uint8_t* places, void* dweight, void* dbias) override;

  // Inference's convolution with batch norm folded in (FusedPattern::conv_norm): channels_last, f32
  // or native bf16; the weights scaled into scratch each call, the shift an f32 bias, the residual a
  // sum post-op over y (copied there first), the ReLU an eltwise post-op.
  void conv2d_norm_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight,
                           const BatchNormFold& norm, const BatchNormEpilogue& epilogue, void* y) override;

  // The conv blocks, inference's (places null) and training's.
  void conv_pool(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x, const void* weight,
                 const void* bias, void* y, std::uint8_t* places);

  // conv_pool in inference by trainlab's Winograd (cpu::winograd::Pass::inference: f32,
  // channels_last, 3x3 stride 1): the kernel transformed once, then a slice at a time, each
  // slice's channels-last output pooled while in cache; a slice whose Winograd output holds a NaN
  // or an infinity again by the direct convolution (conv_pool_slice), so that NaN lands where the
  // direct sum's does.
  void winograd_pool(const Conv2dShape& s, const Pool2dShape& p, std::int64_t slice, const void* x, const void* weight,
                     const void* bias, void* y);
  // conv_pool over one slice of the batch.
  void conv_pool_slice(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x, const void* weight,
                       const void* bias, void* y, std::uint8_t* places);

  void conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight, void* dx) override;

  void conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x, void* dweight,
                               void* dbias) override;

  // ---- max-pool: the shared CPU loops (cpu_backend.cpp). oneDNN's max pooling drops NaN and
  // gives -FLT_MAX for a window of -inf; PyTorch propagates NaN and returns -inf. ----

  std::string describe() const override;

  std::map<std::string, std::int64_t> counters() const override;

 private:
  struct Entry {
    dnnl::primitive primitive;
    std::vector<Operand> operands;
    // conv2d_pool_forward: the convolution's output, in scratch only, as channel blocks
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
  bool native_locked(DType dtype, Family family) const;
  static int index(DType dtype, Family family) {
    return (dtype == DType::bf16 ? 0 : 2) + (family == Family::conv ? 0 : 1);
  }
  bool probe_conv(dt d) const;
  bool probe_inner_product(dt d) const;
  std::string emulation_reason(DType dtype, Family family) const;

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
  ConvDescs conv_descs(DType dtype, dt c, const Conv2dShape& s) const;

  static dnnl::primitive_attr relu_attr(bool relu);

  // An operand whose primitive layout (or, emulated, dtype) may differ from the engine's: the inner
  // buffer and the reorder (engine -> primitive for inputs, primitive -> engine for outputs) are
  // made once here; where they agree the primitive uses the engine's buffer in place.
  Operand operand(const memory::desc& user_md, const memory::desc& inner_md, bool input);

  static void bind(Operand& op, const void* ptr) { op.user.set_data_handle(const_cast<void*>(ptr)); }

  // An input from the engine's layout (or its widened copy) into the primitive's, both bound.
  void reorder_in(Operand& op);

  // Binds an input: widened to f32 in scratch when emulated, then, when the primitive wants another
  // layout, reordered into scratch.
  void bind_in(Operand& op, const void* ptr, Scratch& scratch);

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
  std::shared_ptr<const PreparedWeight> prepare_weight(Operand& op, const void* ptr);

  // Binds a forward's weight. Unfrozen (`kept_key` empty) as any input, counted in weight_reorders
  // when it is reordered or widened. Frozen: from the buffer kept for (this address, the primitive
  // `kept_key`), derived on first use, and again (counted in frozen_weights_changed) when a sample of
  // the weight's elements differs from the one taken then.
  void bind_weights(Operand& op, const void* ptr, const std::string& kept_key, Scratch& scratch);

  // 32 slices of 8 bytes spread over a weight's `bytes` (all of it when smaller): what a kept weight
  // is compared by.
  static std::string weight_sample(const void* ptr, std::size_t bytes);

  // Binds an output; when the primitive writes another layout or dtype it writes scratch, and
  // finish_out moves that back.
  void bind_out(Operand& op, void* ptr, Scratch& scratch) {
    bind(op, ptr);
    if (op.widened) op.staged.set_data_handle(scratch.get(op.staged_bytes));
    if (op.reordered) op.inner.set_data_handle(scratch.get(op.inner_bytes));
  }

  // After the primitive ran: reorders an output back to the engine's layout, and narrows it to the
  // engine's dtype (rounding once, to nearest even), when needed.
  void finish_out(Operand& op);

  // Called with mutex_ held (from entry()): the implementation, and for an emulated op which.
  // A first layer's weight gradient (few input channels: backends/cpu/conv_few_channels.h) goes to
  // the table loops, which run it ~4x faster than oneDNN's kernels.
  bool conv_few_channels(DType dtype, const Conv2dShape& s);
  // An f32 3x3 convolution of stride 1, channels_last, goes to Winograd F(4x4, 3x3) where
  // TRAINLAB_CONV_ALGO chooses it for the pass (backends/cpu/conv_winograd.h: by default both
  // backward passes and inference's forwards on AVX2, where oneDNN has none); winograd() runs the forward and
  // backward-data: y [batch, h, w, out] from x [batch, h, w, in], the layer's weight (turned for the backward pass,
  // whose `in` is the layer's outputs), and returns whether every output is finite (cpu::winograd::convolve).
  bool conv_winograd(DType dtype, const Conv2dShape& s, cpu::winograd::Pass pass);
  bool winograd(std::int64_t batch, std::int64_t h, std::int64_t w, std::int64_t in, const void* x, const void* weight,
                std::int64_t out, bool backward_data, const void* bias, bool relu, void* y);

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
  bool operands_are_activations_ = false;  // inside matmul: linear_forward's "weight" is an activation
  std::map<std::pair<const void*, std::string>, Kept> kept_;
  std::int64_t weight_reorders_ = 0, frozen_weights_changed_ = 0;
  // Linear backward-data calls that read their forward's prepared weight, and those that prepared it again.
  std::int64_t kept_weight_reads_ = 0, backward_weight_reorders_ = 0;
  mutable bool probed_ = false;
  mutable bool native_[4] = {};  // index(dtype, family)
};

}  // namespace trainlab::onednn
