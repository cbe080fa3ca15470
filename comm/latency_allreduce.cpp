#include "comm/latency_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "backends/error.h"

namespace trainlab::comm {

namespace {

// A message just above the transport's eager limit waits for a rendezvous (a handshake, then the
// copy): over Open MPI's shared memory at 2 ranks recursive doubling's one 4 KiB message took 2.4x
// MPI_Allreduce's time, 1.0x at 2 KiB. Such a message goes as pieces that each travel eagerly,
// posted at once, when it takes at most this many; beyond, the single-copy rendezvous is as fast
// (measured at 32K and 64K). Both sides cut a message alike: the cut depends on its size and the
// communicator's limit, which is the same on every rank.
// A run of elements (or of bytes, for a message's pieces).
struct Span {
  std::int64_t at = 0, n = 0;
};

constexpr std::size_t kMaxEagerPieces = 4;

std::size_t pieces_of(std::size_t bytes, std::size_t eager_limit) {
  if (eager_limit == 0 || bytes <= eager_limit) return 1;
  const std::size_t pieces = (bytes + eager_limit - 1) / eager_limit;
  return pieces <= kMaxEagerPieces ? pieces : 1;
}

// Piece i of n of a message of `bytes` (equal cuts, the first ones a byte longer).
Span piece(std::size_t bytes, std::size_t n, std::size_t i) {
  const std::size_t base = bytes / n, longer = bytes % n;
  return {static_cast<std::int64_t>(i * base + std::min(i, longer)),
          static_cast<std::int64_t>(base + (i < longer ? 1 : 0))};
}

// Posts sending `send_bytes` to `to` and receiving `recv_bytes` from `from` into `step`, each cut
// into eager pieces where that pays.
void post(Communicator& comm, std::vector<std::unique_ptr<Request>>& step, const unsigned char* send,
          std::size_t send_bytes, int to, unsigned char* recv, std::size_t recv_bytes, int from, const char* what) {
  const std::size_t n_send = send_bytes > 0 ? pieces_of(send_bytes, comm.eager_limit(to)) : 0;
  const std::size_t n_recv = recv_bytes > 0 ? pieces_of(recv_bytes, comm.eager_limit(from)) : 0;
  for (std::size_t i = 0; i < std::max(n_send, n_recv); ++i) {
    const Span out = i < n_send ? piece(send_bytes, n_send, i) : Span{};
    const Span in = i < n_recv ? piece(recv_bytes, n_recv, i) : Span{};
    step.push_back(comm.sendrecv(out.n > 0 ? send + out.at : nullptr, static_cast<std::size_t>(out.n), to,
                                 in.n > 0 ? recv + in.at : nullptr, static_cast<std::size_t>(in.n), from, what));
  }
}

// One step: send `send_bytes` to `to` and receive `recv_bytes` from `from`, finished before the
// caller touches either buffer (on a stream-ordered communicator the next operation is queued after
// it, which is the same thing there).
void exchange(Communicator& comm, const void* send, std::size_t send_bytes, int to, void* recv, std::size_t recv_bytes,
              int from, const char* what) {
  std::vector<std::unique_ptr<Request>> step;
  post(comm, step, static_cast<const unsigned char*>(send), send_bytes, to, static_cast<unsigned char*>(recv),
       recv_bytes, from, what);
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

// The P chunks (shard_chunk's cut of the whole buffer) as the p ranks left after the fold hold
// them: rank a owns chunk a and, when a < P - p, chunk p + a too (that of the rank folded into
// it). So the reduce-scatter leaves every rank of the world its own chunk, as the ring's does. A
// range of ranks [lo, hi) covers at most two runs of consecutive chunks.
using Spans = std::array<Span, 2>;
struct Layout {
  Fold f;
  std::int64_t count = 0, elem = 0;
  std::int64_t begin(int chunk) const { return chunk >= f.P ? count : shard_chunk(count, f.P, chunk).begin; }
  Spans spans(int lo, int hi) const {
    Spans s{};
    s[0] = {begin(lo), begin(hi) - begin(lo)};
    const int folded = f.P - f.p;
    if (lo < folded) s[1] = {begin(f.p + lo), begin(f.p + std::min(hi, folded)) - begin(f.p + lo)};
    return s;
  }
  std::size_t bytes(const Span& s) const { return static_cast<std::size_t>(s.n * elem); }
};

// One step over spans: `give` sent to `peer` and its `keep` received, span by span in the same
// order on both sides (so each message meets its receive), into `in` back to back, or in place
// when `in` is null.
void exchange_spans(Communicator& comm, const Layout& l, unsigned char* data, const Spans& give, const Spans& keep,
                    int peer, unsigned char* in, const char* what) {
  std::vector<std::unique_ptr<Request>> step;
  std::size_t offset = 0;
  for (std::size_t j = 0; j < give.size(); ++j) {
    unsigned char* to = in != nullptr ? in + offset : data + keep[j].at * l.elem;
    post(comm, step, data + give[j].at * l.elem, l.bytes(give[j]), peer, to, l.bytes(keep[j]), peer, what);
    offset += l.bytes(keep[j]);
  }
  if (!comm.stream_ordered()) comm.wait_all(step);
}

// Recursive halving among the p ranks (each holding the folded-in sum): the range of ranks whose
// chunks this rank still reduces halves at each step, keeping the half with its own, until it is
// its own alone; `last_scale` at the last step (an average's 1/P).
void recursive_halving(Communicator& comm, const Layout& l, unsigned char* data, DType dtype, double last_scale) {
  auto* in = static_cast<unsigned char*>(comm.scratch(static_cast<std::size_t>(l.count * l.elem)));
  const int a = l.f.rank;
  int lo = 0, hi = l.f.p;
  for (int d = l.f.p / 2; d >= 1; d /= 2) {
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (a & d) != 0;
    const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    const Spans keep = l.spans(keep_lo, keep_hi), give = l.spans(upper ? lo : mid, upper ? mid : hi);
    exchange_spans(comm, l, data, give, keep, a ^ d, in, "halving-doubling reduce-scatter");
    std::size_t offset = 0;
    for (const Span& s : keep) {
      comm.reduce_local(dtype, data + s.at * l.elem, in + offset, s.n, d == 1 ? last_scale : 1.0);
      offset += l.bytes(s);
    }
    lo = keep_lo;
    hi = keep_hi;
  }
}

// Recursive doubling all-gather among the p ranks: the range of complete chunks doubles each step.
void recursive_doubling_gather(Communicator& comm, const Layout& l, unsigned char* data) {
  const int a = l.f.rank;
  for (int d = 1; d < l.f.p; d *= 2) {
    const int own_lo = a & ~(d - 1), peer_lo = own_lo ^ d;
    exchange_spans(comm, l, data, l.spans(own_lo, own_lo + d), l.spans(peer_lo, peer_lo + d), a ^ d, nullptr,
                   "recursive doubling all-gather");
  }
}

// A folded rank's own chunk, between it and the rank it is folded into: to it (after a
// reduce-scatter) or from it (before an all-gather).
void chunk_to_folded(Communicator& comm, const Layout& l, unsigned char* data, bool to_folded, const char* what) {
  const bool folded = l.f.extra();
  if (!folded && !l.f.partner()) return;
  const int chunk = folded ? l.f.rank : l.f.rank + l.f.p, peer = folded ? l.f.rank - l.f.p : l.f.rank + l.f.p;
  const ChunkRange c = shard_chunk(l.count, l.f.P, chunk);
  unsigned char* at = data + c.begin * l.elem;
  const auto n = static_cast<std::size_t>(c.count * l.elem);
  const bool sends = to_folded != folded;  // the partner sends to the folded rank, or the folded rank to it
  exchange(comm, sends ? at : nullptr, sends ? n : 0, peer, sends ? nullptr : at, sends ? 0 : n, peer, what);
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
  const Layout l{fold_of(comm), count, static_cast<std::int64_t>(dtype_size(dtype))};
  if (l.f.P == 1 || count == 0) return;
  const std::size_t total = static_cast<std::size_t>(count * l.elem);
  auto* bytes = static_cast<unsigned char*>(data);
  if (fold_in(comm, l.f, bytes, total, dtype, count, "halving-doubling fold-in")) {
    recursive_halving(comm, l, bytes, dtype, op == ReduceOp::average ? 1.0 / l.f.P : 1.0);
    recursive_doubling_gather(comm, l, bytes);
  }
  fold_out(comm, l.f, bytes, total, "halving-doubling fold-out");
  if (comm.stream_ordered()) comm.wait_stream(name);
}

void halving_doubling_reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op) {
  const char* name = "halving-doubling reduce-scatter";
  check_args(name, dtype, count);
  const Layout l{fold_of(comm), count, static_cast<std::int64_t>(dtype_size(dtype))};
  if (l.f.P == 1 || count == 0) return;
  auto* bytes = static_cast<unsigned char*>(data);
  if (fold_in(comm, l.f, bytes, static_cast<std::size_t>(count * l.elem), dtype, count, "halving-doubling fold-in"))
    recursive_halving(comm, l, bytes, dtype, op == ReduceOp::average ? 1.0 / l.f.P : 1.0);
  chunk_to_folded(comm, l, bytes, true, "halving-doubling reduce-scatter fold-out");
  if (comm.stream_ordered()) comm.wait_stream(name);
}

void recursive_doubling_allgather(Communicator& comm, void* data, std::int64_t count, DType dtype) {
  const char* name = "recursive doubling all-gather";
  check_args(name, dtype, count);
  const Layout l{fold_of(comm), count, static_cast<std::int64_t>(dtype_size(dtype))};
  if (l.f.P == 1 || count == 0) return;
  auto* bytes = static_cast<unsigned char*>(data);
  chunk_to_folded(comm, l, bytes, false, "recursive doubling all-gather fold-in");
  if (!l.f.extra()) recursive_doubling_gather(comm, l, bytes);
  fold_out(comm, l.f, bytes, static_cast<std::size_t>(count * l.elem), "recursive doubling all-gather fold-out");
  if (comm.stream_ordered()) comm.wait_stream(name);
}

}  // namespace trainlab::comm
