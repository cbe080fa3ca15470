// "emulated-device": a backend over the reference that behaves as a CUDA device does where the
// engine can get it wrong, so that the device-side logic of the trainer and the loader is tested
// on a machine without a GPU (the same tests run on the cuda backend on a GPU machine).
//  - Graph capture: between begin_capture and end_capture every call is recorded instead of run;
//    anything that waits for the device or moves host data throws; memory allocated or freed
//    while capturing goes to a GraphPool; replay runs the recorded calls on the same pointers.
//  - Streams: events on the compute stream (StreamEvents); every host-side wait (synchronize, an
//    event's synchronize) and every copy to or from the host is counted, so a test can require
//    that a phase (DDP's backward) does none.
//  - Pinned memory and uploads: a copy happens late (when the compute stream waits for it, or on
//    the second poll), so reusing its source early, or reading its destination before waiting,
//    gives wrong data.
// Registered on first use (emulated_device()), so test groups that walk every CPU backend never
// see it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backends/graph_pool.h"
#include "backends/registry.h"

namespace trainlab::testing {

class EmulatedDevice final : public Backend, public PinnedUploads, public GraphCapture, public StreamEvents {
 public:
  std::string name() const override { return "emulated-device"; }
  std::string describe() const override { return "emulated-device over " + inner_.describe(); }
  std::map<std::string, std::int64_t> counters() const override {
    auto out = Backend::counters();
    out["graphs"] = static_cast<std::int64_t>(graphs_.size());
    out["replays"] = replays_;
    out["pinned_blocks"] = pinned_blocks_;
    out["uploads_pending"] = static_cast<std::int64_t>(uploads_.size());
    out["copies_to_host"] = copies_to_host_;
    out["copies_from_host"] = copies_from_host_;
    out["host_waits"] = host_waits_;
    out["events_recorded"] = events_recorded_;
    return out;
  }
  DeviceType device_type() const override { return DeviceType::cpu; }
  bool supports(DType dtype) const override { return inner_.supports(dtype); }
  OpSupport supports_op(BackendOp op, DType dtype, bool channels_last) const override {
    return inner_.supports_op(op, dtype, channels_last);
  }
  std::string isa() const override { return inner_.isa(); }
  void set_num_threads(int threads) override { inner_.set_num_threads(threads); }
  int num_threads() const override { return inner_.num_threads(); }

  // Its own memory (the reference's kernels take any host pointer), so that the graphs' blocks
  // can be freed when the backend goes at exit.
  ~EmulatedDevice() override {
    for (void* p : pool_.drain()) ::operator delete(p, kAlign);
  }
  void* allocate(std::size_t bytes) override {
    ++stats_.allocations;
    stats_.bytes_in_use += static_cast<std::int64_t>(bytes);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    if (pool_.capturing()) {
      if (void* p = pool_.take(bytes)) return p;
      void* p = ::operator new(std::max<std::size_t>(bytes, 1), kAlign);
      pool_.adopt(p);
      return p;
    }
    return ::operator new(std::max<std::size_t>(bytes, 1), kAlign);
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (ptr == nullptr) return;
    stats_.bytes_in_use -= static_cast<std::int64_t>(bytes);
    if (pool_.give_back(ptr, bytes)) return;
    ::operator delete(ptr, kAlign);
  }
  AllocatorStats allocator_stats() const override { return stats_; }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    refuse("copy_from_host");
    ++copies_from_host_;
    inner_.copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    refuse("copy_to_host");
    ++copies_to_host_;
    inner_.copy_to_host(dst, src, bytes);
  }
  void synchronize() override {
    refuse("synchronize");
    ++host_waits_;
  }

  // Work runs as it is asked for, so an event is complete when recorded; waiting for one on the
  // host is still counted as a wait.
  StreamEvents* stream_events() override { return this; }
  std::shared_ptr<DeviceEvent> record_event() override {
    ++events_recorded_;
    return std::make_shared<Event>(host_waits_);
  }

  int device_index() const override { return 0; }
  std::unique_ptr<Timer> make_timer() override { return inner_.make_timer(); }

  // Pinned memory and uploads as a copy stream runs them: the copy happens later than it is
  // asked for, when the compute stream is made to wait for it, or after the second poll that
  // finds it pending. A loader that reuses a pinned block before its copy finished, or hands
  // out device memory before the compute stream waits for it, delivers the wrong data here.
  PinnedUploads* pinned_uploads() override { return this; }
  GraphCapture* graph_capture() override { return this; }
  void* allocate_pinned(std::size_t bytes) override {
    ++pinned_blocks_;
    return ::operator new(std::max<std::size_t>(bytes, 1));
  }
  void deallocate_pinned(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    --pinned_blocks_;
    ::operator delete(ptr);
  }
  std::uint64_t upload_async(void* dst, const void* src, std::size_t bytes) override {
    refuse("upload_async");
    uploads_.emplace(++last_ticket_, Copy{dst, src, bytes, 0});
    return last_ticket_;
  }
  void wait_upload(std::uint64_t ticket) override {
    auto it = uploads_.find(ticket);
    if (it == uploads_.end()) return;
    std::memcpy(it->second.dst, it->second.src, it->second.bytes);
    uploads_.erase(it);
  }
  bool upload_done(std::uint64_t ticket) override {
    auto it = uploads_.find(ticket);
    if (it == uploads_.end()) return true;
    if (++it->second.polls < 2) return false;
    wait_upload(ticket);
    return true;
  }

  bool capturing() const override { return pool_.capturing(); }
  void begin_capture() override {
    REQUIRE_FALSE(pool_.capturing());
    pool_.begin_capture();
    recording_.clear();
  }
  int end_capture() override {
    REQUIRE(pool_.capturing());
    pool_.end_capture();
    graphs_.push_back(std::move(recording_));
    recording_.clear();
    return static_cast<int>(graphs_.size()) - 1;
  }
  void abort_capture() noexcept override {
    pool_.end_capture();
    recording_.clear();
  }
  void replay(int graph) override {
    refuse("replay");
    for (const auto& call : graphs_.at(static_cast<std::size_t>(graph))) call();
    ++replays_;
  }

  void fill(DType d, void* y, std::int64_t n, double v) override {
    run([=, this] { inner_.fill(d, y, n, v); });
  }
  void copy_strided(DType d, const void* src, const Layout& sl, void* dst, const Layout& dl) override {
    run([=, this] { inner_.copy_strided(d, src, sl, dst, dl); });
  }
  void cast(DType sd, const void* src, DType dd, void* dst, std::int64_t n) override {
    run([=, this] { inner_.cast(sd, src, dd, dst, n); });
  }
  void binary(BinaryOp op, DType d, const void* a, const void* b, void* y, std::int64_t n) override {
    run([=, this] { inner_.binary(op, d, a, b, y, n); });
  }
  void affine(DType d, const void* x, void* y, std::int64_t n, double scale, double shift) override {
    run([=, this] { inner_.affine(d, x, y, n, scale, shift); });
  }
  void axpy(DType d, std::int64_t n, double alpha, const void* x, void* y) override {
    run([=, this] { inner_.axpy(d, n, alpha, x, y); });
  }
  void sum(DType d, const void* x, std::int64_t n, void* out) override {
    run([=, this] { inner_.sum(d, x, n, out); });
  }
  bool unscale_and_check_finite(DType d, void* x, std::int64_t n, double inv_scale) override {
    refuse("unscale_and_check_finite");
    return inner_.unscale_and_check_finite(d, x, n, inv_scale);
  }
  void relu_forward(DType d, const void* x, void* y, std::int64_t n) override {
    run([=, this] { inner_.relu_forward(d, x, y, n); });
  }
  void relu_backward(DType d, const void* y, const void* dy, void* dx, std::int64_t n) override {
    run([=, this] { inner_.relu_backward(d, y, dy, dx, n); });
  }
  void bias_add_forward(DType d, const void* x, const void* bias, void* y, std::int64_t outer, std::int64_t channels,
                        std::int64_t inner) override {
    run([=, this] { inner_.bias_add_forward(d, x, bias, y, outer, channels, inner); });
  }
  void bias_add_backward(DType d, const void* dy, void* dbias, std::int64_t outer, std::int64_t channels,
                         std::int64_t inner) override {
    run([=, this] { inner_.bias_add_backward(d, dy, dbias, outer, channels, inner); });
  }
  void linear_forward(DType d, const void* x, const void* w, const void* b, bool relu, void* y, std::int64_t batch,
                      std::int64_t in, std::int64_t out) override {
    run([=, this] { inner_.linear_forward(d, x, w, b, relu, y, batch, in, out); });
  }
  void linear_backward_data(DType d, const void* dy, const void* w, void* dx, std::int64_t batch, std::int64_t in,
                            std::int64_t out) override {
    run([=, this] { inner_.linear_backward_data(d, dy, w, dx, batch, in, out); });
  }
  void linear_backward_weights(DType d, const void* dy, const void* x, void* dw, void* db, std::int64_t batch,
                               std::int64_t in, std::int64_t out) override {
    run([=, this] { inner_.linear_backward_weights(d, dy, x, dw, db, batch, in, out); });
  }
  void conv2d_forward(DType d, const Conv2dShape& s, const void* x, const void* w, const void* b, bool relu,
                      void* y) override {
    run([=, this] { inner_.conv2d_forward(d, s, x, w, b, relu, y); });
  }
  void conv2d_backward_data(DType d, const Conv2dShape& s, const void* dy, const void* w, void* dx) override {
    run([=, this] { inner_.conv2d_backward_data(d, s, dy, w, dx); });
  }
  void conv2d_backward_weights(DType d, const Conv2dShape& s, const void* dy, const void* x, void* dw,
                               void* db) override {
    run([=, this] { inner_.conv2d_backward_weights(d, s, dy, x, dw, db); });
  }
  std::size_t max_pool2d_workspace_bytes(DType d, const Pool2dShape& s) override {
    return inner_.max_pool2d_workspace_bytes(d, s);
  }
  void max_pool2d_forward(DType d, const Pool2dShape& s, const void* x, void* y, void* ws) override {
    run([=, this] { inner_.max_pool2d_forward(d, s, x, y, ws); });
  }
  void max_pool2d_backward(DType d, const Pool2dShape& s, const void* dy, const void* ws, void* dx) override {
    run([=, this] { inner_.max_pool2d_backward(d, s, dy, ws, dx); });
  }
  void softmax_cross_entropy_forward(DType d, const void* logits, const std::int64_t* labels, std::int64_t batch,
                                     std::int64_t classes, void* probs, void* loss) override {
    run([=, this] { inner_.softmax_cross_entropy_forward(d, logits, labels, batch, classes, probs, loss); });
  }
  void softmax_cross_entropy_backward(DType d, const void* probs, const std::int64_t* labels, std::int64_t batch,
                                      std::int64_t classes, const void* dloss, void* dlogits) override {
    run([=, this] { inner_.softmax_cross_entropy_backward(d, probs, labels, batch, classes, dloss, dlogits); });
  }
  void batch_norm_forward_training(DType d, const BatchNormShape& s, const void* x, const void* g, const void* b,
                                   const BatchNormEpilogue& e, void* y, void* mean, void* invstd, void* rm, void* rv,
                                   double momentum) override {
    run([=, this] { inner_.batch_norm_forward_training(d, s, x, g, b, e, y, mean, invstd, rm, rv, momentum); });
  }
  void batch_norm_forward_inference(DType d, const BatchNormShape& s, const void* x, const void* g, const void* b,
                                    const void* rm, const void* rv, const BatchNormEpilogue& e, void* y, void* mean,
                                    void* invstd) override {
    run([=, this] { inner_.batch_norm_forward_inference(d, s, x, g, b, rm, rv, e, y, mean, invstd); });
  }
  void batch_norm_backward(DType d, const BatchNormShape& s, const BatchNormSaved& saved, const void* dy, void* dx,
                           void* dg, void* db, void* dres) override {
    run([=, this] { inner_.batch_norm_backward(d, s, saved, dy, dx, dg, db, dres); });
  }
  void global_avg_pool2d_forward(DType d, std::int64_t n, std::int64_t c, std::int64_t hw, bool cl, const void* x,
                                 void* y) override {
    run([=, this] { inner_.global_avg_pool2d_forward(d, n, c, hw, cl, x, y); });
  }
  void global_avg_pool2d_backward(DType d, std::int64_t n, std::int64_t c, std::int64_t hw, bool cl, const void* dy,
                                  void* dx) override {
    run([=, this] { inner_.global_avg_pool2d_backward(d, n, c, hw, cl, dy, dx); });
  }
  void dropout_forward(DType d, const void* x, void* y, std::uint8_t* mask, std::int64_t n,
                       const DropoutDraw& draw) override {
    run([=, this] { inner_.dropout_forward(d, x, y, mask, n, draw); });
  }
  void dropout_backward(DType d, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n,
                        double scale) override {
    run([=, this] { inner_.dropout_backward(d, dy, mask, dx, n, scale); });
  }
  void layer_norm_forward(DType d, const LayerNormShape& s, const void* x, const void* g, const void* b, void* y,
                          void* mean, void* rstd) override {
    run([=, this] { inner_.layer_norm_forward(d, s, x, g, b, y, mean, rstd); });
  }
  void layer_norm_backward(DType d, const LayerNormShape& s, const void* x, const void* g, const void* mean,
                           const void* rstd, const void* dy, void* dx, void* dg, void* db) override {
    run([=, this] { inner_.layer_norm_backward(d, s, x, g, mean, rstd, dy, dx, dg, db); });
  }
  void gelu_forward(DType d, const void* x, void* y, std::int64_t n) override {
    run([=, this] { inner_.gelu_forward(d, x, y, n); });
  }
  void gelu_backward(DType d, const void* x, const void* dy, void* dx, std::int64_t n) override {
    run([=, this] { inner_.gelu_backward(d, x, dy, dx, n); });
  }
  void softmax_forward(DType d, const SoftmaxShape& s, const void* x, void* y) override {
    run([=, this] { inner_.softmax_forward(d, s, x, y); });
  }
  void softmax_backward(DType d, const SoftmaxShape& s, const void* y, const void* dy, void* dx) override {
    run([=, this] { inner_.softmax_backward(d, s, y, dy, dx); });
  }
  void embedding_forward(DType d, const std::int64_t* idx, std::int64_t n, const void* w, std::int64_t vocab,
                         std::int64_t width, void* y) override {
    run([=, this] { inner_.embedding_forward(d, idx, n, w, vocab, width, y); });
  }
  void embedding_backward(DType d, const std::int64_t* idx, std::int64_t n, const void* dy, std::int64_t vocab,
                          std::int64_t width, void* dw) override {
    run([=, this] { inner_.embedding_backward(d, idx, n, dy, vocab, width, dw); });
  }
  void matmul(DType d, const MatmulShape& s, const void* a, const void* b, void* y) override {
    run([=, this] { inner_.matmul(d, s, a, b, y); });
  }
  void attention_forward(DType d, const AttentionShape& s, const void* q, const void* k, const void* v, void* y,
                         void* lse) override {
    run([=, this] { inner_.attention_forward(d, s, q, k, v, y, lse); });
  }
  void attention_backward(DType d, const AttentionShape& s, const void* q, const void* k, const void* v, const void* y,
                          const void* lse, const void* dy, void* dq, void* dk, void* dv) override {
    run([=, this] { inner_.attention_backward(d, s, q, k, v, y, lse, dy, dq, dk, dv); });
  }
  void sgd_step(DType d, std::int64_t n, void* p, const void* g, void* buf, const SgdStep& s) override {
    run([=, this] { inner_.sgd_step(d, n, p, g, buf, s); });
  }
  void adamw_step(DType d, std::int64_t n, void* p, const void* g, void* m, void* v, const AdamWStep& s) override {
    run([=, this] { inner_.adamw_step(d, n, p, g, m, v, s); });
  }

 private:
  void run(std::function<void()> call) {
    if (pool_.capturing()) {
      recording_.push_back(std::move(call));
    } else {
      call();
    }
  }
  void refuse(const char* what) const {
    if (pool_.capturing()) throw Error(std::string("emulated-device: ") + what + " while capturing");
  }

  static constexpr std::align_val_t kAlign{64};
  Backend& inner_ = get_backend("reference");
  AllocatorStats stats_;
  GraphPool pool_;
  std::vector<std::function<void()>> recording_;
  std::vector<std::vector<std::function<void()>>> graphs_;
  std::int64_t replays_ = 0;
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
    int polls;
  };
  std::map<std::uint64_t, Copy> uploads_;
  std::uint64_t last_ticket_ = 0;
  std::int64_t pinned_blocks_ = 0;
  class Event final : public DeviceEvent {
   public:
    explicit Event(std::atomic<std::int64_t>& waits) : waits_(waits) {}
    void synchronize() override { ++waits_; }
    void* native() override { return this; }
    // The work runs as it is asked for: an event's time is when it was recorded.
    double seconds_since(DeviceEvent& earlier) override {
      return std::chrono::duration<double>(at_ - static_cast<Event*>(earlier.native())->at_).count();
    }

   private:
    std::atomic<std::int64_t>& waits_;
    std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
  };
  std::atomic<std::int64_t> copies_to_host_{0}, copies_from_host_{0}, host_waits_{0}, events_recorded_{0};
};

// The emulated device's registered name (registering it on first use).
inline std::string emulated_device() {
  static const BackendRegistration registration(
      BackendInfo{"emulated-device", "the reference backend with CUDA's capture and copy-stream semantics (tests)",
                  DeviceType::cpu, -1000},
      [] { return std::make_unique<EmulatedDevice>(); });
  return "emulated-device";
}

}  // namespace trainlab::testing
