#include "comm/communicator.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "backends/error.h"
#include "comm/ring_allreduce.h"
#include "engine/memory_usage.h"

namespace trainlab::comm {

Algorithm parse_algorithm(const std::string& name) {
  if (name == "ring") return Algorithm::ring;
  if (name == "native") return Algorithm::native;
  throw Error("unknown all-reduce '" + name + "' (allowed: ring, native)");
}

const char* algorithm_name(Algorithm algorithm) { return algorithm == Algorithm::ring ? "ring" : "native"; }

void Communicator::set_timeout(double seconds) {
  TL_CHECK(std::isfinite(seconds) && seconds > 0, "comm timeout must be > 0 seconds, got " + std::to_string(seconds));
  timeout_s_ = seconds;
}

std::shared_ptr<void> Communicator::allocate(std::size_t bytes) {
  // 64-byte aligned host memory, like the engine's buffers.
  void* p = std::aligned_alloc(64, std::max<std::size_t>(64, (bytes + 63) / 64 * 64));
  if (p == nullptr) throw std::bad_alloc();
  const auto counted = static_cast<std::int64_t>(bytes);
  memory_allocated(DeviceType::cpu, MemoryCategory::communication, counted);
  return {p, [counted](void* q) {
            memory_freed(DeviceType::cpu, MemoryCategory::communication, counted);
            std::free(q);
          }};
}

namespace {
// Both halves of a sendrecv; complete when both are.
class PairRequest final : public Request {
 public:
  PairRequest(std::unique_ptr<Request> send, std::unique_ptr<Request> recv)
      : send_(std::move(send)), recv_(std::move(recv)) {}
  bool test() override {
    if (send_ && send_->test()) send_.reset();
    if (recv_ && recv_->test()) recv_.reset();
    return !send_ && !recv_;
  }
  std::string describe() const override { return recv_ ? recv_->describe() : send_ ? send_->describe() : "done"; }

 private:
  std::unique_ptr<Request> send_, recv_;
};
}  // namespace

std::unique_ptr<Request> Communicator::sendrecv(const void* send, std::size_t send_bytes, int to, void* recv,
                                                std::size_t recv_bytes, int from, const char* what) {
  auto out = send_bytes > 0 ? isend(send, send_bytes, to, what) : nullptr;
  auto in = recv_bytes > 0 ? irecv(recv, recv_bytes, from, what) : nullptr;
  return std::make_unique<PairRequest>(std::move(out), std::move(in));
}

bool Communicator::reaches(Backend& backend) const {
  return !device_memory() && backend.device_type() == DeviceType::cpu;
}

void* Communicator::scratch(std::size_t bytes) {
  if (scratch_bytes_ < bytes) {
    scratch_.reset();
    scratch_ = allocate(bytes);
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

void Communicator::copy_in(void* dst, const void* host, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, host, bytes);
}

void Communicator::copy_out(void* host, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(host, src, bytes);
}

// y += x (or y = (y + x) * scale when scaling), elementwise; halves go through f32.
void Communicator::reduce_local(DType dtype, void* y, const void* x, std::int64_t n, double scale) {
  const bool scaled = scale != 1.0;
  switch (dtype) {
    case DType::f32: {
      auto* a = static_cast<float*>(y);
      const auto* b = static_cast<const float*>(x);
      const auto s = static_cast<float>(scale);
      if (scaled) {
        for (std::int64_t i = 0; i < n; ++i) a[i] = (a[i] + b[i]) * s;
      } else {
        for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
      }
      return;
    }
    case DType::f64: {
      auto* a = static_cast<double*>(y);
      const auto* b = static_cast<const double*>(x);
      if (scaled) {
        for (std::int64_t i = 0; i < n; ++i) a[i] = (a[i] + b[i]) * scale;
      } else {
        for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
      }
      return;
    }
    case DType::bf16: {
      auto* a = static_cast<bf16*>(y);
      const auto* b = static_cast<const bf16*>(x);
      const auto s = static_cast<float>(scale);
      for (std::int64_t i = 0; i < n; ++i) a[i] = bf16((static_cast<float>(a[i]) + static_cast<float>(b[i])) * s);
      return;
    }
    case DType::f16: {
      auto* a = static_cast<f16*>(y);
      const auto* b = static_cast<const f16*>(x);
      const auto s = static_cast<float>(scale);
      for (std::int64_t i = 0; i < n; ++i) a[i] = f16((static_cast<float>(a[i]) + static_cast<float>(b[i])) * s);
      return;
    }
    case DType::i64:
      break;
  }
  throw Error(std::string("reduce_local: dtype ") + dtype_name(dtype) + " is not supported (f32, f64, bf16, f16)");
}

namespace {
// dst[i] = D(C(src[i]) * scale): one loop per (source, destination) pair, computed in C.
template <typename C, typename S, typename D>
void convert_loop(const S* src, D* dst, std::int64_t count, C scale) {
  for (std::int64_t i = 0; i < count; ++i) dst[i] = D(static_cast<C>(static_cast<float>(src[i])) * scale);
}
template <typename C, typename S>
void convert_from(const S* src, DType dst_dtype, void* dst, std::int64_t count, C scale) {
  switch (dst_dtype) {
    case DType::f32:
      return convert_loop(src, static_cast<float*>(dst), count, scale);
    case DType::f64:
      return convert_loop(src, static_cast<double*>(dst), count, scale);
    case DType::bf16:
      return convert_loop(src, static_cast<bf16*>(dst), count, scale);
    case DType::f16:
      return convert_loop(src, static_cast<f16*>(dst), count, scale);
    case DType::i64:
      break;
  }
  throw Error(std::string("convert: dtype ") + dtype_name(dst_dtype) + " is not supported (f32, f64, bf16, f16)");
}
}  // namespace

void Communicator::convert(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t count,
                           double scale) {
  if (src_dtype == DType::f64 && dst_dtype == DType::f64) {
    const auto* x = static_cast<const double*>(src);
    auto* y = static_cast<double*>(dst);
    for (std::int64_t i = 0; i < count; ++i) y[i] = x[i] * scale;
    return;
  }
  const auto s = static_cast<float>(scale);
  switch (src_dtype) {
    case DType::f32:
      return convert_from(static_cast<const float*>(src), dst_dtype, dst, count, s);
    case DType::f64:
      return convert_from(static_cast<const double*>(src), dst_dtype, dst, count, s);
    case DType::bf16:
      return convert_from(static_cast<const bf16*>(src), dst_dtype, dst, count, s);
    case DType::f16:
      return convert_from(static_cast<const f16*>(src), dst_dtype, dst, count, s);
    case DType::i64:
      break;
  }
  throw Error(std::string("convert: dtype ") + dtype_name(src_dtype) + " is not supported (f32, f64, bf16, f16)");
}

void Communicator::wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s_));
  // Completed requests are released as they finish; what remains is what is still pending.
  while (true) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (!requests[i]->test()) requests[kept++] = std::move(requests[i]);
    }
    requests.resize(kept);
    if (requests.empty()) return;
    if (clock::now() > deadline) {
      const std::size_t first = 0;
      abort(fmt::format("timed out after {:.1f} s waiting for {} (rank {} of {} in this communicator): that peer is "
                        "stalled or dead; ending the job (--comm-timeout {})",
                        std::chrono::duration<double>(clock::now() - start).count(), requests[first]->describe(),
                        rank(), size(), timeout_s_),
            3);
    }
    std::this_thread::yield();  // a ring step may wait on a rank sharing this core
  }
}

ChunkRange shard_chunk(std::int64_t count, int ranks, int chunk) {
  const std::int64_t base = count / ranks, rem = count % ranks;
  return {chunk * base + std::min<std::int64_t>(chunk, rem), base + (chunk < rem ? 1 : 0)};
}

void allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm) {
  if (algorithm == Algorithm::ring) {
    ring_allreduce(comm, data, count, dtype, op);
  } else {
    comm.allreduce_native(data, count, dtype, op);
  }
}

void reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm) {
  if (algorithm == Algorithm::ring) {
    ring_reduce_scatter(comm, data, count, dtype, op);
  } else {
    comm.reduce_scatter_native(data, count, dtype, op);
  }
}

void allgather(Communicator& comm, void* data, std::int64_t count, DType dtype, Algorithm algorithm) {
  if (algorithm == Algorithm::ring) {
    ring_allgather(comm, data, count, dtype);
  } else {
    comm.allgather_native(data, count, dtype);
  }
}

}  // namespace trainlab::comm
