#include "comm/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include <unistd.h>

#include "backends/error.h"
#include "comm/latency_allreduce.h"
#include "comm/ring_allreduce.h"
#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"
#include "engine/train/config.h"

namespace trainlab::comm {

Algorithm parse_algorithm(const std::string& name) {
  std::string allowed;
  for (Algorithm algorithm : {Algorithm::ring, Algorithm::recursive_doubling, Algorithm::halving_doubling,
                              Algorithm::single_copy, Algorithm::automatic, Algorithm::native}) {
    if (name == algorithm_name(algorithm)) return algorithm;
    allowed += (allowed.empty() ? "" : ", ") + std::string(algorithm_name(algorithm));
  }
  throw Error("unknown all-reduce '" + name + "' (allowed: " + allowed + ")");
}

const char* algorithm_name(Algorithm algorithm) { return allreduce_name(algorithm); }

Algorithm choose_algorithm(Algorithm requested, std::int64_t bytes, const AlgorithmThresholds& thresholds) {
  if (requested == Algorithm::single_copy) return Algorithm::ring;  // no window here
  if (requested != Algorithm::automatic) return requested;
  if (bytes < thresholds.recursive_doubling_below) return Algorithm::recursive_doubling;
  if (bytes < thresholds.ring_from) return Algorithm::halving_doubling;
  return Algorithm::ring;
}

std::string describe_thresholds(const AlgorithmThresholds& t) {
  constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();
  const auto size = [](std::int64_t b) {
    if (b % (1 << 20) == 0) return std::to_string(b >> 20) + "M";
    if (b % (1 << 10) == 0) return std::to_string(b >> 10) + "K";
    return std::to_string(b) + "B";
  };
  const std::int64_t lo = t.recursive_doubling_below, hi = std::max(t.ring_from, lo);
  std::vector<std::string> parts;
  if (lo > 0)
    parts.push_back(lo == never ? "recursive doubling at every size" : "recursive doubling below " + size(lo));
  if (lo < hi) {
    const std::string from = lo == 0 ? "" : " from " + size(lo), below = hi == never ? "" : " below " + size(hi);
    parts.push_back("halving-doubling" +
                    (from.empty() && below.empty() ? std::string(" at every size") : from + below));
  }
  if (hi < never) parts.push_back(hi == 0 ? "ring at every size" : "ring from " + size(hi));
  const std::string window = t.single_copy_from >= never ? "; single-copy never"
                             : t.single_copy_from == 0
                                 ? "; single-copy at every size in a shared window"
                                 : "; single-copy from " + size(t.single_copy_from) + " in a shared window";
  return fmt::format("{}{} ({})", fmt::join(parts, ", "), window, t.source);
}

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
  void parts(std::vector<Request*>& out) override {
    if (send_) send_->parts(out);
    if (recv_) recv_->parts(out);
  }

 private:
  std::unique_ptr<Request> send_, recv_;
};
}  // namespace

std::unique_ptr<Request> Communicator::sendrecv(const void* send, std::size_t send_bytes, int to, void* recv,
                                                std::size_t recv_bytes, int from, const char* what) {
  // The receive first: a message that arrives before its receive is posted waits in MPI's queue of
  // unexpected messages and is copied once more.
  auto in = recv_bytes > 0 ? irecv(recv, recv_bytes, from, what) : nullptr;
  auto out = send_bytes > 0 ? isend(send, send_bytes, to, what) : nullptr;
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

std::vector<std::string> gather_host_names(Communicator& comm) {
  constexpr std::size_t kName = 64;  // characters kept of each name
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto P = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  // Each rank's characters in its own slot, zeros elsewhere: the f64 sum is exact.
  std::vector<double> slots(P * kName, 0.0);
  for (std::size_t i = 0; i < kName && host[i] != '\0'; ++i) slots[r * kName + i] = static_cast<unsigned char>(host[i]);
  const std::size_t bytes = slots.size() * sizeof(double);
  auto memory = comm.allocate(bytes);
  comm.copy_in(memory.get(), slots.data(), bytes);
  comm.allreduce_native(memory.get(), static_cast<std::int64_t>(slots.size()), DType::f64, ReduceOp::sum);
  comm.copy_out(slots.data(), memory.get(), bytes);
  std::vector<std::string> names(P);
  for (std::size_t q = 0; q < P; ++q)
    for (std::size_t i = 0; i < kName && slots[q * kName + i] != 0; ++i)
      names[q] += static_cast<char>(static_cast<unsigned char>(slots[q * kName + i]));
  return names;
}

std::string hosts_summary(const std::vector<std::string>& names) {
  std::vector<std::string> hosts;               // in order of first appearance
  std::vector<std::vector<std::size_t>> ranks;  // per host
  for (std::size_t r = 0; r < names.size(); ++r) {
    const auto h = static_cast<std::size_t>(std::find(hosts.begin(), hosts.end(), names[r]) - hosts.begin());
    if (h == hosts.size()) {
      hosts.push_back(names[r]);
      ranks.emplace_back();
    }
    ranks[h].push_back(r);
  }
  std::string out = fmt::format("{} rank{} on {} host{}:", names.size(), names.size() == 1 ? "" : "s", hosts.size(),
                                hosts.size() == 1 ? "" : "s");
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    // Runs of consecutive ranks: "0-1,4-5".
    std::vector<std::string> runs;
    const auto& list = ranks[h];
    for (std::size_t i = 0; i < list.size();) {
      std::size_t j = i;
      while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
      runs.push_back(j == i ? fmt::format("{}", list[i]) : fmt::format("{}-{}", list[i], list[j]));
      i = j + 1;
    }
    out += fmt::format("{} {} (rank{} {})", h == 0 ? "" : ",", hosts[h], list.size() == 1 ? "" : "s",
                       fmt::join(runs, ","));
  }
  return out;
}

namespace {
std::int64_t bytes_of(std::int64_t count, DType dtype) { return count * static_cast<std::int64_t>(dtype_size(dtype)); }
}  // namespace

void allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm,
               const AlgorithmThresholds& thresholds) {
  switch (choose_algorithm(algorithm, bytes_of(count, dtype), thresholds)) {
    case Algorithm::ring:
      return ring_allreduce(comm, data, count, dtype, op);
    case Algorithm::recursive_doubling:
      return recursive_doubling_allreduce(comm, data, count, dtype, op);
    case Algorithm::halving_doubling:
      return halving_doubling_allreduce(comm, data, count, dtype, op);
    default:
      return comm.allreduce_native(data, count, dtype, op);
  }
}

void reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, Algorithm algorithm,
                    const AlgorithmThresholds& thresholds) {
  switch (choose_algorithm(algorithm, bytes_of(count, dtype), thresholds)) {
    case Algorithm::ring:
      return ring_reduce_scatter(comm, data, count, dtype, op);
    case Algorithm::recursive_doubling:
      return recursive_doubling_allreduce(comm, data, count, dtype, op);
    case Algorithm::halving_doubling:
      return halving_doubling_reduce_scatter(comm, data, count, dtype, op);
    default:
      return comm.reduce_scatter_native(data, count, dtype, op);
  }
}

void allgather(Communicator& comm, void* data, std::int64_t count, DType dtype, Algorithm algorithm,
               const AlgorithmThresholds& thresholds) {
  switch (choose_algorithm(algorithm, bytes_of(count, dtype), thresholds)) {
    case Algorithm::ring:
      return ring_allgather(comm, data, count, dtype);
    case Algorithm::recursive_doubling:
    case Algorithm::halving_doubling:
      return recursive_doubling_allgather(comm, data, count, dtype);
    default:
      return comm.allgather_native(data, count, dtype);
  }
}

ParallelGrid make_parallel_grid(Communicator& world, int replicas) {
  const int n = world.size();
  TL_CHECK(replicas >= 1 && replicas <= n && n % replicas == 0,
           "parallel grid: " + std::to_string(n) + " ranks do not make " + std::to_string(replicas) +
               " data-parallel replicas (allowed: a count that divides " + std::to_string(n) + ")");
  ParallelGrid grid;
  grid.replicas = replicas;
  grid.model_ranks = n / replicas;
  const int r = world.rank();
  grid.model = world.split(r / grid.model_ranks, r % grid.model_ranks);
  grid.data = world.split(r % grid.model_ranks, r / grid.model_ranks);
  grid.model->set_timeout(world.timeout());  // the world's deadline for every wait
  grid.data->set_timeout(world.timeout());
  return grid;
}

void average_gradients(Communicator& comm, const NamedTensors& params) {
  if (comm.size() == 1) return;
  std::int64_t total = 0;
  for (const auto& [name, t] : params) {
    TL_CHECK(t.dtype() == DType::f32,
             "average_gradients: f32 gradients only; " + name + " is " + dtype_name(t.dtype()));
    total += t.numel();
  }
  std::vector<float> flat(static_cast<std::size_t>(total), 0.0f);
  std::int64_t at = 0;
  for (const auto& [name, t] : params) {
    if (t.grad().defined()) t.grad().contiguous().copy_to_host(flat.data() + at);
    at += t.numel();
  }
  allreduce(comm, flat.data(), total, DType::f32, ReduceOp::average, Algorithm::automatic);
  at = 0;
  NoGradGuard no_grad;
  for (const auto& [name, t] : params) {
    Tensor param = t;
    param.set_grad(Tensor::from_host(flat.data() + at, t.shape(), DType::f32, t.backend()));
    at += t.numel();
  }
}

}  // namespace trainlab::comm
