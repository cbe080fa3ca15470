// ZeRO-3's parameter sharding (ddp.h): the buckets by the model's parts, each rank's shard of them,
// and each bucket's all-gather before the forward and the backward of the parts that read it.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "backends/error.h"
#include "comm/ddp.h"
#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/profiler.h"

namespace trainlab::comm {

void Ddp::set_parameter_units(const std::vector<std::vector<std::string>>& units) {
  TL_CHECK(slots_.empty(), "ddp: set_parameter_units after attach (the buckets are made at attach)");
  units_ = units;
}

std::vector<std::vector<int>> Ddp::unit_buckets(const NamedTensors& parameters) const {
  std::map<std::string, int> index;
  for (std::size_t i = 0; i < parameters.size(); ++i) index[parameters[i].first] = static_cast<int>(i);
  std::vector<bool> taken(parameters.size(), false);
  std::vector<std::vector<int>> buckets;
  // Backward reaches the last part first: its bucket is launched first, as DDP's reverse order. A
  // parameter two parts read (a tied weight) is in the bucket of the later one.
  for (auto unit = units_.rbegin(); unit != units_.rend(); ++unit) {
    std::vector<int> members;
    for (const std::string& name : *unit) {
      auto it = index.find(name);
      TL_CHECK(it != index.end(),
               "ddp: zero 3: a part of the model names parameter " + name + ", which the model does not have");
      if (taken[static_cast<std::size_t>(it->second)]) continue;
      taken[static_cast<std::size_t>(it->second)] = true;
      members.push_back(it->second);
    }
    std::sort(members.rbegin(), members.rend());  // reverse registration order
    if (!members.empty()) buckets.push_back(std::move(members));
  }
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    TL_CHECK(taken[i], "ddp: zero 3: parameter " + parameters[i].first +
                           " is in no part of the model (its parts must name every parameter they read)");
  }
  return buckets;
}

void Ddp::shard_parameters() {
  // Each unit's buckets, and the last unit whose forward reads each (all of them one unit when the
  // model has no parts).
  std::map<std::string, int> bucket_of;
  for (const Slot& slot : slots_) bucket_of[slot.name] = slot.bucket;
  unit_buckets_.clear();
  if (units_.empty()) {
    unit_buckets_.emplace_back();
    for (std::size_t b = 0; b < buckets_.size(); ++b) unit_buckets_.back().push_back(static_cast<int>(b));
  }
  for (const std::vector<std::string>& unit : units_) {
    std::set<int> buckets;
    for (const std::string& name : unit) buckets.insert(bucket_of.at(name));
    unit_buckets_.emplace_back(buckets.begin(), buckets.end());
  }
  last_forward_use_.assign(buckets_.size(), -1);
  for (std::size_t u = 0; u < unit_buckets_.size(); ++u) {
    for (int b : unit_buckets_[u]) last_forward_use_[static_cast<std::size_t>(b)] = static_cast<int>(u);
  }
  // Each bucket's parameters move into one buffer, the parameters its views for good (their own
  // memory freed); this rank's chunk of it is the shard its optimiser updates in place, cut at
  // parameter boundaries into the pieces it is built over (named as ZeRO-1's).
  NoGradGuard no_grad;
  const int rank = comm_.rank();
  for (Bucket& bucket : buckets_) {
    MemoryCategoryScope category(MemoryCategory::parameters);
    bucket.params = Tensor::empty({bucket.numel}, dtype_, *backend_);
    for (int s : bucket.slots) {
      Slot& slot = slots_[static_cast<std::size_t>(s)];
      const Tensor view = bucket.params.narrow(0, slot.offset, slot.numel).view(slot.parameter.shape());
      view.detach().copy_(slot.parameter);
      slot.parameter.set_data(view);
    }
    const ChunkRange mine = shard_chunk(bucket.numel, comm_.size(), rank);
    if (mine.count == 0) continue;  // more ranks than elements
    bucket.param_shard = Tensor::empty({mine.count}, dtype_, *backend_);
  }
  for (const ChunkPiece& c : chunk_pieces(rank)) {
    Bucket& bucket = buckets_[static_cast<std::size_t>(c.bucket)];
    const Slot& slot = slots_[static_cast<std::size_t>(c.slot)];
    const std::int64_t begin = c.bucket_offset - shard_chunk(bucket.numel, comm_.size(), rank).begin;
    Tensor view = bucket.param_shard.narrow(0, begin, c.count);
    view.copy_(slot.parameter.detach().flatten().narrow(0, c.bucket_offset - slot.offset, c.count));
    view.set_requires_grad(true);
    view.set_name(ParameterPiece{slot.name, c.bucket_offset - slot.offset, c.count}.name());
    owned_.push_back({c.bucket, c.slot, c.bucket_offset, view, Tensor()});
  }
  for (Bucket& bucket : buckets_) bucket.params.release_data();
}

void Ddp::queue_gather(int b) {
  Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
  if (bucket.gather_queued) return;
  NoGradGuard no_grad;
  {
    MemoryCategoryScope category(MemoryCategory::parameters);
    bucket.params.restore_data();
  }
  if (!communicate_) bucket.params.zero_();  // timing only: zeros where the other ranks' chunks would be
  const ChunkRange mine = shard_chunk(bucket.numel, comm_.size(), comm_.rank());
  if (mine.count > 0) bucket.params.narrow(0, mine.begin, mine.count).copy_(bucket.param_shard);
  std::shared_ptr<DeviceEvent> copied;
  if (StreamEvents* events = backend_->stream_events()) copied = events->record_event();
  if (communicate_) {
    gathered_bytes_ += static_cast<std::int64_t>(bucket.params.nbytes());
    ++gathers_;
  }
  {
    std::lock_guard lock(mutex_);
    bucket.shard_copied = std::move(copied);
    bucket.gather_queued = true;
    bucket.gathered = false;
    queue_.push_back({b, true});
  }
  cv_.notify_all();
}

void Ddp::run_gather(Bucket& bucket) {
  const std::int64_t start = Profiler::now_ns();
  if (bucket.shard_copied) comm_.wait_for(*bucket.shard_copied);
  if (communicate_) {
    allgather(comm_, bucket.params.raw_data(), bucket.numel, dtype_, options_.allreduce, thresholds_);
    comm_.wait_stream("the all-gather of ZeRO-3's parameters");  // the compute stream reads them next
  }
  if (Profiler::instance().enabled()) {
    Profiler::instance().record(
        fmt::format("all-gather parameters, bucket {} ({:.1f} KiB)", &bucket - buckets_.data(),
                    static_cast<double>(bucket.numel * static_cast<std::int64_t>(dtype_size(dtype_))) / 1024),
        start, Profiler::now_ns());
  }
}

void Ddp::wait_gathered(int b) {
  Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return bucket.gathered; });
  if (error_) std::rethrow_exception(error_);
}

void Ddp::release_params(Bucket& bucket) {
  {
    // A gather still on the communication thread writes into the buffer until it is done.
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !bucket.gather_queued || bucket.gathered; });
    bucket.gather_queued = bucket.gathered = false;
  }
  bucket.params.release_data();  // the parameters' memory, and every handle an op saved of them
}

void Ddp::gather_unit(int unit, int prefetch) {
  TL_PROFILE_SCOPE("zero3.gather_unit");
  const auto units = static_cast<int>(unit_buckets_.size());
  TL_CHECK(unit >= 0 && unit < units,
           fmt::format("ddp: zero 3: part {} of a model cut into {} unit{}", unit, units, units == 1 ? "" : "s"));
  for (int b : unit_buckets_[static_cast<std::size_t>(unit)]) queue_gather(b);
  if (prefetch >= 0 && prefetch < units) {
    for (int b : unit_buckets_[static_cast<std::size_t>(prefetch)]) queue_gather(b);
  }
  const std::int64_t start = Profiler::now_ns();
  for (int b : unit_buckets_[static_cast<std::size_t>(unit)]) wait_gathered(b);
  gather_wait_ns_ += Profiler::now_ns() - start;
}

void Ddp::before_part(int part) {
  TL_CHECK(!slots_.empty(), "ddp: before_part before attach");
  gather_unit(part, part + 1);
}

Tensor Ddp::after_part(int part, const Tensor& output) {
  const auto units = static_cast<int>(unit_buckets_.size());
  const bool last = part + 1 == units;
  const bool backward_follows = GradMode::enabled() && output.requires_grad();
  // What no later part reads goes now. When a backward follows, the last two parts' stay: backward
  // starts with them right after the forward (the second's would be gathered again at once: FSDP's
  // reshard_after_forward off for the tail).
  const bool keep = backward_follows && part + 2 >= units;
  for (int b : unit_buckets_[static_cast<std::size_t>(part)]) {
    if (last_forward_use_[static_cast<std::size_t>(b)] == part && !keep)
      release_params(buckets_[static_cast<std::size_t>(b)]);
  }
  if (last || !backward_follows) return output;
  // Before the part's own backward: its buckets again (nothing to do for a kept part), the part
  // before it queued behind them.
  return record(output.detach(), "zero3.gather_parameters", {output},
                [this, part](const Tensor& grad, const std::vector<bool>&) {
                  gather_unit(part, part - 1);
                  return std::vector<Tensor>{grad};
                });
}

void Ddp::gather_parameters() {
  TL_CHECK(!in_backward_, "ddp: gather_parameters inside a backward");
  for (std::size_t b = 0; b < buckets_.size(); ++b) queue_gather(static_cast<int>(b));
  for (std::size_t b = 0; b < buckets_.size(); ++b) wait_gathered(static_cast<int>(b));
}

void Ddp::release_parameters() {
  NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (!bucket.params.has_data()) continue;
    // What the parameters hold now (a resume's values) is this rank's shard from here on.
    const ChunkRange mine = shard_chunk(bucket.numel, comm_.size(), comm_.rank());
    if (mine.count > 0) bucket.param_shard.copy_(bucket.params.narrow(0, mine.begin, mine.count));
    release_params(bucket);
  }
  note_parameter_write();
}

std::int64_t Ddp::parameter_bytes_held() const {
  std::int64_t bytes = 0;
  if (!shards_parameters()) {
    for (const Slot& slot : slots_) bytes += static_cast<std::int64_t>(slot.parameter.nbytes());
    return bytes;
  }
  for (const Bucket& bucket : buckets_) {
    if (bucket.param_shard.defined()) bytes += static_cast<std::int64_t>(bucket.param_shard.nbytes());
    if (bucket.params.has_data()) bytes += static_cast<std::int64_t>(bucket.params.nbytes());
  }
  return bytes;
}

}  // namespace trainlab::comm
