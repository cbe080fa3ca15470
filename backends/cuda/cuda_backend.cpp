// The cuda backend: device memory through a caching allocator, one compute stream, cuBLAS for the
// linear layers, cuDNN for convolution (algorithms chosen once per shape and cached),
// and trainlab's own kernels (kernels/kernels.h) for everything else. Compiled when the build has
// CUDA (--preset cuda); registered as "cuda".
//
// The device is the process's one GPU (backends/device_selection.h: the local rank's, or
// TRAINLAB_CUDA_DEVICE), never a hard-coded index. Every kernel is
// enqueued on the backend's stream; synchronize() and the timers (CUDA events on that stream) are
// the only waits, apart from host transfers and the cross-entropy label check, which read back.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"
#include "backends/device_selection.h"
#include "backends/error.h"
#include "backends/graph_pool.h"
#include "backends/registry.h"
#include "kernels/kernels.h"

#include "backends/cuda/cuda_support.h"
#include "backends/cuda/cuda_transformer.h"

namespace trainlab::cuda {

namespace {

class CudaBackend final : public Backend,
                          public PinnedUploads,
                          public GraphCapture,
                          public MathModes,
                          public StreamEvents {
 public:
  CudaBackend() {
    int devices = 0;
    const cudaError_t counted = cudaGetDeviceCount(&devices);
    if (counted != cudaSuccess || devices == 0) {
      throw Error(std::string("cuda backend: no usable GPU (") +
                  (counted != cudaSuccess ? cudaGetErrorString(counted) : "no devices") +
                  "); use a CPU backend (trainlab backends lists them)");
    }
    // One device per process: the local rank's (or TRAINLAB_CUDA_DEVICE's), the same one the NCCL
    // communicator claims.
    choice_ = choose_device(placement_from_environment(), devices, std::getenv("TRAINLAB_CUDA_DEVICE"),
                            std::getenv("CUDA_VISIBLE_DEVICES"));
    device_ = process_device().claim(choice_, "cuda backend");
    CU(cudaSetDevice(device_));
    CU(cudaGetDeviceProperties(&properties_, device_));
    CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    CU(cublasCreate(&blas_));
    CU(cublasSetStream(blas_, stream_));
    CU(cudnnCreate(&dnn_));
    CU(cudnnSetStream(dnn_, stream_));
    // cuBLAS gets its workspace from us, once, so a captured GEMM never allocates (32 MiB, the
    // size NVIDIA recommends for Hopper).
    blas_workspace_ = allocator_.allocate(kBlasWorkspaceBytes);
    CU(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes));
    scratch_ = static_cast<float*>(allocator_.allocate(sizeof(float) * kernels::sum_scratch_elements(0)));
    flag_ = static_cast<int*>(allocator_.allocate(sizeof(int)));
  }
  // The backend lives until the process exits (the registry's static), after the CUDA runtime may
  // have begun its own teardown: like PyTorch, it leaves its handles, stream and cached memory to
  // the driver instead of calling into a runtime that may be gone.
  ~CudaBackend() override = default;

  std::string name() const override { return "cuda"; }
  std::string device_model() const override { return properties_.name; }
  std::string describe() const override {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    return std::string(properties_.name) + " (device " + std::to_string(device_) + ": " + choice_.reason + ", sm_" +
           std::to_string(properties_.major) + std::to_string(properties_.minor) + "), CUDA runtime " +
           std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10) + ", cuBLAS " +
           std::to_string(cublasGetProperty_version()) + ", cuDNN " + std::to_string(cudnnGetVersion()) + ", TF32 " +
           (tf32_ ? "on" : "off") + ", " + std::to_string(conv_plans_.size()) + " convolution plans" +
           (graphs_.empty() ? std::string()
                            : ", " + std::to_string(graphs_.size()) + " CUDA graphs (" +
                                  std::to_string(allocator_.graph_blocks()) + " blocks in their pool)");
  }
  std::map<std::string, std::int64_t> counters() const override {
    auto out = Backend::counters();
    out["convolution_plans"] = static_cast<std::int64_t>(conv_plans_.size());
    out["graphs"] = static_cast<std::int64_t>(graphs_.size());
    // Host traffic and host waits (DDP's device path is tested to add none in backward).
    out["copies_to_host"] = copies_to_host_;
    out["copies_from_host"] = copies_from_host_;
    out["host_waits"] = host_waits_;
    return out;
  }
  DeviceType device_type() const override { return DeviceType::cuda; }
  bool supports(DType dtype) const override {
    return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  }
  std::string isa() const override {
    return "sm_" + std::to_string(properties_.major) + std::to_string(properties_.minor);
  }
  // Every op natively in f32, bf16 and f16 (cuBLAS, cuDNN, trainlab's kernels); optimiser state
  // is f32 (mixed precision keeps f32 master weights).
  OpSupport supports_op(BackendOp op, DType dtype, bool channels_last) const override {
    if (!supports(dtype)) return Backend::supports_op(op, dtype, channels_last);
    if (op == BackendOp::optimizer && dtype != DType::f32)
      return OpSupport::unsupported("optimiser state is f32 (mixed precision keeps f32 master weights)");
    return OpSupport::native(op == BackendOp::linear || op == BackendOp::matmul ? "cuBLAS"
                             : op == BackendOp::conv2d                          ? "cuDNN"
                                                                                : "trainlab's CUDA kernels");
  }
  void set_num_threads(int) override {}
  int num_threads() const override { return 1; }
  PinnedUploads* pinned_uploads() override { return this; }
  GraphCapture* graph_capture() override { return this; }
  MathModes* math_modes() override { return this; }
  StreamEvents* stream_events() override { return this; }
  std::shared_ptr<DeviceEvent> record_event() override {
    CU(cudaSetDevice(device_));
    return std::make_shared<CudaEvent>(stream_);
  }
  int device_index() const override { return device_; }
  void set_tf32(bool enabled) override { tf32_ = enabled; }
  bool tf32() const override { return tf32_; }

  void* allocate(std::size_t bytes) override {
    CU(cudaSetDevice(device_));  // the caller's thread may not have chosen this device
    return allocator_.allocate(bytes);
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override { allocator_.deallocate(ptr, bytes); }
  AllocatorStats allocator_stats() const override { return allocator_.stats(); }
  std::uint64_t memory_available_bytes() const override {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      cudaGetLastError();  // leave no error behind for the next call
      return 0;
    }
    return free_bytes;  // not counting the caching allocator's free blocks: a lower bound
  }
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override {
    refuse_while_capturing("copy_from_host");
    ++copies_from_host_;
    if (bytes == 0) return;
    CU(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    CU(cudaStreamSynchronize(stream_));  // the host buffer may be reused as soon as this returns
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    refuse_while_capturing("copy_to_host");
    ++copies_to_host_;
    if (bytes == 0) return;
    CU(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CU(cudaStreamSynchronize(stream_));
  }
  void synchronize() override {
    refuse_while_capturing("synchronize");
    ++host_waits_;
    CU(cudaStreamSynchronize(stream_));
  }

  // Pinned memory (portable: any thread may allocate it, whatever device it has chosen) and
  // uploads on the copy stream. Each upload waits for an event marking the compute stream's work
  // so far, and records its own event, which the compute stream waits on (wait_upload) and the
  // loader polls (upload_done). Events are recycled.
  void* allocate_pinned(std::size_t bytes) override {
    CU(cudaSetDevice(device_));
    void* p = nullptr;
    CU(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocPortable));
    return p;
  }
  void deallocate_pinned(void* ptr) noexcept override {
    if (ptr != nullptr) cudaFreeHost(ptr);  // synchronises: no copy from it can still be running
  }
  std::uint64_t upload_async(void* dst, const void* pinned_src, std::size_t bytes) override {
    refuse_while_capturing("upload_async");
    std::lock_guard lock(upload_mutex_);
    cudaEvent_t after = event_locked(), done = event_locked();
    CU(cudaEventRecord(after, stream_));
    CU(cudaStreamWaitEvent(copy_stream_, after, 0));
    spare_events_.push_back(after);  // re-recording it later does not disturb the wait just enqueued
    if (bytes > 0) CU(cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice, copy_stream_));
    CU(cudaEventRecord(done, copy_stream_));
    const std::uint64_t ticket = ++last_ticket_;
    uploads_.emplace(ticket, done);
    return ticket;
  }
  void wait_upload(std::uint64_t ticket) override {
    std::lock_guard lock(upload_mutex_);
    auto it = uploads_.find(ticket);
    if (it != uploads_.end()) CU(cudaStreamWaitEvent(stream_, it->second, 0));
  }
  bool upload_done(std::uint64_t ticket) override {
    std::lock_guard lock(upload_mutex_);
    auto it = uploads_.find(ticket);
    if (it == uploads_.end()) return true;
    const cudaError_t status = cudaEventQuery(it->second);
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: do not leave it for the next launch check to find
      return false;
    }
    check(status, "cudaEventQuery (upload)");
    spare_events_.push_back(it->second);
    uploads_.erase(it);
    return true;
  }

  // CUDA graphs: the stream is captured in relaxed mode (the caching allocator may cudaMalloc a
  // new block for the graphs' pool while capturing); each graph is instantiated once and kept
  // for the life of the process, like the rest of the backend's state.
  bool capturing() const override { return capturing_; }
  void begin_capture() override {
    TL_CHECK(!capturing_, "cuda: begin_capture while a capture is already under way");
    CU(cudaStreamSynchronize(stream_));
    // The convolution workspace is shared by eager and captured work (one stream: never at once);
    // if eager work later needs a larger one, the old block must stay the graphs'.
    allocator_.give_to_graphs(workspace_);
    allocator_.begin_capture();
    const cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
    if (status != cudaSuccess) {
      allocator_.end_capture();
      check(status, "cudaStreamBeginCapture");
    }
    capturing_ = true;
  }
  int end_capture() override {
    TL_CHECK(capturing_, "cuda: end_capture without begin_capture");
    capturing_ = false;
    allocator_.end_capture();
    cudaGraph_t graph = nullptr;
    const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
    if (status != cudaSuccess || graph == nullptr) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw Error(std::string("cuda: graph capture failed: ") + cudaGetErrorString(status) +
                  " (some work in the captured step cannot be recorded in a CUDA graph)");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(instantiated, "cudaGraphInstantiate");
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size()) - 1;
  }
  void abort_capture() noexcept override {
    if (!capturing_) return;
    capturing_ = false;
    allocator_.end_capture();
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the failed capture's error is reported by whoever threw
  }
  void replay(int graph) override {
    refuse_while_capturing("replay");
    TL_CHECK(graph >= 0 && graph < static_cast<int>(graphs_.size()), "cuda: replay of graph " + std::to_string(graph) +
                                                                         ", but " + std::to_string(graphs_.size()) +
                                                                         " have been captured");
    CU(cudaGraphLaunch(graphs_[static_cast<std::size_t>(graph)], stream_));
  }
  std::unique_ptr<Timer> make_timer() override { return std::make_unique<EventTimer>(stream_); }

  void fill(DType dtype, void* y, std::int64_t n, double value) override { kernels::fill(dtype, y, n, value, stream_); }
  void copy_strided(DType dtype, const void* src, const Layout& s, void* dst, const Layout& d) override {
    TL_CHECK(s.shape == d.shape, "cuda: copy_strided with different shapes");
    kernels::copy_strided(dtype, src, s.shape.data(), s.strides.data(), s.offset, dst, d.strides.data(), d.offset,
                          static_cast<int>(s.shape.size()), stream_);
  }
  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) override {
    if (src_dtype == dst_dtype) {
      CU(cudaMemcpyAsync(dst, src, bytes_of(src_dtype, n), cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    kernels::cast(src_dtype, src, dst_dtype, dst, n, stream_);
  }
  void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, std::int64_t n) override {
    kernels::binary(static_cast<int>(op), dtype, a, b, y, n, stream_);
  }
  void affine(DType dtype, const void* x, void* y, std::int64_t n, double scale, double shift) override {
    kernels::affine(dtype, x, y, n, static_cast<float>(scale), static_cast<float>(shift), stream_);
  }
  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y) override {
    kernels::axpy(dtype, n, static_cast<float>(alpha), x, y, stream_);
  }
  void sum(DType dtype, const void* x, std::int64_t n, void* out) override {
    kernels::sum(dtype, x, n, out, scratch_, stream_);
  }

  bool unscale_and_check_finite(DType dtype, void* x, std::int64_t n, double inv_scale) override {
    refuse_while_capturing("unscale_and_check_finite (it reads the inf/NaN flag back)");
    CU(cudaMemsetAsync(flag_, 0, sizeof(int), stream_));
    kernels::unscale_and_check(dtype, x, n, static_cast<float>(inv_scale), flag_, stream_);
    int found_inf = 0;
    CU(cudaMemcpyAsync(&found_inf, flag_, sizeof found_inf, cudaMemcpyDeviceToHost, stream_));
    CU(cudaStreamSynchronize(stream_));
    return found_inf == 0;
  }

  void relu_forward(DType dtype, const void* x, void* y, std::int64_t n) override {
    kernels::relu_forward(dtype, x, y, n, stream_);
  }
  void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n) override {
    kernels::relu_backward(dtype, y, dy, dx, n, stream_);
  }
  bool relu_bias_backward(DType dtype, const void* y, const void* dy, void* dx, void* dbias, std::int64_t outer,
                          std::int64_t channels, std::int64_t inner) override {
    if (dbias == nullptr) {
      kernels::relu_backward(dtype, y, dy, dx, outer * channels * inner, stream_);
      return false;
    }
    with_partials(outer, channels, inner, [&](float* partials) {
      kernels::relu_bias_backward(dtype, y, dy, dx, dbias, outer, channels, inner, partials, stream_);
    });
    return true;
  }
  // The bias gradient's per-chunk partial sums (kernels::relu_bias_backward_scratch_elements), for
  // the length of one launch: the block goes back to the caching allocator, which hands it out again
  // only to work queued after it on this stream.
  template <typename Fn>
  void with_partials(std::int64_t outer, std::int64_t channels, std::int64_t inner, Fn&& fn) {
    with_floats(kernels::relu_bias_backward_scratch_elements(outer, channels, inner), fn);
  }
  // `count` f32 of device scratch for the launches `fn` queues.
  template <typename Fn>
  void with_floats(std::int64_t count, Fn&& fn) {
    const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(count);
    void* block = allocator_.allocate(bytes);
    try {
      fn(static_cast<float*>(block));
    } catch (...) {
      allocator_.deallocate(block, bytes);
      throw;
    }
    allocator_.deallocate(block, bytes);
  }
  void bias_grad(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                 std::int64_t inner) {
    with_partials(outer, channels, inner, [&](float* partials) {
      kernels::bias_backward(dtype, dy, dbias, outer, channels, inner, partials, stream_);
    });
  }
  void bias_add_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer,
                        std::int64_t channels, std::int64_t inner) override {
    kernels::bias_relu_forward(dtype, x, bias, y, outer, channels, inner, false, stream_);
  }
  void bias_add_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                         std::int64_t inner) override {
    bias_grad(dtype, dy, dbias, outer, channels, inner);
  }

  // Row-major y[batch, out] = x[batch, in] W[out, in]^T is, in cuBLAS's column-major terms,
  // y^T (out x batch) = op_T(W_col (in x out)) x_col (in x batch).
  void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                      std::int64_t batch, std::int64_t in, std::int64_t out) override {
    gemm(dtype, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, weight, in, x, in, y, out, "linear_forward");
    if (bias != nullptr || relu) {
      if (bias != nullptr) {
        kernels::bias_relu_forward(dtype, y, bias, y, batch, out, 1, relu, stream_);
      } else {
        kernels::relu_forward(dtype, y, y, batch * out, stream_);
      }
    }
  }
  // dx[batch, in] = dy[batch, out] W[out, in]: dx^T (in x batch) = W_col (in x out) dy_col (out x batch).
  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in, std::int64_t out) override {
    gemm(dtype, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, weight, in, dy, out, dx, in, "linear_backward_data");
  }
  // dW[out, in] = dy^T x: dW^T (in x out) = x_col (in x batch) op_T(dy_col (out x batch)).
  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                               std::int64_t batch, std::int64_t in, std::int64_t out) override {
    gemm(dtype, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, x, in, dy, out, dweight, in, "linear_backward_weights");
    if (dbias != nullptr) bias_grad(dtype, dy, dbias, batch, out, 1);
  }

  void conv2d_forward(DType dtype, const Conv2dShape& shape, const void* x, const void* weight, const void* bias,
                      bool relu, void* y) override {
    ConvPlan& plan = conv_plan(dtype, shape);
    const float one = 1.f, zero = 0.f;
    WeightCopy khwc(*this, dtype, shape, weight);
    CU(cudnnConvolutionForward(dnn_, &one, plan.x, x, plan.w, khwc.get(), plan.conv, plan.forward,
                               workspace(plan.workspace), plan.workspace, &zero, plan.y, y));
    if (bias != nullptr || relu) {
      const std::int64_t hw = shape.out_h() * shape.out_w();
      const std::int64_t n = shape.batch, c = shape.out_channels;
      if (bias == nullptr) {
        kernels::relu_forward(dtype, y, y, n * c * hw, stream_);
      } else if (shape.channels_last) {
        kernels::bias_relu_forward(dtype, y, bias, y, n * hw, c, 1, relu, stream_);
      } else {
        kernels::bias_relu_forward(dtype, y, bias, y, n, c, hw, relu, stream_);
      }
    }
  }
  void conv2d_backward_data(DType dtype, const Conv2dShape& shape, const void* dy, const void* weight,
                            void* dx) override {
    ConvPlan& plan = conv_plan(dtype, shape);
    const float one = 1.f, zero = 0.f;
    WeightCopy khwc(*this, dtype, shape, weight);
    CU(cudnnConvolutionBackwardData(dnn_, &one, plan.w, khwc.get(), plan.y, dy, plan.conv, plan.backward_data,
                                    workspace(plan.workspace), plan.workspace, &zero, plan.x, dx));
  }
  void conv2d_backward_weights(DType dtype, const Conv2dShape& shape, const void* dy, const void* x, void* dweight,
                               void* dbias) override {
    ConvPlan& plan = conv_plan(dtype, shape);
    const float one = 1.f, zero = 0.f;
    WeightCopy khwc(*this, dtype, shape, nullptr);  // channels_last: dW in KRSC, transposed back below
    CU(cudnnConvolutionBackwardFilter(dnn_, &one, plan.x, x, plan.y, dy, plan.conv, plan.backward_filter,
                                      workspace(plan.workspace), plan.workspace, &zero, plan.w,
                                      shape.channels_last ? khwc.get() : dweight));
    if (shape.channels_last) khwc.to_kcrs(dweight);
    if (dbias != nullptr) {
      const std::int64_t hw = shape.out_h() * shape.out_w();
      if (shape.channels_last) {
        bias_grad(dtype, dy, dbias, shape.batch * hw, shape.out_channels, 1);
      } else {
        bias_grad(dtype, dy, dbias, shape.batch, shape.out_channels, hw);
      }
    }
  }

  // Max-pool: trainlab's kernels (kernels/kernels.h), whose forward keeps each output's argmax in
  // the workspace (int32, as the CPU backends keep theirs) and whose backward routes each gradient
  // to it. (cuDNN's backward re-derived the argmax by comparing x with y, which no NaN passes, and
  // needed copies of both.)
  static kernels::MaxPoolShape pool_shape(const Pool2dShape& s) {
    return {s.batch,    s.channels, s.in_h,     s.in_w,  s.out_h(), s.out_w(),      s.kernel_h,
            s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w,   s.channels_last};
  }
  std::size_t max_pool2d_workspace_bytes(DType, const Pool2dShape& s) override {
    return sizeof(std::int32_t) * static_cast<std::size_t>(s.batch * s.channels * s.out_h() * s.out_w());
  }
  void max_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y, void* workspace) override {
    TL_CHECK(!s.relu, "cuda: max_pool2d_forward has no fused ReLU (supports_fused(pool_relu()) says unsupported)");
    kernels::max_pool2d_forward(dtype, pool_shape(s), x, y, static_cast<std::int32_t*>(workspace), stream_);
  }
  void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* dy, const void* workspace,
                           void* dx) override {
    kernels::max_pool2d_backward(dtype, pool_shape(s), dy, static_cast<const std::int32_t*>(workspace), dx, stream_);
  }

  // Batch norm, global average pooling, dropout: kernels/norm_kernels.cu. Batch norm's per-channel
  // coefficients live in a block of the caching allocator for the call (as with_partials').
  template <typename Fn>
  void with_coefficients(std::int64_t channels, Fn&& fn) {
    with_floats(3 * channels, fn);
  }
  static kernels::BatchNormView view(const BatchNormShape& s) { return {s.outer, s.channels, s.inner, s.eps}; }
  static const float* f32(const void* p) { return static_cast<const float*>(p); }
  static float* f32(void* p) { return static_cast<float*>(p); }
  void batch_norm_forward_training(DType dtype, const BatchNormShape& s, const void* x, const void* gamma,
                                   const void* beta, const BatchNormEpilogue& e, void* y, void* mean, void* invstd,
                                   void* rm, void* rv, double momentum) override {
    with_coefficients(s.channels, [&](float* scratch) {
      kernels::batch_norm_forward_training(dtype, view(s), x, f32(gamma), f32(beta), e.residual, e.relu, y, f32(mean),
                                           f32(invstd), f32(rm), f32(rv), static_cast<float>(momentum), scratch,
                                           stream_);
    });
  }
  void batch_norm_forward_inference(DType dtype, const BatchNormShape& s, const void* x, const void* gamma,
                                    const void* beta, const void* rm, const void* rv, const BatchNormEpilogue& e,
                                    void* y, void* mean, void* invstd) override {
    with_coefficients(s.channels, [&](float* scratch) {
      kernels::batch_norm_forward_inference(dtype, view(s), x, f32(gamma), f32(beta), f32(rm), f32(rv), e.residual,
                                            e.relu, y, f32(mean), f32(invstd), scratch, stream_);
    });
  }
  void batch_norm_backward(DType dtype, const BatchNormShape& s, const BatchNormSaved& v, const void* dy, void* dx,
                           void* dgamma, void* dbeta, void* dresidual) override {
    with_floats(5 * s.channels, [&](float* scratch) {
      kernels::batch_norm_backward(dtype, view(s), v.x, dy, v.y, v.relu, f32(v.gamma), f32(v.beta), f32(v.mean),
                                   f32(v.invstd), v.batch_stats, dx, f32(dgamma), f32(dbeta), dresidual, scratch,
                                   stream_);
    });
  }
  void global_avg_pool2d_forward(DType dtype, std::int64_t n, std::int64_t c, std::int64_t hw, bool cl, const void* x,
                                 void* y) override {
    kernels::global_avg_pool2d_forward(dtype, n, c, hw, cl, x, y, stream_);
  }
  void global_avg_pool2d_backward(DType dtype, std::int64_t n, std::int64_t c, std::int64_t hw, bool cl, const void* dy,
                                  void* dx) override {
    kernels::global_avg_pool2d_backward(dtype, n, c, hw, cl, dy, dx, stream_);
  }
  void dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n,
                       const DropoutDraw& d) override {
    kernels::dropout_forward(dtype, x, y, mask, n, d.p, d.seed, d.offset, stream_);
  }
  void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n,
                        double scale) override {
    kernels::dropout_backward(dtype, dy, mask, dx, n, static_cast<float>(scale), stream_);
  }

  void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                     std::int64_t classes, void* probs, void* loss) override {
    float* rows = static_cast<float*>(allocator_.allocate(sizeof(float) * static_cast<std::size_t>(batch)));
    try {
      kernels::softmax_cross_entropy_forward(dtype, logits, labels, batch, classes, probs, loss, rows, flag_, stream_);
      if (capturing_) {
        // A graph cannot read the label flag back: whoever replays it checks the labels it copies
        // into the graph's input (the trainer does, on the host).
        allocator_.deallocate(rows, sizeof(float) * static_cast<std::size_t>(batch));
        return;
      }
      int bad = 0;
      CU(cudaMemcpyAsync(&bad, flag_, sizeof bad, cudaMemcpyDeviceToHost, stream_));
      CU(cudaStreamSynchronize(stream_));
      if (bad != 0) {
        std::int64_t label = 0;
        CU(cudaMemcpy(&label, labels + (bad - 1), sizeof label, cudaMemcpyDeviceToHost));
        throw Error("cross_entropy: label " + std::to_string(label) + " at row " + std::to_string(bad - 1) +
                    " is outside [0, " + std::to_string(classes) + ")");
      }
    } catch (...) {
      allocator_.deallocate(rows, sizeof(float) * static_cast<std::size_t>(batch));
      throw;
    }
    allocator_.deallocate(rows, sizeof(float) * static_cast<std::size_t>(batch));
  }
  void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, const void* dloss, void* dlogits) override {
    kernels::softmax_cross_entropy_backward(dtype, probs, labels, batch, classes, dloss, dlogits, stream_);
  }

  // ---- a transformer's layers: kernels/transformer_kernels.cu and cuBLAS (cuda_transformer.cpp) ----
  void layer_norm_forward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* beta,
                          void* y, void* mean, void* rstd) override {
    transformer::layer_norm_forward(dtype, s, x, gamma, beta, y, mean, rstd, stream_);
  }
  void layer_norm_backward(DType dtype, const LayerNormShape& s, const void* x, const void* gamma, const void* mean,
                           const void* rstd, const void* dy, void* dx, void* dgamma, void* dbeta) override {
    transformer::layer_norm_backward(dtype, s, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, stream_);
  }
  void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n) override {
    kernels::gelu_forward(dtype, x, y, n, stream_);
  }
  void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) override {
    kernels::gelu_backward(dtype, x, dy, dx, n, stream_);
  }
  void softmax_forward(DType dtype, const SoftmaxShape& s, const void* x, void* y) override {
    kernels::softmax_forward(dtype, transformer::softmax_view(s), x, y, stream_);
  }
  void softmax_backward(DType dtype, const SoftmaxShape& s, const void* y, const void* dy, void* dx) override {
    kernels::softmax_backward(dtype, transformer::softmax_view(s), y, dy, dx, stream_);
  }
  void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight,
                         std::int64_t vocab, std::int64_t width, void* y) override {
    transformer::embedding_forward(dtype, indices, n, weight, vocab, width, y, flag_, capturing_, stream_);
  }
  void embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy, std::int64_t vocab,
                          std::int64_t width, void* dweight) override {
    with_floats(vocab * width, [&](float* acc) {
      kernels::embedding_backward(dtype, indices, n, dy, vocab, width, dweight, acc, stream_);
    });
  }
  void matmul(DType dtype, const MatmulShape& s, const void* a, const void* b, void* y) override {
    transformer::matmul(blas_, tf32_, dtype, s, a, b, y);
  }
  void attention_forward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v, void* y,
                         void* lse) override {
    transformer::attention_forward(dtype, s, q, k, v, y, lse, stream_);
  }
  void attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                          const void* y, const void* lse, const void* dy, void* dq, void* dk, void* dv) override {
    with_floats(s.batch_heads * s.queries, [&](float* delta) {
      transformer::attention_backward(dtype, s, q, k, v, y, lse, dy, dq, dk, dv, delta, stream_);
    });
  }

  void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer,
                const SgdStep& s) override {
    kernels::sgd_step(dtype, n, param, grad, momentum_buffer, static_cast<float>(s.lr), static_cast<float>(s.momentum),
                      static_cast<float>(s.dampening), static_cast<float>(s.weight_decay), s.nesterov, s.first_step,
                      dtype, nullptr, stream_);
  }
  // The whole model in one launch: the slot table goes to the device (a small copy on the stream).
  void sgd_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& s) override {
    std::int64_t max_n = 0;
    DType working = DType::f32;
    kernels::MultiSlot* table = upload_slots(slots, max_n, working);
    kernels::sgd_step_multi(dtype, table, static_cast<int>(slots.size()), max_n, static_cast<float>(s.lr),
                            static_cast<float>(s.momentum), static_cast<float>(s.dampening),
                            static_cast<float>(s.weight_decay), s.nesterov, working, stream_);
  }
  void adamw_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamWStep& s) override {
    std::int64_t max_n = 0;
    DType working = DType::f32;
    kernels::MultiSlot* table = upload_slots(slots, max_n, working);
    kernels::adamw_step_multi(dtype, table, static_cast<int>(slots.size()), max_n, static_cast<float>(s.lr),
                              static_cast<float>(s.beta1), static_cast<float>(s.beta2), static_cast<float>(s.eps),
                              static_cast<float>(s.weight_decay), working, stream_);
  }

  void adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  const AdamWStep& s) override {
    kernels::adamw_step(dtype, n, param, grad, exp_avg, exp_avg_sq, static_cast<float>(s.lr),
                        static_cast<float>(s.beta1), static_cast<float>(s.beta2), static_cast<float>(s.eps),
                        static_cast<float>(s.weight_decay), s.step, dtype, nullptr, stream_);
  }

 private:
  cudaEvent_t event_locked() {
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void refuse_while_capturing(const char* what) const {
    if (capturing_) {
      throw Error(std::string("cuda: ") + what +
                  " while a CUDA graph is being captured (a graph cannot wait for the device or move host data)");
    }
  }

  void gemm(DType dtype, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n, std::int64_t k,
            const void* a, std::int64_t lda, const void* b, std::int64_t ldb, void* c, std::int64_t ldc,
            const char* op) {
    const cudaDataType_t type = blas_type(dtype, op);
    const cublasComputeType_t compute =
        dtype == DType::f32 && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1.f, zero = 0.f;
    CU(cublasGemmEx(blas_, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, a, type,
                    static_cast<int>(lda), b, type, static_cast<int>(ldb), &zero, c, type, static_cast<int>(ldc),
                    compute, CUBLAS_GEMM_DEFAULT));
  }

  // Weights are [K, C, R, S] in memory (the engine's convention). With channels_last activations
  // cuDNN is given a KRSC filter, as PyTorch does: a transposed copy made per call (weights are
  // small), and dW computed in KRSC and transposed back. NCHW passes the weight through.
  class WeightCopy {
   public:
    WeightCopy(CudaBackend& backend, DType dtype, const Conv2dShape& s, const void* kcrs)
        : backend_(backend), dtype_(dtype), s_(s), kcrs_(kcrs) {
      if (!s.channels_last) return;
      bytes_ = bytes_of(dtype, s.out_channels * s.in_channels * s.kernel_h * s.kernel_w);
      krsc_ = backend.allocator_.allocate(bytes_);
      if (kcrs != nullptr) {
        // Read KCRS through a [K, R, S, C] view; write dense KRSC.
        const std::int64_t K = s.out_channels, C = s.in_channels, R = s.kernel_h, S = s.kernel_w;
        const std::int64_t shape[4] = {K, R, S, C}, from[4] = {C * R * S, S, 1, R * S},
                           to[4] = {R * S * C, S * C, C, 1};
        kernels::copy_strided(dtype, kcrs, shape, from, 0, krsc_, to, 0, 4, backend.stream_);
      }
    }
    ~WeightCopy() {
      if (krsc_) backend_.allocator_.deallocate(krsc_, bytes_);  // reused later on the same stream: ordered
    }
    WeightCopy(const WeightCopy&) = delete;
    WeightCopy& operator=(const WeightCopy&) = delete;
    const void* get() const { return s_.channels_last ? krsc_ : kcrs_; }
    void* get() { return s_.channels_last ? krsc_ : const_cast<void*>(kcrs_); }
    // KRSC (this copy) back to dense KCRS.
    void to_kcrs(void* kcrs) {
      const std::int64_t K = s_.out_channels, C = s_.in_channels, R = s_.kernel_h, S = s_.kernel_w;
      const std::int64_t shape[4] = {K, C, R, S}, from[4] = {R * S * C, 1, S * C, C}, to[4] = {C * R * S, R * S, S, 1};
      kernels::copy_strided(dtype_, krsc_, shape, from, 0, kcrs, to, 0, 4, backend_.stream_);
    }

   private:
    CudaBackend& backend_;
    DType dtype_;
    Conv2dShape s_;
    const void* kcrs_;
    void* krsc_ = nullptr;
    std::size_t bytes_ = 0;
  };

  // The slot table in device memory, reused while it is large enough. The copy is ordered on the
  // stream after the kernels that read the previous table, and a copy from pageable host memory
  // has taken the bytes by the time cudaMemcpyAsync returns, so no wait is needed.
  // The slots' working copies share one dtype (`working`; f32 when there are none).
  kernels::MultiSlot* upload_slots(const std::vector<OptimizerSlot>& slots, std::int64_t& max_n, DType& working) {
    staged_slots_.clear();
    max_n = 0;
    working = DType::f32;
    for (const OptimizerSlot& s : slots) {
      if (s.working != nullptr) {
        TL_CHECK(working == DType::f32 || working == s.working_dtype,
                 "cuda: one optimiser launch with working copies of two dtypes");
        working = s.working_dtype;
      }
      staged_slots_.push_back(
          kernels::MultiSlot{s.param, s.grad, s.state1, s.state2, s.n, s.first_step ? 1 : 0, s.step, s.working});
      max_n = std::max(max_n, s.n);
    }
    const std::size_t bytes = staged_slots_.size() * sizeof(kernels::MultiSlot);
    if (bytes > slot_table_bytes_) {
      if (slot_table_) allocator_.deallocate(slot_table_, slot_table_bytes_);
      slot_table_ = allocator_.allocate(bytes);
      slot_table_bytes_ = bytes;
    }
    if (bytes > 0) CU(cudaMemcpyAsync(slot_table_, staged_slots_.data(), bytes, cudaMemcpyHostToDevice, stream_));
    return static_cast<kernels::MultiSlot*>(slot_table_);
  }

  void* workspace(std::size_t bytes) {
    if (bytes <= workspace_bytes_) return workspace_;
    if (workspace_) allocator_.deallocate(workspace_, workspace_bytes_);
    workspace_ = allocator_.allocate(bytes);
    workspace_bytes_ = bytes;
    return workspace_;
  }

  void set_tensor(cudnnTensorDescriptor_t desc, DType dtype, bool channels_last, std::int64_t n, std::int64_t c,
                  std::int64_t h, std::int64_t w, const char* op) {
    CU(cudnnSetTensor4dDescriptor(desc, channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, dnn_type(dtype, op),
                                  static_cast<int>(n), static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }

  ConvPlan& conv_plan(DType dtype, const Conv2dShape& s) {
    const auto key =
        std::make_tuple(static_cast<int>(dtype), s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h,
                        s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.channels_last, tf32_);
    auto it = conv_plans_.find(key);
    if (it != conv_plans_.end()) return *it->second;
    auto plan = std::make_unique<ConvPlan>();
    const char* op = "conv2d";
    CU(cudnnCreateTensorDescriptor(&plan->x));
    CU(cudnnCreateTensorDescriptor(&plan->y));
    CU(cudnnCreateFilterDescriptor(&plan->w));
    CU(cudnnCreateConvolutionDescriptor(&plan->conv));
    set_tensor(plan->x, dtype, s.channels_last, s.batch, s.in_channels, s.in_h, s.in_w, op);
    set_tensor(plan->y, dtype, s.channels_last, s.batch, s.out_channels, s.out_h(), s.out_w(), op);
    // The filter as cuDNN sees it: KCRS with NCHW activations, a KRSC copy with channels_last
    // (see WeightCopy); the dimensions are given as K, C, R, S either way.
    CU(cudnnSetFilter4dDescriptor(plan->w, dnn_type(dtype, op), s.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                  static_cast<int>(s.out_channels), static_cast<int>(s.in_channels),
                                  static_cast<int>(s.kernel_h), static_cast<int>(s.kernel_w)));
    CU(cudnnSetConvolution2dDescriptor(plan->conv, static_cast<int>(s.pad_h), static_cast<int>(s.pad_w),
                                       static_cast<int>(s.stride_h), static_cast<int>(s.stride_w), 1, 1,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // f32 without TF32 must not down-convert (CUDNN_FMA_MATH); bf16/f16 use tensor cores.
    CU(cudnnSetConvolutionMathType(plan->conv, dtype != DType::f32 ? CUDNN_TENSOR_OP_MATH
                                               : tf32_             ? CUDNN_DEFAULT_MATH
                                                                   : CUDNN_FMA_MATH));
    choose_algorithms(dnn_, *plan);
    ConvPlan& ref = *plan;
    conv_plans_.emplace(key, std::move(plan));
    return ref;
  }

  int device_ = 0;
  DeviceChoice choice_;
  std::atomic<std::int64_t> copies_to_host_{0}, copies_from_host_{0}, host_waits_{0};
  cudaDeviceProp properties_{};
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // host-to-device uploads from pinned memory
  std::mutex upload_mutex_;
  std::uint64_t last_ticket_ = 0;
  std::unordered_map<std::uint64_t, cudaEvent_t> uploads_;  // in flight or not yet polled
  std::vector<cudaEvent_t> spare_events_;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  CachingAllocator allocator_;
  bool tf32_ = false;
  bool capturing_ = false;
  std::vector<cudaGraphExec_t> graphs_;
  static constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;
  void* blas_workspace_ = nullptr;
  float* scratch_ = nullptr;
  int* flag_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  void* slot_table_ = nullptr;
  std::size_t slot_table_bytes_ = 0;
  std::vector<kernels::MultiSlot> staged_slots_;
  using ConvKey = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                             std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool, bool>;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> conv_plans_;

  static int cublasGetProperty_version() {
    int major = 0, minor = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    return major * 100 + minor;
  }
};

const BackendRegistration registration(BackendInfo{"cuda", "NVIDIA GPU: cuBLAS, cuDNN and trainlab's kernels",
                                                   DeviceType::cuda, 0},
                                       [] { return std::make_unique<CudaBackend>(); });

}  // namespace

}  // namespace trainlab::cuda
