// The backend interface: everything the engine asks of a device. One folder under backends/ per
// implementation, registered by name (see registry.h); adding one touches no engine file.
//
// Conventions for every kernel below:
//  - pointers are device pointers obtained from this backend's allocate();
//  - tensors are dense row-major (contiguous) unless a Layout says otherwise;
//  - outputs are overwritten, never accumulated into (the engine accumulates gradients);
//  - what a backend runs, per op, dtype and layout, it says in supports_op() (natively, emulated
//    through f32, or not at all: backends/capability.h), and the engine asks before any work; a
//    kernel asked for a combination it does not run throws Unsupported naming the op, the dtype
//    and what it supports; bf16 and f16 kernels accumulate in f32;
//  - results must not depend on the thread count (the reference backend is bit-reproducible).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/capability.h"
#include "backends/dtype.h"
#include "backends/fusion.h"

namespace trainlab {

enum class DeviceType { cpu, cuda };
const char* device_type_name(DeviceType type);

// A strided view of a buffer, counted in elements.
struct Layout {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
};

// 4-D activations have the logical shape [N, C, H, W]; in memory they are NCHW, or NHWC when
// channels_last is set (PyTorch's channels_last memory format). Weights are always
// [C_out, C_in, kH, kW] in memory.
struct Conv2dShape {
  std::int64_t batch, in_channels, in_h, in_w;
  std::int64_t out_channels, kernel_h, kernel_w;
  std::int64_t stride_h, stride_w, pad_h, pad_w;
  bool channels_last = false;
  std::int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

struct Pool2dShape {
  std::int64_t batch, channels, in_h, in_w;
  std::int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  bool channels_last = false;
  // Then a ReLU, in the same pass (only where supports_fused(FusedPattern::pool_relu()) runs): relu(max_pool2d(x))
  // bit for bit, forward and backward (a window whose maximum is <= 0 gives +0 and no gradient).
  bool relu = false;
  std::int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

// Batch norm's operands, viewed as [outer, channels, inner] (bias_add's view): an NCHW activation
// is outer N and inner H*W, a channels_last one outer N*H*W and inner 1, a [N, C] one outer N and
// inner 1. Per channel c the statistics run over the outer x inner elements of that channel.
// The activations (x, y, residual and their gradients) are in the kernel's dtype; the affine
// parameters, the statistics and the running statistics in batch_norm_stat_dtype(dtype): f32 for
// f32, bf16 and f16 (as oneDNN and cuDNN keep them), f64 for f64.
struct BatchNormShape {
  std::int64_t outer, channels, inner;
  double eps = 1e-5;
  std::int64_t count() const { return outer * inner; }  // elements per channel
};
inline DType batch_norm_stat_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

// What follows batch norm's affine in the same pass (FusedPattern's batch_norm anchor): a residual
// added (the same shape and layout as x; null: none), then a ReLU. A backward given `y` (the
// forward's output) masks the gradient by y > 0 first; given `dresidual`, writes that masked gradient there.
struct BatchNormEpilogue {
  const void* residual = nullptr;
  bool relu = false;
};

// What batch norm's backward reads (Backend::batch_norm_backward): the forward's input, its affine
// (gamma, beta: null where none), the statistics it used (the batch's, or the running ones: mean
// and invstd), and how to mask by the epilogue's ReLU: from y, the forward's output, where a residual
// was added (y is the pre-activation's sign then), else recomputed from x (x * scale + shift > 0,
// the forward's own expression: no pass over y).
struct BatchNormSaved {
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  const void* mean = nullptr;
  const void* invstd = nullptr;
  bool batch_stats = true;
  bool relu = false;
  const void* y = nullptr;  // with relu: the output, where a residual was added; else null
};

// Batch norm in eval mode, as an inference pattern folds it into the convolution before it
// (Backend::conv2d_norm_forward): y = (conv - running_mean) / sqrt(running_var + eps) * gamma + beta,
// the convolution's weights scaled by gamma / sqrt(running_var + eps) per output channel and the
// rest its bias. gamma, beta (null: 1, 0) and the statistics in batch_norm_stat_dtype.
struct BatchNormFold {
  const void* gamma = nullptr;
  const void* beta = nullptr;
  const void* running_mean = nullptr;
  const void* running_var = nullptr;
  double eps = 1e-5;
};

// Dropout's keep decision for element i of a call: a counter-based hash of (seed, offset + i)
// (backends/counter_rng.h), so every backend draws the same mask for the same call, a resumed run
// draws the next call's, and nothing but (seed, offset) is state.
struct DropoutDraw {
  double p;  // the probability of dropping, in [0, 1)
  std::uint64_t seed, offset;
};

// Layer norm's operands: `rows` independent rows of `width` elements (the last dimension of x),
// each normalised over its own elements; gamma and beta ([width]) and the saved statistics
// ([rows]: the mean and rstd = 1 / sqrt(biased variance + eps)) in batch_norm_stat_dtype(dtype).
struct LayerNormShape {
  std::int64_t rows, width;
  double eps = 1e-5;
};

// Softmax over the last dimension of [rows, cols], of scale * x. With `causal`, the rows are
// [..., queries, cols] score rows of attention (queries = rows of each [queries, cols] block): row r
// is query q = r % queries, and key j is visible to it when j <= q + (cols - queries) (the keys
// end where the queries do, as in a decoder's cache); the others get probability 0.
struct SoftmaxShape {
  std::int64_t rows, cols;
  double scale = 1.0;
  bool causal = false;
  std::int64_t queries = 0;  // with causal: the rows of each block (cols - queries keys precede them)
};

// A batch of matrix products y[b] = op(a[b]) op(c[b]) (a's and c's batches dense, one after
// another; y [batch, m, n] dense): op(a) is [m, k], stored [m, k] or, with trans_a, [k, m]; op(c)
// is [k, n], stored [k, n] or, with trans_b, [n, k].
struct MatmulShape {
  std::int64_t batch, m, n, k;
  bool trans_a = false, trans_b = false;
};

// Fused self-attention's operands: q [batch_heads, queries, head_dim], k and v [batch_heads, keys,
// head_dim], y as q; each query row attends over softmax(scale q k^T) (with causal, query i sees the
// keys j <= i + keys - queries, as SoftmaxShape says).
struct AttentionShape {
  std::int64_t batch_heads, queries, keys, head_dim;
  double scale = 1.0;
  bool causal = false;
};

enum class BinaryOp { add, sub, mul, div };

// One SGD update with PyTorch's semantics (torch.optim.SGD):
//   d = grad + weight_decay * param
//   buf = first_step ? d : momentum * buf + (1 - dampening) * d      (when momentum != 0)
//   d = nesterov ? d + momentum * buf : buf
//   param -= lr * d
struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};

// One AdamW update with PyTorch's semantics (torch.optim.AdamW, amsgrad off); `step` counts from 1:
//   param *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  std::int64_t step;
};

// One parameter tensor of a whole-model optimiser step (sgd_step_all, adamw_step_all).
struct OptimizerSlot {
  void* param;
  const void* grad;
  void* state1;  // SGD: the momentum buffer (null without momentum); AdamW: exp_avg
  void* state2;  // AdamW: exp_avg_sq
  std::int64_t n;
  bool first_step;    // SGD: the momentum buffer starts as the gradient
  std::int64_t step;  // AdamW: this parameter's step count, from 1
  // Mixed precision: when not null, the updated parameter cast to working_dtype (bf16/f16) is
  // written here too, in the same pass (the f32-master to working-copy cast fused into the step).
  void* working = nullptr;
  DType working_dtype = DType::f32;
};

struct AllocatorStats {
  std::int64_t allocations = 0;  // calls to allocate() so far
  std::int64_t bytes_in_use = 0;
  std::int64_t peak_bytes_in_use = 0;
};

// Measures an interval on the device's own clock: a steady clock on the CPU; device events on an
// accelerator, so an asynchronous launch is not mistaken for the work it queued.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual double elapsed_s() = 0;  // waits for the interval's work to finish
  virtual const char* kind() const = 0;
};

// ---- optional capabilities ----
// What only some backends can do is an interface of its own, which a backend exposes or not
// (Backend::pinned_uploads() and the like return null where it is absent), in the way ggml asks a
// backend whether it supports an op. The engine asks for a capability and says what it needs when
// there is none; a CPU backend carries no methods that only throw.

// Page-locked host memory, and asynchronous host-to-device copies from it on the backend's copy
// stream (the loader's pin_memory).
class PinnedUploads {
 public:
  virtual ~PinnedUploads() = default;
  // Page-locked host memory, from which upload_async copies by DMA with no staging and no wait.
  virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void deallocate_pinned(void* ptr) noexcept = 0;
  // Starts copying `bytes` from pinned host memory to device memory on the copy stream, after the
  // work enqueued so far (so `dst` may be a block that work has just freed), and returns at once
  // with a ticket. Nothing waits for the copy: wait_upload(ticket) makes the compute stream wait
  // for it before the work enqueued next; upload_done(ticket) says, without blocking, whether it
  // has finished, so that its pinned source may be reused (a finished ticket is retired: waiting
  // on it later is a no-op).
  virtual std::uint64_t upload_async(void* dst, const void* pinned_src, std::size_t bytes) = 0;
  virtual void wait_upload(std::uint64_t ticket) = 0;
  virtual bool upload_done(std::uint64_t ticket) = 0;
};

// Device graphs (CUDA graphs): between begin_capture() and end_capture() the backend records the
// work it is asked for instead of running it; replay(graph) runs that work again, in capture order,
// on the same memory. While capturing nothing may wait for the device or move data to or from the
// host (synchronize, copy_from_host, copy_to_host and unscale_and_check_finite throw), and memory
// allocated or freed while capturing belongs to the graphs from then on (backends/graph_pool.h).
// Graphs must be replayed in the order they were captured.
class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  virtual void begin_capture() = 0;
  // The recorded graph's handle. Throws Error when the work could not be captured.
  virtual int end_capture() = 0;
  // Ends a capture that failed part-way, dropping what was recorded; never throws.
  virtual void abort_capture() noexcept = 0;
  virtual bool capturing() const = 0;
  virtual void replay(int graph) = 0;
};

// A point in the compute stream's work. Other streams (a communicator's) wait for it on the device
// (native() is the cudaEvent_t on a CUDA device); the host may wait for it too.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void synchronize() = 0;  // the host waits until the work before it has finished
  virtual void* native() = 0;      // the device runtime's handle (cudaEvent_t)
  // Device time from `earlier` to this event, both on the same device and both complete (waits
  // for this one): how DDP times communication against backward on a GPU.
  virtual double seconds_since(DeviceEvent& earlier) = 0;
};

// Asynchronous compute: work is queued on a stream and the host goes on. Backends that run each
// call to completion before returning (the CPU backends) do not have it, and need no events.
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // An event after the work enqueued so far on the compute stream (it never blocks the host).
  virtual std::shared_ptr<DeviceEvent> record_event() = 0;
  virtual int device_index() const = 0;  // the GPU the stream is on
};

// A weight as a backend's kernels read it (see Backend::linear_forward_keeping_weight); opaque.
class PreparedWeight {
 public:
  virtual ~PreparedWeight() = default;
};

// Inference on constant weights (the frozen model of torch.jit.freeze): while frozen, every weight
// given to a forward (conv2d_forward, linear_forward) holds the same values at the same address, so
// the backend may keep what it derives from it (the onednn backend: the weight reordered once into
// its inference primitive's layout, kept until thawed) and use inference primitives. The caller
// promises it; the backend still compares a sample of each weight's elements on every use and
// derives again where they differ (counted). thaw() drops everything kept; FrozenWeightsScope
// (engine/train/step.h) pairs the two, and a training step refuses to run while frozen.
class FrozenWeights {
 public:
  virtual ~FrozenWeights() = default;
  virtual void freeze() = 0;
  virtual void thaw() noexcept = 0;
  virtual bool frozen() const = 0;
};

// Math modes beyond IEEE arithmetic: TF32 tensor-core math for f32 GEMMs and convolutions (off by
// default).
class MathModes {
 public:
  virtual ~MathModes() = default;
  virtual void set_tf32(bool enabled) = 0;
  virtual bool tf32() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // One line for logs and ledgers: library versions, the ISA or device in use, the kernel
  // implementations chosen so far.
  virtual std::string describe() const { return name(); }
  // The device's model, the same for every row measured on it ("NVIDIA H200"); "" on the CPU, whose
  // model the ledger reads from the system.
  virtual std::string device_model() const { return ""; }
  // Named counters for checks such as "a steady-state step allocates nothing" (allocations,
  // bytes_in_use, peak_bytes_in_use, and backend-specific ones like primitives_created).
  virtual std::map<std::string, std::int64_t> counters() const;
  virtual DeviceType device_type() const = 0;
  // Whether any op runs in `dtype` here; supports_op says which, and how.
  virtual bool supports(DType dtype) const = 0;
  // What this backend runs, per op, dtype and layout (backends/capability.h): asked by the planner
  // before the first step, by the engine's ops before each kernel, and by the cross-backend
  // harness. The default: every op natively in each dtype supports() accepts.
  virtual OpSupport supports_op(BackendOp op, DType dtype, bool channels_last) const;
  // Whether this backend computes a run of ops in one call (backends/fusion.h), per dtype and
  // layout, and for the shapes given (null: in general): native where it has the fused kernel,
  // unsupported (saying why) where the caller should compose the ops. The default: a conv2d or
  // linear with its bias and ReLU (conv2d_forward's and linear_forward's arguments) wherever the
  // op runs; nothing else.
  virtual OpSupport supports_fused(const FusedPattern& pattern, DType dtype, bool channels_last,
                                   const FusedShapes& shapes = {}) const;
  // The instruction set (CPU: "avx2", "avx512_core_bf16") or device ("sm_90") the kernels were
  // chosen for; "" when it does not apply.
  virtual std::string isa() const { return ""; }
  virtual void set_num_threads(int threads) = 0;
  virtual int num_threads() const = 0;

  // ---- the optional capabilities (see above): null where this backend has none ----
  virtual PinnedUploads* pinned_uploads() { return nullptr; }
  virtual GraphCapture* graph_capture() { return nullptr; }
  virtual MathModes* math_modes() { return nullptr; }
  virtual FrozenWeights* frozen_weights() { return nullptr; }
  virtual StreamEvents* stream_events() { return nullptr; }

  // ---- memory, transfers, synchronisation, timing ----
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  virtual AllocatorStats allocator_stats() const = 0;
  // Memory this backend could still allocate, in bytes (the host's MemAvailable on the CPU, the
  // GPU's free memory on cuda); 0 when unknown. For refusing a request that cannot fit up front.
  virtual std::uint64_t memory_available_bytes() const;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void synchronize() = 0;
  virtual std::unique_ptr<Timer> make_timer() = 0;

  // ---- elementwise and reductions ----
  virtual void fill(DType dtype, void* y, std::int64_t n, double value) = 0;
  // Copies the elements of `src` viewed through `src_layout` to `dst` viewed through
  // `dst_layout`; both layouts have the same shape.
  virtual void copy_strided(DType dtype, const void* src, const Layout& src_layout, void* dst,
                            const Layout& dst_layout) = 0;
  virtual void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) = 0;
  virtual void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, std::int64_t n) = 0;
  // y = scale * x + shift
  virtual void affine(DType dtype, const void* x, void* y, std::int64_t n, double scale, double shift) = 0;
  // y += alpha * x
  virtual void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y) = 0;
  // out[0] = sum of x[0..n)
  virtual void sum(DType dtype, const void* x, std::int64_t n, void* out) = 0;

  // ---- layers: each forward next to its backward ----
  virtual void relu_forward(DType dtype, const void* x, void* y, std::int64_t n) = 0;
  // dx = dy * (y > 0), from the forward's output y
  virtual void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n) = 0;

  // The fused layers' backward through their ReLU: dx = dy * (y > 0) (as relu_backward), and,
  // when the backend fuses it, dbias = the sum of dx over outer and inner in the same pass
  // ([outer, channels, inner] as bias_add). Returns whether dbias was written; when not (the
  // default), the layer's backward-weights call computes it.
  virtual bool relu_bias_backward(DType dtype, const void* y, const void* dy, void* dx, void* dbias, std::int64_t outer,
                                  std::int64_t channels, std::int64_t inner);

  // x, y: [outer, channels, inner]; bias: [channels]
  virtual void bias_add_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer,
                                std::int64_t channels, std::int64_t inner) = 0;
  virtual void bias_add_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                                 std::int64_t inner) = 0;

  // x: [batch, in], weight: [out, in], y: [batch, out];  y = x weight^T (+ bias) (then ReLU when
  // `relu`); bias ([out]) may be null. Backward-weights also writes dbias = sum of dy over the
  // batch when dbias is not null.
  virtual void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                              std::int64_t batch, std::int64_t in_features, std::int64_t out_features) = 0;
  virtual void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                                    std::int64_t in_features, std::int64_t out_features) = 0;
  virtual void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                                       std::int64_t batch, std::int64_t in_features, std::int64_t out_features) = 0;
  // linear_forward that also returns the weight as prepared for it, where the backend prepares
  // weights (the onednn backend: reordered into its primitive's blocked layout; null elsewhere).
  // linear's forward keeps it for its backward-data, which reads the same weight in the same layout:
  // one reorder of the weight per step instead of two. A weight written between the forward and
  // its backward (an error in PyTorch) is undefined here: the backward may read the kept copy or
  // the weight as it is now, depending on the layouts the ISA's primitives chose.
  virtual std::shared_ptr<const PreparedWeight> linear_forward_keeping_weight(DType dtype, const void* x,
                                                                              const void* weight, const void* bias,
                                                                              bool relu, void* y, std::int64_t batch,
                                                                              std::int64_t in_features,
                                                                              std::int64_t out_features) {
    linear_forward(dtype, x, weight, bias, relu, y, batch, in_features, out_features);
    return nullptr;
  }
  // linear_backward_data reading `prepared` (from linear_forward_keeping_weight on `weight`; may be
  // null) where its layout is the one this primitive reads.
  virtual void linear_backward_data_prepared(DType dtype, const void* dy, const void* weight,
                                             const PreparedWeight* prepared, void* dx, std::int64_t batch,
                                             std::int64_t in_features, std::int64_t out_features) {
    (void)prepared;
    linear_backward_data(dtype, dy, weight, dx, batch, in_features, out_features);
  }

  // x: [N, C_in, H, W], weight: [C_out, C_in, kH, kW], y: [N, C_out, outH, outW] (see Conv2dShape
  // for the memory layout); y = conv(x, weight) (+ bias) (then ReLU when `relu`); bias may be null.
  // Backward-weights also writes dbias (the sum of dy over N, H, W) when dbias is not null.
  virtual void conv2d_forward(DType dtype, const Conv2dShape& shape, const void* x, const void* weight,
                              const void* bias, bool relu, void* y) = 0;
  virtual void conv2d_backward_data(DType dtype, const Conv2dShape& shape, const void* dy, const void* weight,
                                    void* dx) = 0;
  virtual void conv2d_backward_weights(DType dtype, const Conv2dShape& shape, const void* dy, const void* x,
                                       void* dweight, void* dbias) = 0;

  // The forward leaves in `workspace` (max_pool2d_workspace_bytes of it) what its backward needs to
  // route each gradient to its window's first maximum; the contents are the backend's own.
  virtual std::size_t max_pool2d_workspace_bytes(DType dtype, const Pool2dShape& shape) = 0;
  virtual void max_pool2d_forward(DType dtype, const Pool2dShape& shape, const void* x, void* y, void* workspace) = 0;
  virtual void max_pool2d_backward(DType dtype, const Pool2dShape& shape, const void* dy, const void* workspace,
                                   void* dx) = 0;

  // The convolution block in one call (FusedPattern::conv_block): y = relu(max_pool2d(conv2d(x,
  // weight) + bias)), as conv2d_forward then max_pool2d_forward with Pool2dShape::relu compute it,
  // up to the convolution's rounding (the backend may pick another implementation for the layouts
  // it is free to choose here). x is in `conv`'s layout (conv.channels_last) and is read as it is;
  // y is in `pool`'s (pool.channels_last), which may differ; the convolution's output lives only
  // inside the call. `pool` is over the convolution's output ([batch, out_channels, out_h, out_w])
  // with 2x2 windows, stride 2, no padding, `pool.relu` set; bias may be null.
  //  - places null: inference (supports_fused(conv_block(false))); nothing is kept.
  //  - places not null: training, for a block whose input needs no gradient (a network's first
  //    layer; supports_fused(conv_block(true)) for these shapes): the pool's places kept, one byte
  //    per output in [batch, out_h, out_w, channels] order (the winner's place in its window, 0..3,
  //    plus 4 where the ReLU gave +0: backends/cpu/max_pool_2x2.h), which
  //    conv2d_pool_backward_weights reads with y's gradient dy (in `pool`'s layout) for the weight
  //    and bias gradients (dbias may be null): the convolution's output and its gradient never in
  //    memory whole.
  virtual void conv2d_pool_forward(DType dtype, const Conv2dShape& conv, const Pool2dShape& pool, const void* x,
                                   const void* weight, const void* bias, void* y, std::uint8_t* places);
  virtual void conv2d_pool_backward_weights(DType dtype, const Conv2dShape& conv, const Pool2dShape& pool,
                                            const void* x, const void* dy, const std::uint8_t* places, void* dweight,
                                            void* dbias);

  // ---- batch norm (BatchNormShape: the view, the dtypes), forward next to backward ----
  // Training: per channel mean and biased variance of x over the batch; y = (x - mean) * invstd *
  // gamma + beta (gamma, beta may be null: 1 and 0), then the epilogue. save_mean and save_invstd
  // (1 / sqrt(var + eps)) keep what the backward needs. When running_mean is not null the running
  // statistics move as PyTorch's do: r = (1 - momentum) r + momentum * batch value, the variance
  // unbiased (x count / (count - 1)).
  virtual void batch_norm_forward_training(DType dtype, const BatchNormShape& shape, const void* x, const void* gamma,
                                           const void* beta, const BatchNormEpilogue& epilogue, void* y,
                                           void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                           double momentum) = 0;
  // Inference: the running statistics in place of the batch's, then the epilogue. When save_mean
  // is not null, the running mean and 1 / sqrt(running_var + eps) are written to save_mean and
  // save_invstd, for a backward in eval mode.
  virtual void batch_norm_forward_inference(DType dtype, const BatchNormShape& shape, const void* x, const void* gamma,
                                            const void* beta, const void* running_mean, const void* running_var,
                                            const BatchNormEpilogue& epilogue, void* y, void* save_mean,
                                            void* save_invstd) = 0;
  // dz = dy past the epilogue's ReLU (saved.relu: dy where the forward's pre-activation was > 0,
  // else +0; dy itself without one); dresidual = dz when not null; with xhat = (x - mean) * invstd:
  // dbeta = sum dz, dgamma = sum dz * xhat (each written when not null), and dx (when not null) =
  // gamma * invstd * (dz - dbeta / count - xhat * dgamma / count) where the statistics were the
  // batch's (saved.batch_stats), gamma * invstd * dz where they were the running ones.
  virtual void batch_norm_backward(DType dtype, const BatchNormShape& shape, const BatchNormSaved& saved,
                                   const void* dy, void* dx, void* dgamma, void* dbeta, void* dresidual) = 0;

  // ---- global average pooling: x [N, C, H, W] (NCHW or channels_last) -> y [N, C] ----
  virtual void global_avg_pool2d_forward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                         bool channels_last, const void* x, void* y) = 0;
  // dx[n, c, h, w] = dy[n, c] / spatial
  virtual void global_avg_pool2d_backward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                          bool channels_last, const void* dy, void* dx) = 0;

  // ---- dropout over n elements: mask[i] = 1 where element i is kept (DropoutDraw), else 0;
  // y = x * mask / (1 - p) (in f32 for bf16/f16, rounded once) ----
  virtual void dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n,
                               const DropoutDraw& draw) = 0;
  // dx = dy * mask * scale (scale: 1 / (1 - p))
  virtual void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n,
                                double scale) = 0;

  // ---- a transformer's layers (engine/core/ops: layer_norm, gelu, softmax, embedding, matmul) ----
  // Layer norm over each row: mean and rstd saved; y = (x - mean) rstd gamma + beta (gamma, beta
  // may be null: 1 and 0).
  virtual void layer_norm_forward(DType dtype, const LayerNormShape& shape, const void* x, const void* gamma,
                                  const void* beta, void* y, void* mean, void* rstd) = 0;
  // With xhat = (x - mean) rstd and g = dy gamma: dx = rstd (g - mean(g) - xhat mean(g xhat)) over
  // each row; dgamma = the sum over rows of dy xhat, dbeta = the sum over rows of dy (each written
  // when not null).
  virtual void layer_norm_backward(DType dtype, const LayerNormShape& shape, const void* x, const void* gamma,
                                   const void* mean, const void* rstd, const void* dy, void* dx, void* dgamma,
                                   void* dbeta) = 0;
  // GELU, the tanh form (GPT-2's): y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n) = 0;
  // dx = dy * gelu'(x), from the forward's input.
  virtual void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) = 0;
  // y = softmax(scale x) over each row (SoftmaxShape: the causal mask); a fully masked row cannot
  // occur (key j = 0 is always visible when cols >= queries).
  virtual void softmax_forward(DType dtype, const SoftmaxShape& shape, const void* x, void* y) = 0;
  // dx = scale y (dy - sum over the row of dy y), from the forward's output.
  virtual void softmax_backward(DType dtype, const SoftmaxShape& shape, const void* y, const void* dy, void* dx) = 0;
  // y[i, :] = weight[indices[i], :] for i < n; weight [vocab, width]. An index outside [0, vocab)
  // throws Error naming it.
  virtual void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight,
                                 std::int64_t vocab, std::int64_t width, void* y) = 0;
  // dweight [vocab, width] = for each row v, the sum of dy[i, :] over the i with indices[i] = v, in
  // i order (zero for a row no index names): the same bits on every run.
  virtual void embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy,
                                  std::int64_t vocab, std::int64_t width, void* dweight) = 0;
  // A batch of matrix products (MatmulShape), accumulated in f32 (f64 for f64), y overwritten.
  virtual void matmul(DType dtype, const MatmulShape& shape, const void* a, const void* b, void* y) = 0;
  // Attention in one pass (flash attention's online softmax): y = softmax(scale q k^T) v, the
  // scores never in memory whole; lse [batch_heads, queries] (batch_norm_stat_dtype) keeps each
  // row's log-sum-exp of the scaled scores for the backward.
  virtual void attention_forward(DType dtype, const AttentionShape& shape, const void* q, const void* k, const void* v,
                                 void* y, void* lse) = 0;
  // With P = exp(scale q k^T - lse) (masked), dP = dy v^T, delta = the row sums of dy * y and
  // dS = P (dP - delta): dq = scale dS k, dk = scale dS^T q, dv = P^T dy; the scores recomputed
  // tile by tile, never in memory whole.
  virtual void attention_backward(DType dtype, const AttentionShape& shape, const void* q, const void* k, const void* v,
                                  const void* y, const void* lse, const void* dy, void* dq, void* dk, void* dv) = 0;

  // Inference's convolution and batch norm in one call (FusedPattern::conv_norm): y = the epilogue
  // (a residual in y's layout added, then ReLU) of batch norm's running affine (BatchNormFold) of
  // conv2d(x, weight), the norm folded into the convolution (weights scaled per output channel,
  // rounded once to `dtype`; its shift the bias, in f32). Where supports_fused says native; the
  // default throws Unsupported naming its answer.
  virtual void conv2d_norm_forward(DType dtype, const Conv2dShape& shape, const void* x, const void* weight,
                                   const BatchNormFold& norm, const BatchNormEpilogue& epilogue, void* y);

  // logits, probs: [batch, classes]; labels (i64): [batch]; loss: one element, the batch mean of
  // -log softmax(logits)[label]. Labels outside [0, classes) throw Error.
  virtual void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels,
                                             std::int64_t batch, std::int64_t classes, void* probs, void* loss) = 0;
  // dlogits = (probs - onehot(labels)) * dloss[0] / batch
  virtual void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels,
                                              std::int64_t batch, std::int64_t classes, const void* dloss,
                                              void* dlogits) = 0;

  // The f16 loss scaler's unscale: x *= inv_scale in place; returns whether every result is finite.
  virtual bool unscale_and_check_finite(DType dtype, void* x, std::int64_t n, double inv_scale) = 0;

  // ---- optimisers (one launch over a parameter tensor) ----
  virtual void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer,
                        const SgdStep& step) = 0;
  virtual void adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                          const AdamWStep& step) = 0;
  // Every parameter in one call (one kernel launch on a GPU). `step`'s first_step (SGD) and step
  // (AdamW) are taken per slot, as are the working copies. The default calls sgd_step /
  // adamw_step per slot, then casts into the working copy.
  virtual void sgd_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& step);
  virtual void adamw_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamWStep& step);
};

}  // namespace trainlab
