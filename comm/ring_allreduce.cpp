#include "comm/ring_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/error.h"

namespace trainlab::comm {

namespace {

// The ring on a stream-ordered communicator (NCCL): the same stages, chunks, segments and
// arithmetic as below, as a sequence of steps each of which is one send and one receive launched
// together (a group) and, in the reduce-scatter, the reduction of what arrived. The stream runs
// them in order, so nothing waits on the host until the end; a step never holds more than one
// send and one receive, so the neighbours' groups always match (larger groups could deadlock, a
// send waiting for a receive its peer has not yet launched).
void ring_stages_ordered(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, int first,
                         int last, const RingOptions& options) {
  const int P = comm.size(), r = comm.rank();
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  auto* bytes = static_cast<unsigned char*>(data);
  const std::int64_t seg = std::max<std::int64_t>(1, static_cast<std::int64_t>(options.segment_bytes) / elem);
  const int right = (r + 1) % P, left = (r - 1 + P) % P;
  const int gather_stage = P - 1;
  auto mod = [P](int v) { return ((v % P) + P) % P; };
  const double average = op == ReduceOp::average ? 1.0 / P : 1.0;
  auto* scratch = static_cast<unsigned char*>(comm.scratch(static_cast<std::size_t>(2 * seg * elem)));
  for (int t = first; t < last; ++t) {
    const ChunkRange send = shard_chunk(count, P, mod(r - t - 1)), recv = shard_chunk(count, P, mod(r - t - 2));
    const bool reducing = t < gather_stage;
    const std::int64_t steps = (std::max(send.count, recv.count) + seg - 1) / seg;
    for (std::int64_t j = 0; j < steps; ++j) {
      const std::int64_t send_length = std::clamp<std::int64_t>(send.count - j * seg, 0, seg);
      const std::int64_t recv_length = std::clamp<std::int64_t>(recv.count - j * seg, 0, seg);
      unsigned char* target = reducing ? scratch + (j % 2) * seg * elem : bytes + (recv.begin + j * seg) * elem;
      comm.sendrecv(bytes + (send.begin + j * seg) * elem, static_cast<std::size_t>(send_length * elem), right, target,
                    static_cast<std::size_t>(recv_length * elem), left,
                    reducing ? "ring reduce-scatter" : "ring all-gather");
      if (reducing && recv_length > 0) {
        const double scale = t == gather_stage - 1 ? average : 1.0;
        comm.reduce_local(dtype, bytes + (recv.begin + j * seg) * elem, target, recv_length, scale);
      }
    }
  }
  comm.wait_stream(fmt::format("the ring's steps (send to rank {}, receive from rank {})", right, left));
}

// The ring's stages [first, last): reduce-scatter is stages 0..P-2, all-gather P-1..2P-3, the
// all-reduce all of them. At stage t rank r sends chunk r-t-1 to its right neighbour and receives
// chunk r-t-2 from its left (mod P), so the reduce-scatter leaves rank r owning chunk r, complete.
void ring_stages(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op, int first, int last,
                 const RingOptions& options, const char* name) {
  TL_CHECK(dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16 || dtype == DType::f16,
           std::string(name) + ": dtype " + dtype_name(dtype) + " is not supported (f32, f64, bf16, f16)");
  TL_CHECK(count >= 0, std::string(name) + ": negative count");
  const int P = comm.size(), r = comm.rank();
  if (P == 1 || count == 0) return;  // the sum (and the average) of one rank is its own buffer
  if (comm.stream_ordered()) {
    ring_stages_ordered(comm, data, count, dtype, op, first, last, options);
    return;
  }
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  auto* bytes = static_cast<unsigned char*>(data);
  auto chunk_begin = [&](int c) { return shard_chunk(count, P, c).begin; };
  auto chunk_count = [&](int c) { return shard_chunk(count, P, c).count; };
  const std::int64_t seg = std::max<std::int64_t>(1, static_cast<std::int64_t>(options.segment_bytes) / elem);
  const int right = (r + 1) % P, left = (r - 1 + P) % P;
  const int gather_stage = P - 1;  // the first all-gather stage
  auto mod = [P](int v) { return ((v % P) + P) % P; };
  const double average = op == ReduceOp::average ? 1.0 / P : 1.0;

  // Every segment this rank will receive, in order: (stage, chunk, first element, length).
  struct Piece {
    int stage, chunk;
    std::int64_t begin, length;
  };
  thread_local std::vector<Piece> pieces;  // reused across calls: a DDP step calls this per bucket
  pieces.clear();
  for (int t = first; t < last; ++t) {
    const int c = mod(r - t - 2);
    for (std::int64_t b = chunk_begin(c), end = chunk_begin(c) + chunk_count(c); b < end; b += seg) {
      pieces.push_back({t, c, b, std::min(seg, end - b)});
    }
  }

  // The double buffer receives arrive in: the communicator's memory (host, or device for NCCL).
  auto* scratch = static_cast<unsigned char*>(comm.scratch(static_cast<std::size_t>(2 * seg * elem)));
  thread_local std::vector<std::vector<std::unique_ptr<Request>>> sends;
  sends.resize(static_cast<std::size_t>(2 * (P - 1)));
  for (auto& stage_sends : sends) stage_sends.clear();
  auto send_piece = [&](int stage, std::int64_t begin, std::int64_t length) {
    sends[static_cast<std::size_t>(stage)].push_back(
        comm.isend(bytes + begin * elem, static_cast<std::size_t>(length * elem), right,
                   stage < gather_stage ? "ring reduce-scatter" : "ring all-gather"));
  };

  // The first stage sends its chunk as it is: this rank's own contribution (reduce-scatter), or
  // the chunk it owns (all-gather alone).
  {
    const int c = mod(r - first - 1);
    for (std::int64_t b = chunk_begin(c), end = chunk_begin(c) + chunk_count(c); b < end; b += seg) {
      send_piece(first, b, std::min(seg, end - b));
    }
  }

  // An all-gather piece lands where this rank sent from P-1 stages earlier: those sends must be
  // complete before the region is overwritten.
  std::vector<bool> drained(static_cast<std::size_t>(2 * (P - 1)), false);
  auto post = [&](std::size_t i) -> std::unique_ptr<Request> {
    const Piece& p = pieces[i];
    if (p.stage >= gather_stage) {
      const auto earlier = static_cast<std::size_t>(p.stage - gather_stage);
      if (!drained[earlier]) {
        comm.wait_all(sends[earlier]);
        drained[earlier] = true;
      }
      return comm.irecv(bytes + p.begin * elem, static_cast<std::size_t>(p.length * elem), left, "ring all-gather");
    }
    return comm.irecv(scratch + (i % 2) * seg * elem, static_cast<std::size_t>(p.length * elem), left,
                      "ring reduce-scatter");
  };

  std::vector<std::unique_ptr<Request>> current;
  if (!pieces.empty()) current.push_back(post(0));
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    // Receive the next piece while this one is reduced.
    std::unique_ptr<Request> next = i + 1 < pieces.size() ? post(i + 1) : nullptr;
    comm.wait_all(current);
    const Piece& p = pieces[i];
    if (p.stage < gather_stage) {
      // The last reduce-scatter stage completes the chunk this rank owns: scale it once for an average.
      const double scale = p.stage == gather_stage - 1 ? average : 1.0;
      comm.reduce_local(dtype, bytes + p.begin * elem, scratch + (i % 2) * seg * elem, p.length, scale);
    }
    // Forward at once: this piece is the next stage's send.
    if (p.stage + 1 < last) send_piece(p.stage + 1, p.begin, p.length);
    if (next) current.push_back(std::move(next));
  }
  for (auto& stage_sends : sends) comm.wait_all(stage_sends);
}

}  // namespace

void ring_allreduce(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op,
                    const RingOptions& options) {
  ring_stages(comm, data, count, dtype, op, 0, 2 * (comm.size() - 1), options, "ring all-reduce");
}

void ring_reduce_scatter(Communicator& comm, void* data, std::int64_t count, DType dtype, ReduceOp op,
                         const RingOptions& options) {
  ring_stages(comm, data, count, dtype, op, 0, comm.size() - 1, options, "ring reduce-scatter");
}

void ring_allgather(Communicator& comm, void* data, std::int64_t count, DType dtype, const RingOptions& options) {
  ring_stages(comm, data, count, dtype, ReduceOp::sum, comm.size() - 1, 2 * (comm.size() - 1), options,
              "ring all-gather");
}

}  // namespace trainlab::comm
