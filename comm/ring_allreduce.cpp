#include "comm/ring_allreduce.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/error.h"

namespace trainlab::comm {

namespace {

// y += x (or y = (y + x) * scale when scaling), elementwise; halves go through f32.
void reduce_into(DType dtype, void* y, const void* x, std::int64_t n, double scale) {
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
  throw Error(std::string("ring all-reduce: dtype ") + dtype_name(dtype) + " is not supported (f32, f64, bf16, f16)");
}

}  // namespace

namespace {

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
  TL_CHECK(!comm.device_memory(), std::string(name) + ": the " + comm.backend() +
                                      " communicator works on device memory, and the ring reduces on the host; use "
                                      "--allreduce native (" +
                                      comm.backend() +
                                      "'s own collective) there, or the ring over the mpi communicator");
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

  thread_local std::vector<unsigned char> scratch;
  scratch.resize(static_cast<std::size_t>(2 * seg * elem));
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
    return comm.irecv(scratch.data() + (i % 2) * seg * elem, static_cast<std::size_t>(p.length * elem), left,
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
      reduce_into(dtype, bytes + p.begin * elem, scratch.data() + (i % 2) * seg * elem, p.length, scale);
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
