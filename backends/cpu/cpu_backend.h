// The part of a CPU backend that is the same for all of them: host memory, transfers, timing,
// threads, and the kernels that are not layers (fills, copies, casts, elementwise arithmetic,
// ReLU, bias add, cross-entropy, optimiser steps), written as plain OpenMP loops that vectorise
// and whose results do not depend on the thread count. A CPU backend derives from it and
// implements the layer kernels (linear, conv2d, max-pool), overriding others where it has better.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/host_allocator.h"

namespace trainlab::cpu {

class CpuBackend : public Backend {
 public:
  // caching: keep freed blocks for reuse (see host_allocator.h).
  CpuBackend(std::string name, bool caching);

  std::string name() const override { return name_; }
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(DType dtype) const override { return dtype != DType::i64; }
  // The shared loops' part: elementwise, ReLU, bias add, max-pool and the loss scaler's unscale
  // run every dtype supports() accepts natively (each loop is written for the storage type, with f32
  // arithmetic for bf16/f16); cross-entropy widens bf16/f16 to f32 (emulated); the optimisers keep
  // f32 or f64 state. linear and conv2d are each backend's own: matrix_op_support().
  OpSupport supports_op(BackendOp op, DType dtype, bool channels_last) const override;
  // Beyond the default: the max-pool with its ReLU (the shared pool loops), wherever max_pool2d runs.
  OpSupport supports_fused(const FusedPattern& pattern, DType dtype, bool channels_last,
                           const FusedShapes& shapes = {}) const override;
  // The ISA family of the hand-written loops (backends/cpu/isa.h).
  std::string isa() const override;
  void set_num_threads(int threads) override;
  int num_threads() const override { return threads_; }

  void* allocate(std::size_t bytes) override { return allocator_.allocate(bytes); }
  void deallocate(void* ptr, std::size_t bytes) noexcept override { allocator_.deallocate(ptr, bytes); }
  AllocatorStats allocator_stats() const override { return allocator_.stats(); }
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void synchronize() override {}
  std::unique_ptr<Timer> make_timer() override;

  void fill(DType dtype, void* y, std::int64_t n, double value) override;
  void copy_strided(DType dtype, const void* src, const Layout& src_layout, void* dst,
                    const Layout& dst_layout) override;
  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) override;
  void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, std::int64_t n) override;
  void affine(DType dtype, const void* x, void* y, std::int64_t n, double scale, double shift) override;
  void axpy(DType dtype, std::int64_t n, double alpha, const void* x, void* y) override;
  void sum(DType dtype, const void* x, std::int64_t n, void* out) override;
  bool unscale_and_check_finite(DType dtype, void* x, std::int64_t n, double inv_scale) override;

  void relu_forward(DType dtype, const void* x, void* y, std::int64_t n) override;
  void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n) override;
  void bias_add_forward(DType dtype, const void* x, const void* bias, void* y, std::int64_t outer,
                        std::int64_t channels, std::int64_t inner) override;
  void bias_add_backward(DType dtype, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                         std::int64_t inner) override;

  // Max-pool in plain loops, NCHW and channels-last natively. The workspace holds, per output,
  // the argmax's offset in its input plane (ih * W + iw), -1 when a window is all padding.
  std::size_t max_pool2d_workspace_bytes(DType dtype, const Pool2dShape& shape) override;
  void max_pool2d_forward(DType dtype, const Pool2dShape& shape, const void* x, void* y, void* workspace) override;
  void max_pool2d_backward(DType dtype, const Pool2dShape& shape, const void* dy, const void* workspace,
                           void* dx) override;

  // Batch norm, global average pooling and dropout in loops the compiler vectorises (cpu_layers.cpp):
  // every floating dtype natively, f32 arithmetic for bf16/f16, both layouts.
  void batch_norm_forward_training(DType dtype, const BatchNormShape& shape, const void* x, const void* gamma,
                                   const void* beta, const BatchNormEpilogue& epilogue, void* y, void* save_mean,
                                   void* save_invstd, void* running_mean, void* running_var, double momentum) override;
  void batch_norm_forward_inference(DType dtype, const BatchNormShape& shape, const void* x, const void* gamma,
                                    const void* beta, const void* running_mean, const void* running_var,
                                    const BatchNormEpilogue& epilogue, void* y, void* save_mean,
                                    void* save_invstd) override;
  void batch_norm_backward(DType dtype, const BatchNormShape& shape, const BatchNormSaved& saved, const void* dy,
                           void* dx, void* dgamma, void* dbeta, void* dresidual) override;
  void global_avg_pool2d_forward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                 bool channels_last, const void* x, void* y) override;
  void global_avg_pool2d_backward(DType dtype, std::int64_t batch, std::int64_t channels, std::int64_t spatial,
                                  bool channels_last, const void* dy, void* dx) override;
  void dropout_forward(DType dtype, const void* x, void* y, std::uint8_t* mask, std::int64_t n,
                       const DropoutDraw& draw) override;
  void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n,
                        double scale) override;
  // A transformer's layers (cpu_transformer.cpp): rows split over the threads, sums across rows in
  // fixed blocks; matmul through each backend's own linear_forward.
  void layer_norm_forward(DType dtype, const LayerNormShape& shape, const void* x, const void* gamma, const void* beta,
                          void* y, void* mean, void* rstd) override;
  void layer_norm_backward(DType dtype, const LayerNormShape& shape, const void* x, const void* gamma, const void* mean,
                           const void* rstd, const void* dy, void* dx, void* dgamma, void* dbeta) override;
  void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n) override;
  void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) override;
  void softmax_forward(DType dtype, const SoftmaxShape& shape, const void* x, void* y) override;
  void softmax_backward(DType dtype, const SoftmaxShape& shape, const void* y, const void* dy, void* dx) override;
  void embedding_forward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* weight,
                         std::int64_t vocab, std::int64_t width, void* y) override;
  void embedding_backward(DType dtype, const std::int64_t* indices, std::int64_t n, const void* dy, std::int64_t vocab,
                          std::int64_t width, void* dweight) override;
  void matmul(DType dtype, const MatmulShape& shape, const void* a, const void* b, void* y) override;
  // Fused attention (cpu_attention.cpp): a head per task, its rows in f32, the scores a row at a time.
  void attention_forward(DType dtype, const AttentionShape& shape, const void* q, const void* k, const void* v, void* y,
                         void* lse) override;
  void attention_backward(DType dtype, const AttentionShape& shape, const void* q, const void* k, const void* v,
                          const void* y, const void* lse, const void* dy, void* dq, void* dk, void* dv) override;

  void softmax_cross_entropy_forward(DType dtype, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                     std::int64_t classes, void* probs, void* loss) override;
  void softmax_cross_entropy_backward(DType dtype, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, const void* dloss, void* dlogits) override;

  void sgd_step(DType dtype, std::int64_t n, void* param, const void* grad, void* momentum_buffer,
                const SgdStep& step) override;
  void adamw_step(DType dtype, std::int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  const AdamWStep& step) override;
  // f32 parameters: every slot's update in one parallel pass, each chunk cast into its working
  // copy while it is in cache (the same bits as the update then the cast).
  void sgd_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& step) override;
  void adamw_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamWStep& step) override;

 protected:
  // Elements [lo, hi) of a slot's updated f32 weight into its working copy (the fused optimiser steps).
  void narrow_piece(const OptimizerSlot& slot, std::int64_t lo, std::int64_t hi);
  // Blocks borrowed from this backend's allocator for the life of one op (im2col columns,
  // reorder targets, per-thread partial sums) and returned when it ends. With the caching
  // allocator they are the same blocks every step: a steady-state step makes no system allocation.
  class Scratch {
   public:
    explicit Scratch(CpuBackend& backend) : backend_(backend) {}
    ~Scratch() {
      for (auto [ptr, bytes] : blocks_) backend_.allocator_.deallocate(ptr, bytes);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void* get(std::size_t bytes) {
      void* ptr = backend_.allocator_.allocate(bytes);
      blocks_.emplace_back(ptr, bytes);
      return ptr;
    }
    template <typename T>
    T* get(std::int64_t count) {
      return static_cast<T*>(get(static_cast<std::size_t>(count) * sizeof(T)));
    }

   private:
    CpuBackend& backend_;
    std::vector<std::pair<void*, std::size_t>> blocks_;
  };

  // copy_strided's fast path: when its (merged) dimensions are a batch of 2-D transposes (the
  // destination contiguous along its last one, the source along another, as in an NCHW <-> NHWC
  // reorder), copies them in tiles and returns true; else false.
  bool transpose_copy(std::int64_t elem, const unsigned char* s, const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& s_strides, unsigned char* d,
                      const std::vector<std::int64_t>& d_strides);

  // linear and conv2d in `dtype` (one this backend supports()): the backend's own answer.
  virtual OpSupport matrix_op_support(BackendOp op, DType dtype, bool channels_last) const = 0;
  // The dtypes supports() accepts, for messages: "f32, bf16, f16".
  std::string supported_dtypes() const;

  // "<backend>: <op>" for error messages.
  std::string op_name(const char* op) const { return name_ + ": " + op; }
  std::string name_;
  int threads_;
  HostAllocator allocator_;
};

}  // namespace trainlab::cpu
