// The cuda backend's support pieces (cuda_backend.cpp's and cuda_transformer.cpp's): error checks,
// dtype mappings, the caching allocator, the event timer and device event, a convolution's cuDNN
// plan and the choice of its algorithms.
#pragma once

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
#include "backends/error.h"
#include "backends/graph_pool.h"

namespace trainlab::cuda {

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw Error(std::string("cuda: ") + call + " failed: " + cudaGetErrorString(status) + " (" +
                cudaGetErrorName(status) + ")");
  }
}
inline void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cuda: ") + call + " failed: " + cublasGetStatusString(status));
  }
}
inline void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw Error(std::string("cuda: ") + call + " failed: " + cudnnGetErrorString(status));
  }
}
#define CU(call) check((call), #call)

inline cudaDataType_t blas_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      throw Error(std::string("cuda: ") + op + ": dtype " + dtype_name(dtype) + " is not supported (f32, bf16, f16)");
  }
}

inline cudnnDataType_t dnn_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      throw Error(std::string("cuda: ") + op + ": dtype " + dtype_name(dtype) + " is not supported (f32, bf16, f16)");
  }
}

// Device memory, cached: a freed block goes to a free list keyed by its rounded size and is handed
// out again, so a steady-state training step makes no cudaMalloc. While a graph is being captured,
// blocks come from and go back to the graphs' own pool (backends/graph_pool.h).
class CachingAllocator {
 public:
  // No destructor work: the allocator lives until exit, and the driver reclaims device memory then
  // (see ~CudaBackend).
  static std::size_t round(std::size_t bytes) {
    if (bytes <= 512) return 512;
    if (bytes <= (1u << 20)) return (bytes + 511) / 512 * 512;
    return (bytes + (1u << 20) - 1) / (1u << 20) * (1u << 20);  // 1 MiB granules above 1 MiB
  }
  void* allocate(std::size_t bytes) {
    const std::size_t size = round(bytes);
    std::lock_guard lock(mutex_);
    stats_.bytes_in_use += static_cast<std::int64_t>(size);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    if (graphs_.capturing()) {
      if (void* p = graphs_.take(size)) return p;
    } else {
      auto& list = free_[size];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, size);
    if (status == cudaErrorMemoryAllocation && !graphs_.capturing()) {
      // Give the cached blocks back to the driver and try once more before failing.
      cudaGetLastError();
      for (auto& [s, blocks] : free_) {
        for (void* q : blocks) cudaFree(q);
        blocks.clear();
      }
      status = cudaMalloc(&p, size);
    }
    if (status != cudaSuccess) {
      stats_.bytes_in_use -= static_cast<std::int64_t>(size);
      throw Error("cuda: cudaMalloc of " + std::to_string(size) + " bytes failed: " + cudaGetErrorString(status));
    }
    ++stats_.allocations;  // counts only real device allocations
    if (graphs_.capturing()) graphs_.adopt(p);
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept {
    if (p == nullptr) return;
    const std::size_t size = round(bytes);
    std::lock_guard lock(mutex_);
    stats_.bytes_in_use -= static_cast<std::int64_t>(size);
    if (graphs_.give_back(p, size)) return;
    free_[size].push_back(p);
  }
  void begin_capture() {
    std::lock_guard lock(mutex_);
    graphs_.begin_capture();
  }
  // A block allocated eagerly that captured work will use (the convolution workspace): from now on
  // it belongs to the graphs, so freeing it never hands it to eager work.
  void give_to_graphs(void* p) {
    std::lock_guard lock(mutex_);
    if (p != nullptr) graphs_.adopt(p);
  }
  void end_capture() {
    std::lock_guard lock(mutex_);
    graphs_.end_capture();
  }
  std::size_t graph_blocks() const {
    std::lock_guard lock(mutex_);
    return graphs_.blocks();
  }
  AllocatorStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  GraphPool graphs_;
  AllocatorStats stats_;
};

class EventTimer final : public Timer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    CU(cudaEventCreate(&start_));
    CU(cudaEventCreate(&stop_));
  }
  ~EventTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() override { CU(cudaEventRecord(start_, stream_)); }
  void stop() override { CU(cudaEventRecord(stop_, stream_)); }
  double elapsed_s() override {
    CU(cudaEventSynchronize(stop_));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }
  const char* kind() const override { return "cuda events"; }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// A point in the compute stream (StreamEvents), with timing (DDP's overlap on the device's clock).
class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(cudaStream_t stream) {
    CU(cudaEventCreate(&event_));
    CU(cudaEventRecord(event_, stream));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void synchronize() override { CU(cudaEventSynchronize(event_)); }
  void* native() override { return event_; }
  double seconds_since(DeviceEvent& earlier) override {
    CU(cudaEventSynchronize(event_));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(earlier.native()), event_));
    return ms * 1e-3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// cuDNN descriptors and chosen algorithms for one convolution shape.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward_data{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter{};
  std::size_t workspace = 0;
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// The convolution's algorithms and their workspace, for a plan whose descriptors are set. The
// heuristics' ranked lists may hold unsupported entries: the first that cuDNN reports as supported
// is taken, a deterministic one first (the same gradients every run).
inline void choose_algorithms(cudnnHandle_t dnn, ConvPlan& plan) {
  auto pick = [](const auto* perf, int found, const char* what) {
    int chosen = -1;
    for (int i = 0; i < found && chosen < 0; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC) chosen = i;
    for (int i = 0; i < found && chosen < 0; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) chosen = i;
    TL_CHECK(chosen >= 0, std::string("cuda: cuDNN offers no supported ") + what + " algorithm for this convolution");
    return perf[chosen].algo;
  };
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t forward[16];
  CU(cudnnGetConvolutionForwardAlgorithm_v7(dnn, plan.x, plan.w, plan.conv, plan.y, 16, &found, forward));
  plan.forward = pick(forward, found, "forward");
  cudnnConvolutionBwdDataAlgoPerf_t data[16];
  CU(cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, plan.w, plan.y, plan.conv, plan.x, 16, &found, data));
  plan.backward_data = pick(data, found, "backward-data");
  cudnnConvolutionBwdFilterAlgoPerf_t filter[16];
  CU(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, plan.x, plan.y, plan.conv, plan.w, 16, &found, filter));
  plan.backward_filter = pick(filter, found, "backward-filter");
  std::size_t bytes = 0;
  CU(cudnnGetConvolutionForwardWorkspaceSize(dnn, plan.x, plan.w, plan.conv, plan.y, plan.forward, &bytes));
  plan.workspace = std::max(plan.workspace, bytes);
  CU(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, plan.w, plan.y, plan.conv, plan.x, plan.backward_data, &bytes));
  plan.workspace = std::max(plan.workspace, bytes);
  CU(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, plan.x, plan.y, plan.conv, plan.w, plan.backward_filter,
                                                    &bytes));
  plan.workspace = std::max(plan.workspace, bytes);
}

inline std::size_t bytes_of(DType dtype, std::int64_t n) { return static_cast<std::size_t>(n) * dtype_size(dtype); }

}  // namespace trainlab::cuda
