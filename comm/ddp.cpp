#include "comm/ddp.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backends/error.h"
#include "comm/ring_allreduce.h"
#include "comm/tuning.h"
#include "engine/core/autograd.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/profiler.h"

namespace trainlab::comm {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(std::int64_t bytes) {
  const auto b = static_cast<double>(bytes);
  return b >= kMiB ? fmt::format("{:.2f} MiB", b / kMiB) : fmt::format("{:.1f} KiB", b / 1024);
}

}  // namespace

std::vector<std::vector<int>> assign_buckets(const std::vector<std::int64_t>& parameter_bytes, std::int64_t first_cap,
                                             std::int64_t cap) {
  std::vector<std::vector<int>> buckets;
  std::vector<int> current;
  std::int64_t bytes = 0;
  for (int i = static_cast<int>(parameter_bytes.size()) - 1; i >= 0; --i) {
    current.push_back(i);
    bytes += parameter_bytes[static_cast<std::size_t>(i)];
    if (bytes >= (buckets.empty() ? first_cap : cap)) {
      buckets.push_back(std::move(current));
      current.clear();
      bytes = 0;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

Ddp::Ddp(Communicator& comm, const DdpOptions& options) : comm_(comm), options_(options) {
  TL_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_mb > 0,
           fmt::format("ddp: bucket caps must be > 0 MiB (got bucket_cap_mb {}, first bucket {})",
                       options.bucket_cap_mb, options.first_bucket_mb));
  TL_CHECK(options.zero >= 0 && options.zero <= 3,
           fmt::format("ddp: zero {} is not a stage DDP runs (0: replicated, 1: optimiser state sharded, 2: "
                       "gradients too, 3: parameters too)",
                       options.zero));
  if (options.allreduce == Algorithm::automatic) {
    thresholds_ = thresholds_for(options.allreduce_tuning, comm.size(), nullptr);
  } else {
    TL_CHECK(options.allreduce_tuning.empty(), "ddp: allreduce_tuning " + options.allreduce_tuning +
                                                   " is read by allreduce auto only, and the all-reduce is " +
                                                   algorithm_name(options.allreduce));
  }
  thread_ = std::thread([this] { comm_loop(); });
}

Ddp::~Ddp() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  close_window();
}

void Ddp::broadcast_parameters() {
  // The replicas start equal: rank 0's parameters everywhere (checked after by verify_replicas).
  backend_->synchronize();  // their initialisation has finished (a GPU backend queues it)
  for (Slot& slot : slots_) {
    const std::size_t size = slot.parameter.nbytes();
    if (direct_) {
      comm_.broadcast(slot.parameter.raw_data(), size, 0);
    } else {
      std::vector<unsigned char> host(size);
      slot.parameter.copy_to_host(host.data());
      auto memory = comm_.allocate(size);
      comm_.copy_in(memory.get(), host.data(), size);
      comm_.broadcast(memory.get(), size, 0);
      comm_.copy_out(host.data(), memory.get(), size);
      if (comm_.rank() != 0) backend_->copy_from_host(slot.parameter.raw_data(), host.data(), size);
    }
    if (comm_.rank() != 0) note_parameter_write();  // low-precision working copies of it are stale
  }
}

void Ddp::attach(const NamedTensors& parameters) {
  TL_CHECK(slots_.empty(), "ddp: attach() was already called");
  TL_CHECK(!parameters.empty(), "ddp: the model has no parameters");
  dtype_ = parameters.front().second.dtype();
  backend_ = &parameters.front().second.backend();
  direct_ = comm_.reaches(*backend_);
  TL_CHECK(direct_ || !comm_.device_memory(),
           "ddp: the " + comm_.backend() + " communicator works on " +
               (comm_.device_name().empty() ? std::string("its device's") : comm_.device_name()) +
               " memory, and the backend '" + backend_->name() +
               "' keeps the model elsewhere: use the cuda backend with it (--backend cuda), or --comm mpi");
  TL_CHECK(direct_ || !shards_parameters(), "ddp: zero 3 gathers the parameters in the backend's memory, and the " +
                                                comm_.backend() + " communicator cannot reach backend '" +
                                                backend_->name() +
                                                "' (use --comm nccl with the cuda backend, or zero: 2)");
  TL_CHECK(dtype_ == DType::f32 || dtype_ == DType::f64,
           std::string("ddp: parameters must be f32 or f64 (master weights), got ") + dtype_name(dtype_));
  std::vector<std::int64_t> bytes;
  for (const auto& [name, parameter] : parameters) {
    TL_CHECK(parameter.dtype() == dtype_, "ddp: parameter " + name + " is " + dtype_name(parameter.dtype()) +
                                              ", the others " + dtype_name(dtype_) + " (one dtype per model)");
    TL_CHECK(parameter.requires_grad(), "ddp: parameter " + name + " does not require a gradient");
    TL_CHECK(&parameter.backend() == backend_, "ddp: parameter " + name + " is on backend '" +
                                                   parameter.backend().name() + "', the others on '" +
                                                   backend_->name() + "' (one backend per model)");
    TL_CHECK(parameter.is_contiguous(), "ddp: parameter " + name + " is not contiguous (row-major)");
    Slot slot;
    slot.name = name;
    slot.parameter = parameter;
    slot.numel = parameter.numel();
    slots_.push_back(slot);
    bytes.push_back(static_cast<std::int64_t>(parameter.nbytes()));
  }

  broadcast_parameters();
  verify_replicas();
  if (options_.allreduce == Algorithm::automatic) verify_thresholds();
  hosts_ = hosts_summary(gather_host_names(comm_));

  const auto first_cap = static_cast<std::int64_t>(options_.first_bucket_mb * kMiB);
  const auto cap = static_cast<std::int64_t>(options_.bucket_cap_mb * kMiB);
  auto members =
      shards_parameters() && !units_.empty() ? unit_buckets(parameters) : assign_buckets(bytes, first_cap, cap);
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype_));
  buckets_.resize(members.size());
  for (std::size_t b = 0; b < members.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.slots = std::move(members[b]);
    for (int s : bucket.slots) {
      Slot& slot = slots_[static_cast<std::size_t>(s)];
      slot.bucket = static_cast<int>(b);
      slot.offset = bucket.numel;
      bucket.numel += slot.numel;
    }
  }
  open_window();  // single-copy: the buckets it reduces placed in a window the host's ranks share
  for (Bucket& bucket : buckets_) {
    if (!shards_gradients()) {  // ZeRO-2 allocates each when backward reaches it (ensure_bucket)
      // With gradient_as_bucket_view the buckets are the gradients, and counted as such.
      MemoryCategoryScope category(options_.gradient_as_bucket_view ? MemoryCategory::gradients
                                                                    : MemoryCategory::communication);
      if (bucket.window_offset >= 0) {
        void* memory = static_cast<unsigned char*>(window_->buffer()) + bucket.window_offset;
        bucket.buffer = Tensor::borrowed(memory, {bucket.numel}, dtype_, *backend_);
        backend_->fill(dtype_, memory, bucket.numel, 0.0);
      } else {
        bucket.buffer = Tensor::zeros({bucket.numel}, dtype_, *backend_);
      }
      make_views(bucket);
    }
    if (options_.grad_compress != GradCompression::none) {
      bucket.packed = comm_.allocate(static_cast<std::size_t>(bucket.numel) * dtype_size(wire_dtype()));
    }
    if (!direct_) {
      const auto size = static_cast<std::size_t>(bucket.numel * elem);
      if (PinnedUploads* pinned = backend_->pinned_uploads()) {
        bucket.staging = {pinned->allocate_pinned(size), [pinned](void* p) { pinned->deallocate_pinned(p); }};
      } else {
        bucket.staging = comm_.allocate(size);
      }
    }
  }
  if (shards_parameters()) {
    shard_parameters();  // the optimiser's pieces are the shards'; the parameters released
  } else if (options_.zero >= 1) {
    const NamedTensors views = piece_views(parameters, pieces_of(comm_.rank()));
    const std::vector<ChunkPiece> chunk = chunk_pieces(comm_.rank());
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      owned_.push_back({chunk[i].bucket, chunk[i].slot, chunk[i].bucket_offset, views[i].second, Tensor()});
    }
  }
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    slots_[s].parameter.add_grad_ready_hook([this, s](const Tensor&) { on_gradient_ready(static_cast<int>(s)); });
  }
}

std::vector<std::vector<int>> Ddp::buckets() const {
  std::vector<std::vector<int>> members;
  for (const Bucket& bucket : buckets_) members.push_back(bucket.slots);
  return members;
}

CommBufferPlan Ddp::communication_buffer_plan() const {
  CommBufferPlan plan;
  const auto elem = static_cast<double>(dtype_size(dtype_));
  for (const Bucket& bucket : buckets_) plan.bucket_bytes.push_back(static_cast<double>(bucket.numel) * elem);
  plan.world = comm_.size();
  plan.zero = static_cast<int>(options_.zero);
  plan.buckets_are_gradients = options_.gradient_as_bucket_view;
  if (options_.grad_compress != GradCompression::none)
    plan.wire_fraction = static_cast<double>(dtype_size(wire_dtype())) / elem;
  plan.staged = !direct_;
  return plan;
}

std::uint64_t Ddp::parameter_checksum() const {
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a, 64 bits
  std::vector<unsigned char> host;
  for (const Slot& slot : slots_) {
    host.resize(slot.parameter.nbytes());
    slot.parameter.copy_to_host(host.data());
    for (unsigned char byte : host) {
      hash ^= byte;
      hash *= 1099511628211ULL;
    }
  }
  return hash;
}

std::vector<double> Ddp::gather(double value) {
  const int P = comm_.size();
  std::vector<double> values(static_cast<std::size_t>(P), 0.0);
  values[static_cast<std::size_t>(comm_.rank())] = value;
  const std::size_t bytes = values.size() * sizeof(double);
  auto memory = comm_.allocate(bytes);
  comm_.copy_in(memory.get(), values.data(), bytes);
  comm_.allreduce_native(memory.get(), P, DType::f64, ReduceOp::sum);
  comm_.copy_out(values.data(), memory.get(), bytes);
  return values;
}

std::vector<std::int64_t> Ddp::gather(std::int64_t value) {
  const int P = comm_.size();
  std::vector<std::int64_t> values(static_cast<std::size_t>(P), 0);
  values[static_cast<std::size_t>(comm_.rank())] = value;  // every other slot 0: the sum is exact
  const std::size_t bytes = values.size() * sizeof(std::int64_t);
  auto memory = comm_.allocate(bytes);
  comm_.copy_in(memory.get(), values.data(), bytes);
  comm_.allreduce_native(memory.get(), P, DType::i64, ReduceOp::sum);
  comm_.copy_out(values.data(), memory.get(), bytes);
  return values;
}

double Ddp::max_over_ranks(double value) {
  const auto values = gather(value);
  return *std::max_element(values.begin(), values.end());
}

double Ddp::sum_over_ranks(double value) {
  double total = 0;
  for (double v : gather(value)) total += v;
  return total;
}

void Ddp::verify_replicas() {
  // The checksum travels as two exact 32-bit halves (doubles hold them exactly).
  const std::uint64_t mine = parameter_checksum();
  const auto high = gather(static_cast<double>(mine >> 32)), low = gather(static_cast<double>(mine & 0xffffffffULL));
  std::string differing;
  for (std::size_t r = 1; r < high.size(); ++r) {
    if (high[r] != high[0] || low[r] != low[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  TL_CHECK(differing.empty(), "ddp: after the broadcast from rank 0, the parameters of rank(s) " + differing +
                                  " differ from rank 0's (checksum); the replicas would drift");
}

void Ddp::verify_thresholds() {
  // Ranks that chose different algorithms for one bucket would wait on each other forever.
  const auto below = gather(thresholds_.recursive_doubling_below), from = gather(thresholds_.ring_from),
             window = gather(thresholds_.single_copy_from);
  std::string differing;
  for (std::size_t r = 1; r < below.size(); ++r) {
    if (below[r] != below[0] || from[r] != from[0] || window[r] != window[0])
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  TL_CHECK(differing.empty(), "ddp: allreduce auto: rank(s) " + differing + " read other thresholds than rank 0 (" +
                                  describe_thresholds(thresholds_) + " here): every rank must see the same " +
                                  "allreduce_tuning file");
}

std::string Ddp::algorithms() const {
  if (options_.allreduce != Algorithm::automatic) return algorithm_name(options_.allreduce);
  return "auto (" + describe_thresholds(thresholds_) + ")";
}

void Ddp::begin_backward(bool sync) {
  TL_CHECK(!slots_.empty(), "ddp: begin_backward before attach");
  {
    std::lock_guard lock(mutex_);
    reset_for_backward(sync);
  }
  if (shards_gradients()) {
    // ZeRO-2: the first bucket backward fills; the others as it reaches them.
    next_release_ = 0;
    if (sync_) ensure_bucket(0);
  } else if (options_.gradient_as_bucket_view) {
    point_gradients_at_buckets();
  }
}

void Ddp::reset_for_backward(bool sync) {
  sync_ = sync && communicate_;
  local_step_ = sync && !communicate_;
  in_backward_ = true;
  backward_start_ns_ = Profiler::now_ns();
  backward_start_event_ = device_timing() && sync_ ? backend_->stream_events()->record_event() : nullptr;
  next_launch_ = 0;
  for (Slot& slot : slots_) slot.ready = false;
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.param_users = static_cast<int>(bucket.slots.size());
    bucket.done = false;
    bucket.ready.reset();
    bucket.started.reset();
    bucket.finished.reset();
    bucket.comm_start_ns = bucket.comm_end_ns = 0;
  }
}

void Ddp::point_gradients_at_buckets() {
  NoGradGuard no_grad;
  for (Slot& slot : slots_) {
    const Tensor grad = slot.parameter.grad();
    if (grad.defined() && grad.same_view(slot.view)) continue;
    if (grad.defined()) {
      slot.view.copy_(grad);  // an accumulated gradient that lives elsewhere (set by the user)
    } else {
      slot.view.zero_();  // zero_grad(set_to_none) dropped it
    }
    slot.parameter.set_grad(slot.view);
  }
}

void Ddp::on_gradient_ready(int s) {
  if (!in_backward_) return;
  Slot& slot = slots_[static_cast<std::size_t>(s)];
  if (shards_parameters()) {  // ZeRO-3: no node left reads them
    Bucket& bucket = buckets_[static_cast<std::size_t>(slot.bucket)];
    if (--bucket.param_users == 0) release_params(bucket);
  }
  if (!sync_) return;                                  // no_sync: gradients accumulate locally
  if (shards_gradients()) ensure_bucket(slot.bucket);  // ZeRO-2: backward got here before the prefetch
  Bucket& bucket = buckets_[static_cast<std::size_t>(slot.bucket)];
  const Tensor grad = slot.parameter.grad();
  TL_CHECK(grad.defined(), "ddp: parameter " + slot.name + " reported ready without a gradient");
  if (!grad.same_view(slot.view)) {
    // Into its range of the bucket, on the backend (a device copy on a GPU): queued, not waited for.
    NoGradGuard no_grad;
    slot.view.copy_(grad);
    if (shards_gradients()) slot.parameter.set_grad(Tensor());  // ZeRO-2: only the bucket holds it
  }
  bool launched = false;
  {
    std::lock_guard lock(mutex_);
    TL_CHECK(!slot.ready, "ddp: parameter " + slot.name + " became ready twice in one backward");
    slot.ready = true;
    if (--bucket.pending == 0) {
      // The communicator will wait for this point of the compute stream (on the device, for NCCL).
      if (StreamEvents* events = backend_->stream_events()) bucket.ready = events->record_event();
      launch_ready_buckets();
      launched = true;
    }
  }
  if (shards_gradients()) {
    // ZeRO-2: the next bucket made before backward writes its first gradient (so that the
    // gradients are its views), and every bucket whose reduce-scatter is done released.
    const auto next = static_cast<std::size_t>(slot.bucket) + 1;
    if (launched && options_.gradient_as_bucket_view && next < buckets_.size()) ensure_bucket(static_cast<int>(next));
    release_done_buckets();
  }
}

bool Ddp::device_timing() const {
  return backend_ != nullptr && backend_->stream_events() != nullptr && comm_.stream_ordered() && direct_;
}

DType Ddp::wire_dtype() const {
  switch (options_.grad_compress) {
    case GradCompression::bf16:
      return DType::bf16;
    case GradCompression::f16:
      return DType::f16;
    case GradCompression::none:
      break;
  }
  return dtype_;
}

void Ddp::reduce_bucket(Bucket& bucket) {
  if (bucket.window_offset >= 0) {  // in place, where every rank's copy lies (no copy in or out)
    window_->allreduce(bucket.numel, dtype_, ReduceOp::average, static_cast<std::size_t>(bucket.window_offset));
    return;
  }
  void* memory = comm_memory(bucket);
  const bool zero = options_.zero >= 1;
  if (options_.grad_compress == GradCompression::none) {
    if (zero) {
      reduce_scatter(comm_, memory, bucket.numel, dtype_, ReduceOp::average, options_.allreduce, thresholds_);
    } else {
      allreduce(comm_, memory, bucket.numel, dtype_, ReduceOp::average, options_.allreduce, thresholds_);
    }
    return;
  }
  // PyTorch's compress hooks: scale by 1/world in the cast (so a 16-bit sum cannot overflow where
  // the average would not), sum, cast back. With ZeRO-1 only this rank's chunk comes back.
  const DType wire = wire_dtype();
  comm_.convert(dtype_, memory, wire, bucket.packed.get(), bucket.numel, 1.0 / comm_.size());
  if (zero) {
    reduce_scatter(comm_, bucket.packed.get(), bucket.numel, wire, ReduceOp::sum, options_.allreduce, thresholds_);
    const ChunkRange mine = shard_chunk(bucket.numel, comm_.size(), comm_.rank());
    const auto wire_elem = static_cast<std::int64_t>(dtype_size(wire)),
               elem = static_cast<std::int64_t>(dtype_size(dtype_));
    comm_.convert(wire, static_cast<unsigned char*>(bucket.packed.get()) + mine.begin * wire_elem, dtype_,
                  static_cast<unsigned char*>(memory) + mine.begin * elem, mine.count, 1.0);
  } else {
    allreduce(comm_, bucket.packed.get(), bucket.numel, wire, ReduceOp::sum, options_.allreduce, thresholds_);
    comm_.convert(wire, bucket.packed.get(), dtype_, memory, bucket.numel, 1.0);
  }
  comm_.wait_stream("the cast back from " + std::string(dtype_name(wire)));
}

void* Ddp::comm_memory(Bucket& bucket) { return direct_ ? bucket.buffer.raw_data() : bucket.staging.get(); }

void Ddp::stage_out(Bucket& bucket) {
  if (direct_) return;
  backend_->copy_to_host(bucket.staging.get(), bucket.buffer.raw_data(), bucket.buffer.nbytes());
}

void Ddp::stage_in(Bucket& bucket) {
  if (direct_) return;
  backend_->copy_from_host(bucket.buffer.raw_data(), bucket.staging.get(), bucket.buffer.nbytes());
}

void Ddp::launch_ready_buckets() {
  bool launched = false;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    queue_.push_back({static_cast<int>(next_launch_), false});
    ++next_launch_;
    launched = true;
  }
  if (launched) cv_.notify_all();
}

void Ddp::comm_loop() {
  Profiler::instance().name_this_thread("comm (DDP all-reduce)");
  // The process's device, current on this thread too (CUDA's current device is per thread): the
  // events, kernels and copies below go to this rank's GPU. A failure is the first bucket's error.
  std::exception_ptr unbound;
  try {
    comm_.use_on_this_thread();
  } catch (...) {
    unbound = std::current_exception();
  }
  while (true) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = queue_.front();
      queue_.pop_front();
    }
    const int b = task.bucket;
    Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
    if (task.gather) {  // ZeRO-3: the bucket's parameters
      try {
        if (unbound) std::rethrow_exception(unbound);
        run_gather(bucket);
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        bucket.gathered = true;
      }
      cv_.notify_all();
      continue;
    }
    const std::int64_t start = Profiler::now_ns();
    try {
      if (unbound) std::rethrow_exception(unbound);
      if (bucket.ready) {
        if (direct_) {
          comm_.wait_for(*bucket.ready);
        } else {
          bucket.ready->synchronize();
        }
      }
      if (device_timing()) bucket.started = comm_.record_event();  // passes when the stream starts on it
      stage_out(bucket);
      if (options_.rendezvous && comm_.size() > 1) comm_.rendezvous();
      reduce_bucket(bucket);
      stage_in(bucket);
      if (device_timing()) bucket.finished = comm_.record_event();
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    const std::int64_t end = Profiler::now_ns();
    if (Profiler::instance().enabled()) {
      Profiler::instance().record(fmt::format("{} bucket {} ({})", options_.zero >= 1 ? "reduce-scatter" : "allreduce",
                                              b, mib(bucket.numel * static_cast<std::int64_t>(dtype_size(dtype_)))),
                                  start, end);
    }
    {
      std::lock_guard lock(mutex_);
      bucket.comm_start_ns = start;
      bucket.comm_end_ns = end;
      bucket.done = true;
    }
    cv_.notify_all();
  }
}

DdpStepStats Ddp::finish_backward() {
  DdpStepStats stats;
  const std::int64_t backward_end = Profiler::now_ns();
  // The step has waited for backward's kernels (its phase timer), so this event marks their end.
  const std::shared_ptr<DeviceEvent> backward_end_event =
      backward_start_event_ ? backend_->stream_events()->record_event() : nullptr;
  {
    std::lock_guard lock(mutex_);
    TL_CHECK(in_backward_, "ddp: finish_backward without begin_backward");
    in_backward_ = false;
    if (!sync_) {
      // Communication off (timing only): each rank still updates its pieces, from its own
      // gradient, so that the step does the same optimiser work without the collectives.
      if (local_step_ && options_.zero >= 1) {
        for (OwnedPiece& piece : owned_) attach_piece_gradient(piece, nullptr);
      }
      return stats;
    }
    if (next_launch_ < buckets_.size()) {
      std::string missing;
      for (const Slot& slot : slots_) {
        if (!slot.ready) missing += (missing.empty() ? "" : ", ") + slot.name;
      }
      throw Error("ddp: backward ended without gradients for " + missing +
                  " (every parameter must take part in every synchronised step; unused parameters are not supported)");
    }
  }
  // The parameters' all-gathers: ZeRO-3's so far (forward and backward), ZeRO-1 and 2's to come.
  if (shards_parameters()) {
    stats.gather_bytes = gathered_bytes_;
    stats.gathers = gathers_;
    stats.gather_wait_s = static_cast<double>(gather_wait_ns_) * 1e-9;
  } else if (options_.zero >= 1) {
    for (const Bucket& bucket : buckets_)
      stats.gather_bytes += bucket.numel * static_cast<std::int64_t>(dtype_size(dtype_));
    stats.gathers = static_cast<int>(buckets_.size());
  }
  gathered_bytes_ = gather_wait_ns_ = 0;
  gathers_ = 0;
  // Wait for the buckets in order, writing each back (when the gradients are not its views) as
  // soon as it is done.
  for (Bucket& bucket : buckets_) {
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return bucket.done; });
      if (error_) std::rethrow_exception(error_);
    }
    if (shards_gradients()) {
      release_done_buckets();  // this one and any before it: the chunk to the shard, the rest freed
      continue;
    }
    if (options_.zero == 1) {
      // Only this rank's chunk is averaged: it goes to the pieces its optimiser updates.
      for (OwnedPiece& piece : owned_) {
        if (&buckets_[static_cast<std::size_t>(piece.bucket)] == &bucket) attach_piece_gradient(piece, &bucket);
      }
      continue;
    }
    NoGradGuard no_grad;
    for (int s : bucket.slots) {
      Slot& slot = slots_[static_cast<std::size_t>(s)];
      Tensor grad = slot.parameter.grad();
      if (!grad.same_view(slot.view)) grad.copy_(slot.view);  // on the backend; any layout
    }
  }
  const std::int64_t finished = Profiler::now_ns();
  for (const Bucket& bucket : buckets_) {
    stats.bucket_bytes.push_back(bucket.numel * static_cast<std::int64_t>(dtype_size(wire_dtype())));
  }
  if (backward_start_event_ && backward_end_event) {
    // The device's clock: backward from its first to its last kernel on the compute stream, each
    // bucket from when the communicator's stream started on it to when it finished.
    stats.device_clock = true;
    DeviceEvent& origin = *backward_start_event_;
    const double backward = backward_end_event->seconds_since(origin);
    double last = 0;
    for (const Bucket& bucket : buckets_) {
      if (!bucket.started || !bucket.finished) continue;
      const double begin = bucket.started->seconds_since(origin), end = bucket.finished->seconds_since(origin);
      stats.comm_s += end - begin;
      stats.overlap_s += std::max(0.0, std::min(end, backward) - std::max(begin, 0.0));
      last = std::max(last, end);
    }
    stats.backward_compute_s = backward;
    stats.exposed_s = std::max(0.0, last - backward);
    return stats;
  }
  stats.backward_compute_s = static_cast<double>(backward_end - backward_start_ns_) * 1e-9;
  stats.exposed_s = static_cast<double>(finished - backward_end) * 1e-9;
  for (const Bucket& bucket : buckets_) {
    stats.comm_s += static_cast<double>(bucket.comm_end_ns - bucket.comm_start_ns) * 1e-9;
    const std::int64_t overlap =
        std::min(bucket.comm_end_ns, backward_end) - std::max(bucket.comm_start_ns, backward_start_ns_);
    stats.overlap_s += static_cast<double>(std::max<std::int64_t>(0, overlap)) * 1e-9;
  }
  return stats;
}

NamedTensors Ddp::parameters() const {
  NamedTensors named;
  for (const Slot& slot : slots_) named.emplace_back(slot.name, slot.parameter);
  return named;
}

std::string Ddp::gradient_reduction() const {
  const std::string dtype = dtype_name(dtype_);
  const std::string shape =
      options_.zero == 0   ? "all-reduce"
      : options_.zero == 1 ? "reduce-scatter, then the updated parameters all-gathered"
      : options_.zero == 2
          ? "reduce-scatter into this rank's gradient shard (ZeRO-2), then the updated parameters all-gathered"
          : "reduce-scatter into this rank's gradient shard (ZeRO-3), the parameters all-gathered before each part's "
            "forward and backward";
  if (options_.grad_compress != GradCompression::none) {
    const std::string wire = dtype_name(wire_dtype());
    const std::string summed = options_.allreduce != Algorithm::native
                                   ? "summed by the hand-written " + algorithms() +
                                         " in f32 at each step, rounded to " + wire + " after each, in one fixed order"
                                   : "summed in " + wire + " by " + comm_.backend() + "'s own collective";
    return fmt::format(
        "{} gradients compressed to {} (the 1/world scale in the cast), {}, cast back to {}; over {} "
        "rank{} ({})",
        dtype, wire, summed, dtype, comm_.size(), comm_.size() == 1 ? "" : "s", shape);
  }
  // The ring adds in the buffer's dtype (bf16/f16 through f32); MPI_SUM and NCCL on f32/f64 likewise.
  const std::string summed =
      options_.allreduce != Algorithm::native
          ? "summed in " + dtype + " by the hand-written " + algorithms() + ", in one fixed order"
          : "summed in " + dtype + " by " + comm_.backend() + "'s own collective";
  return fmt::format("{} gradients, {}, averaged over {} rank{} ({}; the 1/world scale once, at the end)", dtype,
                     summed, comm_.size(), comm_.size() == 1 ? "" : "s", shape);
}

std::string Ddp::describe() const {
  std::string sizes;
  for (const Bucket& bucket : buckets_) {
    sizes += (sizes.empty() ? "" : ", ") + mib(bucket.numel * static_cast<std::int64_t>(dtype_size(dtype_)));
  }
  std::string zero;
  if (options_.zero >= 1) {
    std::int64_t owned = 0, total = 0;
    for (const OwnedPiece& piece : owned_) owned += piece.view.numel();
    for (const Slot& slot : slots_) total += slot.numel;
    zero = fmt::format("; ZeRO-{}: this rank's optimiser updates {} of {} elements in {} pieces{}", options_.zero,
                       owned, total, owned_.size(),
                       shards_gradients()
                           ? ", and holds their averaged gradient only from the reduce-scatters to the step "
                             "(each bucket from backward to its reduce-scatter)"
                           : "");
    if (shards_parameters())
      zero += fmt::format("; the parameters too (each bucket whole only around its {} use{})",
                          units_.empty() ? "model's" : "part's", units_.empty() ? "" : "s");
  }
  const std::string memory = fmt::format(
      "{} in {} memory{}{}",
      options_.gradient_as_bucket_view ? "gradients are views of the buckets" : "gradients copied",
      backend_ != nullptr ? backend_->name() : "?",
      direct_
          ? ""
          : ", staged through " + std::string(backend_ && backend_->pinned_uploads() ? "pinned " : "") + "host memory",
      options_.grad_compress == GradCompression::none ? ""
                                                      : std::string(", compressed to ") + dtype_name(wire_dtype()));
  return fmt::format("DDP over {}, {} rank{}, {} {}, {} bucket{} ({}; cap {} MiB, first {} MiB; {}){}; {}",
                     comm_.backend(), comm_.size(), comm_.size() == 1 ? "" : "s", algorithms(),
                     options_.zero >= 1 ? "reduce-scatter + all-gather" : "all-reduce", buckets_.size(),
                     buckets_.size() == 1 ? "" : "s", sizes, options_.bucket_cap_mb, options_.first_bucket_mb, memory,
                     zero, window_note_.empty() ? hosts_ : window_note_ + "; " + hosts_);
}

}  // namespace trainlab::comm
