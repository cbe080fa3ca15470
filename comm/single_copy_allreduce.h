// The single-copy intra-node all-reduce (issue 48): the ranks of one host map one shared window
// (MPI-3 shared memory, Communicator::share_memory), one segment per rank, and the data to reduce
// lies in this rank's segment. Rank r owns chunk r (shard_chunk): after a fence (every rank's data
// is written) it reads chunk r of every segment where it lies, sums it block by block in a small
// buffer that stays in cache (in rank order: every element is summed in one fixed order, by its
// owner alone, so every rank ends with the same bits), and writes the sum into chunk r of every
// segment; a second fence and every segment holds the whole result. Each element is read once from
// each rank's memory and written once into each: per rank S read and S written, what a memcpy of
// the buffer moves, where the ring moves about 3.5 S (its receive copies and its reduce).
//
// The window's ranks must share a host. Where they do not (ranks on other hosts, or a communicator
// that cannot map memory: NCCL), the buffer is this process's own memory and the all-reduce is the
// hand-written ring, said by describe(). A rank that stops arriving is named at the fence, under the
// communicator's deadline, and the job ends.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace trainlab::comm {

class SingleCopyAllreduce {
 public:
  // A collective over `comm`: a segment of `bytes` for every rank. `share` false keeps the ring
  // (the comparison's control, and the path a cluster takes) even where a window could be mapped.
  SingleCopyAllreduce(Communicator& comm, std::size_t bytes, bool share = true);
  SingleCopyAllreduce(const SingleCopyAllreduce&) = delete;
  SingleCopyAllreduce& operator=(const SingleCopyAllreduce&) = delete;

  void* buffer() { return data_; }  // this rank's data: write it here, read the result here
  std::size_t bytes() const { return bytes_; }
  bool shared() const { return window_ != nullptr; }
  // "single-copy over a shared window (2 ranks on one host)", or why the ring runs instead.
  const std::string& describe() const { return description_; }

  // In place over every rank's buffer(): `count` elements from `offset` bytes into it (DDP keeps
  // every bucket in one window, each at its offset). Throws Error when they do not fit in the
  // segment (naming both sizes) or the dtype is not f32, f64, bf16 or f16.
  void allreduce(std::int64_t count, DType dtype, ReduceOp op, std::size_t offset = 0);

 private:
  Communicator& comm_;
  std::size_t bytes_;
  std::unique_ptr<SharedMemory> window_;
  std::shared_ptr<void> local_;  // without a window: this process's memory, reduced by the ring
  void* data_ = nullptr;
  std::string description_;
};

}  // namespace trainlab::comm
