#include "comm/latency_allreduce.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/error.h"

namespace trainlab::comm {

namespace {

// One step: send `send_bytes` to `to` and receive `recv_bytes` from `from`, finished before the
// caller touches either buffer (on a stream-ordered communicator the next operation is queued after
// it, which is the same thing there).
void exchange(Communicator& comm, const void* send, std::size_t send_bytes, int to, void* recv, std::size_t recv_bytes,
              int from, const char* what) {
  std::vector<std::unique_ptr<Request>> step;
  step.push_back(comm.sendrecv(send, send_bytes, to, recv, recv_bytes, from, what));
  if (!comm.stream_ordered()) comm.wait_all(step);
}

// The world as the algorithms see it: the largest power of two p <= P, and this rank's part.
struct Fold {
  int P = 1, p = 1, rank = 0;
  bool extra() const { return rank >= p; }       // folded into rank - p, then waits for the result
  bool partner() const { return rank < P - p; }  // takes rank + p's buffer in, gives the result back
};
Fold fold_of(const Communicator& comm) {
  Fold f;
  f.P = comm.size();
  f.rank = comm.rank();
  while (f.p * 2 <= f.P) f.p *= 2;
  return f;
}

void check_args(const char* name, DType dtype, std::int64_t count) {
  TL_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16 || dtype == DType::f16,
           std::string(name) + ": dtype " + dtype_name(dtype) + " is not supported (f32, f64, bf16, f16)");
  TL_CHECK(count >= 0, std::string(name) + ": negative count " + std::to_string(count));
}

// Fold-in: rank p + i's buffer added into rank i's. Returns false on a rank that then sits out.
bool fold_in(Communicator& comm, const Fold& f, unsigned char* bytes, std::size_t total, DType dtype,
             std::int64_t count, const char* what) {
  if (f.extra()) {
    exchange(comm, bytes, total, f.rank - f.p, nullptr, 0, f.rank - f.p, what);
    return false;
  }
  if (f.partner()) {
    auto* in = static_cast<unsigned char*>(comm.scratch(total));
    exchange(comm, nullptr, 0, f.rank + f.p, in, total, f.rank + f.p, what);
    comm.reduce_local(dtype, bytes, in, count, 1.0);
  }
  return true;
}

// Fold-out: the result sent back to the ranks that sat out.
void fold_out(Communicator& comm, const Fold& f, unsigned char* bytes, std::size_t total, const char* what) {
  if (f.extra()) {
    exchange(comm, nullptr, 0, f.rank - f.p, bytes, total, f.rank - f.p, what);
  } else if (f.partner()) {
    exchange(comm, bytes, total, f.rank + f.p, nullptr, 0, f.rank + f.p, what);
  }
}

}  // namespace

void recursive_doubling_allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op) {
  const char* name = "recursive doubling all-reduce";
  check_args(name, dtype, count);
  const Fold f = fold_of(comm);
  if (f.P == 1 || count == 0) return;
  const std::size_t total = static_cast<std::size_t>(count) * dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(data);
  const double average = op == ReduceOp::average ? 1.0 / f.P : 1.0;
  if (fold_in(comm, f, bytes, total, dtype, count, "recursive doubling fold-in")) {
    auto* in = static_cast<unsigned char*>(comm.scratch(total));
    for (int d = 1; d < f.p; d *= 2) {
      const int peer = f.rank ^ d;
      exchange(comm, bytes, total, peer, in, total, peer, "recursive doubling exchange");
      comm.reduce_local(dtype, bytes, in, count, d * 2 == f.p ? average : 1.0);  // own + peer's: commutes
    }
  }
  fold_out(comm, f, bytes, total, "recursive doubling fold-out");
  if (comm.stream_ordered()) comm.wait_stream(name);
}

void halving_doubling_allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op) {
  const char* name = "halving-doubling all-reduce";
  check_args(name, dtype, count);
  const Fold f = fold_of(comm);
  if (f.P == 1 || count == 0) return;
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  const std::size_t total = static_cast<std::size_t>(count * elem);
  auto* bytes = static_cast<unsigned char*>(data);
  const double average = op == ReduceOp::average ? 1.0 / f.P : 1.0;
  if (fold_in(comm, f, bytes, total, dtype, count, "halving-doubling fold-in")) {
    // The buffer in p chunks (shard_chunk's cut); this rank's range of chunks [lo, hi) halves at
    // each step, keeping the half that holds chunk `rank`, until it is that chunk alone.
    const auto chunk_begin = [&](int c) { return c == f.p ? count : shard_chunk(count, f.p, c).begin; };
    auto* in = static_cast<unsigned char*>(comm.scratch(total));
    int lo = 0, hi = f.p;
    for (int d = f.p / 2; d >= 1; d /= 2) {
      const int peer = f.rank ^ d, mid = lo + (hi - lo) / 2;
      const bool upper = (f.rank & d) != 0;
      const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
      const int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
      const std::int64_t keep_at = chunk_begin(keep_lo), keep_n = chunk_begin(keep_hi) - keep_at;
      const std::int64_t give_at = chunk_begin(give_lo), give_n = chunk_begin(give_hi) - give_at;
      exchange(comm, bytes + give_at * elem, static_cast<std::size_t>(give_n * elem), peer, in,
               static_cast<std::size_t>(keep_n * elem), peer, "halving-doubling reduce-scatter");
      comm.reduce_local(dtype, bytes + keep_at * elem, in, keep_n, d == 1 ? average : 1.0);
      lo = keep_lo;
      hi = keep_hi;
    }
    // All-gather by recursive doubling: the owned range doubles at each step.
    for (int d = 1; d < f.p; d *= 2) {
      const int peer = f.rank ^ d;
      const int own_lo = f.rank & ~(d - 1), own_hi = own_lo + d;  // chunks [own_lo, own_hi) are complete here
      const int peer_lo = own_lo ^ d, peer_hi = peer_lo + d;
      const std::int64_t own_at = chunk_begin(own_lo), own_n = chunk_begin(own_hi) - own_at;
      const std::int64_t peer_at = chunk_begin(peer_lo), peer_n = chunk_begin(peer_hi) - peer_at;
      exchange(comm, bytes + own_at * elem, static_cast<std::size_t>(own_n * elem), peer, bytes + peer_at * elem,
               static_cast<std::size_t>(peer_n * elem), peer, "halving-doubling all-gather");
    }
  }
  fold_out(comm, f, bytes, total, "halving-doubling fold-out");
  if (comm.stream_ordered()) comm.wait_stream(name);
}

}  // namespace trainlab::comm
