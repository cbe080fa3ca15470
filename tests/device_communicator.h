// "device-style": a test double for a communicator that works on device memory, as NCCL does, over
// the MPI communicator, so that DDP's device path is tested on a machine without a GPU.
//  - Its memory is the emulated device's (tests/emulated_device.h): it reaches that backend, and
//    no other; allocate() takes the device's memory.
//  - Its operations are stream-ordered (each completes before the next starts, which is one order a
//    stream may run them in), so the ring takes its device path (ring_stages_ordered).
//  - Anything that moves data between the host and its memory (copy_in, copy_out) is counted, and
//    so are the events it is made to wait for (on the "device": the host never waits).
//  - A device is current per thread, as CUDA's is: the thread that made the communicator has it, and
//    another thread only after use_on_this_thread(); any device work (events, reductions,
//    conversions, copies) on a thread without it is counted (work a real GPU would send to device 0).
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace trainlab::testing {

class DeviceStyleCommunicator final : public comm::Communicator {
 public:
  // `host_only`: instead, a communicator on host memory that cannot reach the device's (MPI with a
  // GPU backend), so that DDP stages its buckets through pinned host memory.
  DeviceStyleCommunicator(std::unique_ptr<comm::Communicator> inner, Backend& device, bool host_only = false)
      : inner_(std::move(inner)), device_(device), host_only_(host_only) {
    timeout_s_ = inner_->timeout();
  }

  void use_on_this_thread() override {
    bound_here() = this;
    ++threads_bound;
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return "device-style"; }
  int world_rank() const override { return inner_->world_rank(); }
  std::string library_version() const override { return "device-style over " + inner_->library_version(); }
  std::string device_name() const override { return "the emulated device"; }

  std::unique_ptr<comm::Request> isend(const void* data, std::size_t bytes, int peer, const char* what) override {
    return inner_->isend(data, bytes, peer, what);
  }
  std::unique_ptr<comm::Request> irecv(void* data, std::size_t bytes, int peer, const char* what) override {
    return inner_->irecv(data, bytes, peer, what);
  }
  // Complete before it returns: the next operation sees its result, as on one stream.
  std::unique_ptr<comm::Request> sendrecv(const void* send, std::size_t send_bytes, int to, void* recv,
                                          std::size_t recv_bytes, int from, const char* what) override {
    ++sendrecvs;
    std::vector<std::unique_ptr<comm::Request>> requests;
    requests.push_back(inner_->sendrecv(send, send_bytes, to, recv, recv_bytes, from, what));
    inner_->wait_all(requests);
    return comm::Communicator::sendrecv(nullptr, 0, to, nullptr, 0, from, what);  // done
  }
  void wait_all(std::vector<std::unique_ptr<comm::Request>>& requests) override { inner_->wait_all(requests); }
  void barrier() override { inner_->barrier(); }
  void broadcast(void* data, std::size_t bytes, int root) override { inner_->broadcast(data, bytes, root); }
  void allreduce_native(void* data, std::int64_t count, DType dtype, comm::ReduceOp op) override {
    inner_->allreduce_native(data, count, dtype, op);
  }
  void reduce_scatter_native(void* data, std::int64_t count, DType dtype, comm::ReduceOp op) override {
    inner_->reduce_scatter_native(data, count, dtype, op);
  }
  void allgather_native(void* data, std::int64_t count, DType dtype) override {
    inner_->allgather_native(data, count, dtype);
  }
  std::unique_ptr<comm::Communicator> split(int color, int key) override {
    auto sub = inner_->split(color, key);
    if (!sub) return nullptr;
    return std::make_unique<DeviceStyleCommunicator>(std::move(sub), device_, host_only_);
  }
  [[noreturn]] void abort(const std::string& message, int status) override {
    inner_->abort(message, status);
    std::abort();  // not reached: the inner communicator ends the job
  }

  bool device_memory() const override { return !host_only_; }
  bool stream_ordered() const override { return !host_only_; }
  bool reaches(Backend& backend) const override { return !host_only_ && &backend == &device_; }
  void wait_for(DeviceEvent&) override { ++device_waits; }  // the stream waits; the host does not
  std::shared_ptr<DeviceEvent> record_event() override {
    if (host_only_) return nullptr;
    check_thread();
    ++events_recorded;
    return device_.stream_events()->record_event();  // the same clock as the backend's events
  }
  std::shared_ptr<void> allocate(std::size_t bytes) override {
    if (host_only_) return comm::Communicator::allocate(bytes);
    Backend* device = &device_;
    return {device->allocate(bytes), [device, bytes](void* p) { device->deallocate(p, bytes); }};
  }
  void copy_in(void* dst, const void* host, std::size_t bytes) override {
    check_thread();
    ++host_copies;
    if (bytes > 0) std::memcpy(dst, host, bytes);
  }
  void copy_out(void* host, const void* src, std::size_t bytes) override {
    check_thread();
    ++host_copies;
    if (bytes > 0) std::memcpy(host, src, bytes);
  }
  void reduce_local(DType dtype, void* y, const void* x, std::int64_t count, double scale) override {
    check_thread();
    ++reductions;
    comm::Communicator::reduce_local(dtype, y, x, count, scale);
  }
  void convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t count,
               double scale) override {
    check_thread();
    comm::Communicator::convert(src_dtype, src, dst_dtype, dst, count, scale);
  }

  std::atomic<std::int64_t> host_copies{0}, device_waits{0}, sendrecvs{0}, reductions{0}, events_recorded{0};
  std::atomic<std::int64_t> threads_bound{0}, calls_without_device{0};

 private:
  static const DeviceStyleCommunicator*& bound_here() {
    thread_local const DeviceStyleCommunicator* bound = nullptr;
    return bound;
  }
  void check_thread() {
    if (host_only_ || std::this_thread::get_id() == creator_ || bound_here() == this) return;
    ++calls_without_device;
  }
  std::thread::id creator_ = std::this_thread::get_id();
  std::unique_ptr<comm::Communicator> inner_;
  Backend& device_;
  bool host_only_ = false;
};

}  // namespace trainlab::testing
