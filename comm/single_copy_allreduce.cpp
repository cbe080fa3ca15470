#include "comm/single_copy_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/error.h"

namespace trainlab::comm {

namespace {

// The sum's working block: 16 KiB, in L1 beside the loads that feed it.
constexpr std::size_t kBlockBytes = 16 * 1024;

}  // namespace

SingleCopyAllreduce::SingleCopyAllreduce(Communicator& comm, std::size_t bytes, bool share)
    : comm_(comm), bytes_(bytes) {
  TL_CHECK(bytes > 0, "single-copy all-reduce: a window of 0 bytes");
  const std::string ranks = fmt::format("{} rank{}", comm.size(), comm.size() == 1 ? "" : "s");
  if (share) window_ = comm.share_memory(bytes);  // a collective; null on every rank or on none
  if (window_ != nullptr) {
    data_ = window_->segment(comm.rank());
    description_ = fmt::format("single-copy over a shared window ({} on one host)", ranks);
    return;
  }
  local_ = comm.allocate(bytes);
  data_ = local_.get();
  description_ = share ? fmt::format(
                             "the ring: the {} do not share one host's memory (a window needs every rank on "
                             "one host, and a communicator that maps host memory), so no window",
                             ranks)
                       : fmt::format("the ring ({}; the window not asked for)", ranks);
}

void SingleCopyAllreduce::allreduce(std::int64_t count, DType dtype, ReduceOp op, std::size_t offset) {
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
  TL_CHECK(count >= 0 && offset <= bytes_ && static_cast<std::size_t>(count * elem) <= bytes_ - offset,
           fmt::format("single-copy all-reduce: {} elements of {} ({} bytes) from byte {} do not fit in the {}-byte "
                       "segment",
                       count, dtype_name(dtype), count * elem, offset, bytes_));
  TL_CHECK(
      dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16 || dtype == DType::f16,
      std::string("single-copy all-reduce: dtype ") + dtype_name(dtype) + " is not one it sums (f32, f64, bf16, f16)");
  if (window_ == nullptr) {
    comm::allreduce(comm_, static_cast<unsigned char*>(data_) + offset, count, dtype, op, Algorithm::ring);
    return;
  }
  const int P = comm_.size();
  window_->fence();  // every rank's data is in its segment
  const ChunkRange mine = shard_chunk(count, P, comm_.rank());
  const std::int64_t block = static_cast<std::int64_t>(kBlockBytes) / elem;
  thread_local std::vector<unsigned char> sum;
  sum.resize(kBlockBytes);
  const double last_scale = op == ReduceOp::average ? 1.0 / P : 1.0;
  for (std::int64_t at = mine.begin; at < mine.begin + mine.count; at += block) {
    const std::int64_t n = std::min(block, mine.begin + mine.count - at);
    const auto from = offset + static_cast<std::size_t>(at * elem), length = static_cast<std::size_t>(n * elem);
    auto segment = [&](int r) { return static_cast<unsigned char*>(window_->segment(r)) + from; };
    // In rank order, read where each rank's data lies; the average's scale in the last add.
    std::memcpy(sum.data(), segment(0), length);
    for (int r = 1; r < P; ++r) comm_.reduce_local(dtype, sum.data(), segment(r), n, r + 1 == P ? last_scale : 1.0);
    for (int r = 0; r < P; ++r) std::memcpy(segment(r), sum.data(), length);
  }
  window_->fence();  // every chunk is in every segment; nobody still reads a segment its owner may refill
}

}  // namespace trainlab::comm
