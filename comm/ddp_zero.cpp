// DDP's sharding (ddp.h): ZeRO-1's pieces and their gradients, ZeRO-2's transient buckets and
// gradient shard, the all-gather of the updated parameters, and the optimiser state merged and cut
// for checkpoints.
#include <fmt/format.h>

#include <algorithm>

#include "backends/error.h"
#include "comm/ddp.h"
#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/profiler.h"

namespace trainlab::comm {

void Ddp::make_views(Bucket& bucket) {
  for (int s : bucket.slots) {
    Slot& slot = slots_[static_cast<std::size_t>(s)];
    slot.view = bucket.buffer.narrow(0, slot.offset, slot.numel).view(slot.parameter.shape());
  }
}

void Ddp::ensure_bucket(int b) {
  Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
  if (bucket.buffer.defined()) return;
  {
    MemoryCategoryScope category(MemoryCategory::gradients);
    bucket.buffer = Tensor::zeros({bucket.numel}, dtype_, *backend_);
  }
  make_views(bucket);
  if (!options_.gradient_as_bucket_view) return;  // each gradient is copied in when it is ready
  NoGradGuard no_grad;
  for (int s : bucket.slots) {
    Slot& slot = slots_[static_cast<std::size_t>(s)];
    // What no_sync micro-steps accumulated moves into the bucket; backward adds to it there.
    const Tensor grad = slot.parameter.grad();
    if (grad.defined()) slot.view.copy_(grad);
    slot.parameter.set_grad(slot.view);
  }
}

void Ddp::ensure_shard(int b) {
  Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
  if (bucket.shard.defined()) return;
  std::int64_t count = 0;
  for (const OwnedPiece& piece : owned_) count += piece.bucket == b ? piece.view.numel() : 0;
  if (count == 0) return;  // this rank owns nothing of it (more ranks than elements)
  {
    MemoryCategoryScope category(MemoryCategory::gradients);
    bucket.shard = Tensor::empty({count}, dtype_, *backend_);
  }
  std::int64_t at = 0;
  for (OwnedPiece& piece : owned_) {
    if (piece.bucket != b) continue;
    piece.shard_grad = bucket.shard.narrow(0, at, piece.view.numel()).view(piece.view.shape());
    piece.view.set_grad(piece.shard_grad);
    at += piece.view.numel();
  }
}

void Ddp::release_bucket(Bucket& bucket) {
  TL_PROFILE_SCOPE("zero2.release_bucket");
  NoGradGuard no_grad;
  const int b = static_cast<int>(&bucket - buckets_.data());
  ensure_shard(b);
  for (OwnedPiece& piece : owned_) {
    if (piece.bucket == b) attach_piece_gradient(piece, &bucket);
  }
  for (int s : bucket.slots) {
    Slot& slot = slots_[static_cast<std::size_t>(s)];
    slot.parameter.set_grad(Tensor());
    slot.view = Tensor();
  }
  bucket.buffer = Tensor();
}

void Ddp::release_done_buckets() {
  while (next_release_ < buckets_.size()) {
    Bucket& bucket = buckets_[next_release_];
    {
      std::lock_guard lock(mutex_);
      if (!bucket.done || error_) return;  // an error: finish_backward throws it
    }
    release_bucket(bucket);
    ++next_release_;
  }
}

std::int64_t Ddp::gradient_bytes_held() const {
  std::int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    if (bucket.buffer.defined()) bytes += static_cast<std::int64_t>(bucket.buffer.nbytes());
    if (bucket.shard.defined()) bytes += static_cast<std::int64_t>(bucket.shard.nbytes());
  }
  for (const Slot& slot : slots_) {
    const Tensor grad = slot.parameter.grad();
    if (grad.defined() && !(slot.view.defined() && grad.same_view(slot.view)))
      bytes += static_cast<std::int64_t>(grad.nbytes());
  }
  return bytes;
}

void Ddp::attach_piece_gradient(OwnedPiece& piece, const Bucket* bucket) {
  NoGradGuard no_grad;  // bookkeeping, not part of any graph
  // The piece's gradient is its range of the parameter's own (local) gradient when that is
  // row-major: no memory of its own (and with gradient_as_bucket_view that range is the bucket's,
  // where the reduce-scatter left the averaged chunk). A channels_last gradient's piece is not one
  // range of it, and gets a buffer.
  // ZeRO-2: the piece's gradient is its range of the persistent gradient shard, always.
  const Slot& slot = slots_[static_cast<std::size_t>(piece.slot)];
  const Tensor local = slot.parameter.grad();
  const std::int64_t begin = piece.bucket_offset - slot.offset;
  Tensor grad = piece.view.grad();
  if (shards_gradients()) {
    ensure_shard(piece.bucket);
    grad = piece.shard_grad;
  } else if (local.defined() && local.is_contiguous()) {
    piece.view.set_grad(local.detach().flatten().narrow(0, begin, piece.view.numel()));
    grad = piece.view.grad();
  } else if (!grad.defined()) {
    MemoryCategoryScope category(MemoryCategory::gradients);
    piece.view.set_grad(Tensor::empty(piece.view.shape(), dtype_, piece.view.backend()));
    grad = piece.view.grad();
  }
  if (bucket != nullptr) {
    // The averaged chunk, from the bucket (nothing to copy when the gradient is that range).
    const Tensor chunk = bucket->buffer.narrow(0, piece.bucket_offset, piece.view.numel());
    if (!grad.same_view(chunk)) grad.copy_(chunk);
  } else if (shards_gradients() || !local.is_contiguous()) {
    // Communication off: the local gradient's range, in row-major order.
    grad.copy_(local.contiguous().flatten().narrow(0, begin, piece.view.numel()));
  }
}

std::vector<Ddp::ChunkPiece> Ddp::chunk_pieces(int rank) const {
  std::vector<ChunkPiece> pieces;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const ChunkRange chunk = shard_chunk(buckets_[b].numel, comm_.size(), rank);
    for (int s : buckets_[b].slots) {
      const Slot& slot = slots_[static_cast<std::size_t>(s)];
      const std::int64_t begin = std::max(chunk.begin, slot.offset);
      const std::int64_t end = std::min(chunk.begin + chunk.count, slot.offset + slot.numel);
      if (begin < end) pieces.push_back({static_cast<int>(b), s, begin, end - begin});
    }
  }
  return pieces;
}

std::vector<ParameterPiece> Ddp::pieces_of(int rank) const {
  std::vector<ParameterPiece> pieces;
  for (const ChunkPiece& c : chunk_pieces(rank)) {
    const Slot& slot = slots_[static_cast<std::size_t>(c.slot)];
    pieces.push_back({slot.name, c.bucket_offset - slot.offset, c.count});
  }
  return pieces;
}

NamedTensors Ddp::optimizer_parameters() const {
  TL_CHECK(!slots_.empty(), "ddp: optimizer_parameters before attach");
  if (options_.zero == 0) return parameters();
  NamedTensors views;
  for (const OwnedPiece& piece : owned_) views.emplace_back(piece.view.name(), piece.view);
  return views;
}

void Ddp::finish_step() {
  if (options_.zero == 0) return;
  if (shards_gradients()) {
    // ZeRO-2: the step has spent the gradient shards.
    for (OwnedPiece& piece : owned_) {
      piece.view.set_grad(Tensor());
      piece.shard_grad = Tensor();
    }
    for (Bucket& bucket : buckets_) bucket.shard = Tensor();
  }
  if (shards_parameters()) {
    // ZeRO-3: the optimiser updated the shards in place; the next forward gathers them.
    for (Slot& slot : slots_) slot.parameter.zero_grad(true);
    note_parameter_write();
    return;
  }
  if (!communicate_) {  // timing only: no all-gather; the local gradients are spent all the same
    for (Slot& slot : slots_) slot.parameter.zero_grad(shards_gradients());
    return;
  }
  TL_PROFILE_SCOPE("zero.allgather_parameters");
  NoGradGuard no_grad;
  // ZeRO-2: the buckets were released after their reduce-scatter; each is all-gathered through one
  // transient buffer, the size of the largest (in the caller's category: communication).
  Tensor scratch;
  if (shards_gradients()) {
    std::int64_t largest = 0;
    for (const Bucket& bucket : buckets_) largest = std::max(largest, bucket.numel);
    scratch = Tensor::empty({largest}, dtype_, *backend_);
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    if (shards_gradients()) {
      bucket.buffer = scratch.narrow(0, 0, bucket.numel);
      make_views(bucket);
    }
    // This rank's chunk holds its updated pieces; the all-gather brings everyone else's. (With
    // gradient_as_bucket_view this overwrites the spent gradients; they are zeroed below.)
    for (const OwnedPiece& piece : owned_) {
      if (piece.bucket == static_cast<int>(b))
        bucket.buffer.narrow(0, piece.bucket_offset, piece.view.numel()).copy_(piece.view);
    }
    if (StreamEvents* events = backend_->stream_events()) {
      auto written = events->record_event();
      if (direct_) {
        comm_.wait_for(*written);
      } else {
        written->synchronize();
      }
    }
    stage_out(bucket);
    allgather(comm_, comm_memory(bucket), bucket.numel, dtype_, options_.allreduce, thresholds_);
    stage_in(bucket);
    for (int s : bucket.slots) {
      Slot& slot = slots_[static_cast<std::size_t>(s)];
      slot.parameter.detach().copy_(slot.view);
      slot.parameter.zero_grad();  // the local gradient: this step's is spent (ZeRO-2: none left)
      if (shards_gradients()) slot.view = Tensor();
    }
    if (shards_gradients()) bucket.buffer = Tensor();
  }
  note_parameter_write();  // low-precision working copies of the parameters are stale
}

StateDict Ddp::gather_optimizer_state(const StateDict& local) {
  if (options_.zero == 0) return local;
  TL_PROFILE_SCOPE("zero.gather_optimizer_state");
  // Each rank's shard as bytes to rank 0, which merges them into the unsharded state.
  const std::vector<unsigned char> mine = encode_state_dict(local);
  const std::vector<std::int64_t> sizes = gather(static_cast<std::int64_t>(mine.size()));
  const int P = comm_.size();
  if (comm_.rank() != 0) {
    auto memory = comm_.allocate(mine.size());
    comm_.copy_in(memory.get(), mine.data(), mine.size());
    std::vector<std::unique_ptr<Request>> requests;
    requests.push_back(comm_.isend(memory.get(), mine.size(), 0, "optimizer shard to rank 0"));
    comm_.wait_all(requests);
    return {};
  }
  std::vector<std::shared_ptr<void>> memory(static_cast<std::size_t>(P));
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 1; r < P; ++r) {
    memory[static_cast<std::size_t>(r)] = comm_.allocate(static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
    requests.push_back(comm_.irecv(memory[static_cast<std::size_t>(r)].get(),
                                   static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]), r,
                                   "optimizer shard from rank"));
  }
  comm_.wait_all(requests);
  Backend& backend = slots_.front().parameter.backend();
  std::vector<StateDict> shards;
  std::vector<std::vector<ParameterPiece>> pieces;
  for (int r = 0; r < P; ++r) {
    pieces.push_back(pieces_of(r));
    if (r == 0) {
      shards.push_back(local);
      continue;
    }
    std::vector<unsigned char> bytes(static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]));
    comm_.copy_out(bytes.data(), memory[static_cast<std::size_t>(r)].get(), bytes.size());
    shards.push_back(
        decode_state_dict(bytes.data(), bytes.size(), "rank " + std::to_string(r) + "'s optimizer shard", backend));
  }
  return merge_optimizer_shards(shards, pieces, parameters());
}

StateDict Ddp::shard_optimizer_state(const StateDict& full) {
  if (options_.zero == 0) return full;
  return trainlab::shard_optimizer_state(full, parameters(), pieces_of(comm_.rank()));
}

}  // namespace trainlab::comm
