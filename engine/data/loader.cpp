#include "engine/data/loader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

#include "engine/core/rng.h"
#include "engine/instrument/memory_usage.h"
#include "engine/instrument/profiler.h"

namespace trainlab {

// ---------------------------------------------------------------------------------------------
// DataLoader

// Page-locked blocks by size, reused: a steady loader allocates no pinned memory. Workers take
// blocks, the consuming thread gives them back; a block with a copy still reading it is held
// by the loader (in_flight_) until the copy has finished.
class PinnedPool {
 public:
  explicit PinnedPool(PinnedUploads& uploads) : uploads_(uploads) {}
  ~PinnedPool() {
    for (void* p : all_) uploads_.deallocate_pinned(p);
  }
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  void* acquire(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    auto& list = free_[bytes];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return p;
    }
    void* p = uploads_.allocate_pinned(bytes);
    all_.push_back(p);
    return p;
  }
  void release(void* p, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    free_[bytes].push_back(p);
  }

 private:
  PinnedUploads& uploads_;
  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::vector<void*> all_;
};

DataLoader::PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : pool(std::exchange(other.pool, nullptr)), data(std::exchange(other.data, nullptr)), bytes(other.bytes) {}
DataLoader::PinnedBlock& DataLoader::PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    if (pool != nullptr && data != nullptr) pool->release(data, bytes);
    pool = std::exchange(other.pool, nullptr);
    data = std::exchange(other.data, nullptr);
    bytes = other.bytes;
  }
  return *this;
}
DataLoader::PinnedBlock::~PinnedBlock() {
  if (pool != nullptr && data != nullptr) pool->release(data, bytes);
}

void* DataLoader::HostBatch::input_data() {
  if (pinned.data != nullptr) return pinned.data;
  return values.empty() ? static_cast<void*>(tokens.data()) : static_cast<void*>(values.data());
}
std::int64_t* DataLoader::HostBatch::label_data() {
  // Pinned: the labels follow the inputs in the same block (at an 8-byte boundary, see produce()).
  return pinned.data != nullptr
             ? reinterpret_cast<std::int64_t*>(static_cast<unsigned char*>(pinned.data) + label_offset)
             : labels.data();
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options, Backend& backend)
    : dataset_(std::move(dataset)), options_(options), backend_(backend) {
  TL_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  sample_shape_ = dataset_->sample_shape();
  sample_elements_ = dataset_->sample_elements();
  TL_CHECK(sample_elements_ >= 1,
           "DataLoader: " + dataset_->describe() + " has an empty sample shape " + shape_str(sample_shape_));
  tokens_ = dataset_->sample_kind() == SampleKind::tokens;
  input_dtype_ = tokens_ ? DType::i64 : DType::f32;
  labels_per_sample_ = dataset_->labels_per_sample();
  TL_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be >= 1, got " + std::to_string(options.batch_size));
  TL_CHECK(options.num_workers >= 0,
           "DataLoader: num_workers must be >= 0, got " + std::to_string(options.num_workers));
  TL_CHECK(options.prefetch >= 1, "DataLoader: prefetch must be >= 1, got " + std::to_string(options.prefetch));
  TL_CHECK(options.shard_count >= 1 && options.shard_rank >= 0 && options.shard_rank < options.shard_count,
           "DataLoader: shard " + std::to_string(options.shard_rank) + " of " + std::to_string(options.shard_count) +
               " does not exist");
  TL_CHECK(options.batch_size % options.shard_count == 0,
           "DataLoader: the global batch " + std::to_string(options.batch_size) + " does not split evenly over " +
               std::to_string(options.shard_count) + " ranks (choose a batch divisible by the world size)");
  TL_CHECK(options.shard_count == 1 || options.drop_last,
           "DataLoader: sharding needs drop_last (every rank must take a full part of every batch)");
  const std::int64_t n = dataset_->size(), b = options.batch_size;
  batches_per_epoch_ = options.drop_last ? n / b : (n + b - 1) / b;
  TL_CHECK(batches_per_epoch_ >= 1, "DataLoader: the dataset's " + std::to_string(n) +
                                        " samples make no full batch of " + std::to_string(b) + " (drop_last is on)");
  if (options.pin_memory) {
    uploads_ = backend.pinned_uploads();
    TL_CHECK(uploads_ != nullptr,
             "DataLoader: pin_memory needs a backend with page-locked host memory (cuda); backend '" + backend.name() +
                 "' has none");
    pinned_pool_ = std::make_shared<PinnedPool>(*uploads_);
  }
}

DataLoader::~DataLoader() {
  stop_workers();
  try {
    drop_staged();
    if (!in_flight_.empty()) {
      // Every copy was waited on by the compute stream (finish_upload, drop_staged): once it is
      // idle, the pinned blocks are free.
      backend_.synchronize();
      retire_uploads();
    }
  } catch (...) {
    // Nothing to report from a destructor: the pool frees the blocks (cudaFreeHost waits for them).
  }
}

Shape DataLoader::batch_shape(std::int64_t count) const {
  Shape shape{count};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  return shape;
}

Shape DataLoader::label_shape(std::int64_t count) const {
  return tokens_ ? Shape{count, sample_elements_} : Shape{count};
}

std::shared_ptr<const std::vector<std::int64_t>> DataLoader::permutation(std::int64_t epoch) const {
  std::lock_guard lock(perm_mutex_);
  auto it = permutations_.find(epoch);
  if (it != permutations_.end()) return it->second;
  auto perm = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(dataset_->size()));
  for (std::size_t i = 0; i < perm->size(); ++i) (*perm)[i] = static_cast<std::int64_t>(i);
  if (options_.shuffle) {
    Generator gen(mix_seed(options_.seed, static_cast<std::uint64_t>(epoch)));
    for (std::size_t i = perm->size(); i > 1; --i) std::swap((*perm)[i - 1], (*perm)[gen.below(i)]);
  }
  // A small cache: callers hold their own reference, so evicting an epoch never pulls it from under them.
  while (permutations_.size() >= 4) permutations_.erase(permutations_.begin());
  permutations_.emplace(epoch, perm);
  return perm;
}

std::vector<std::int64_t> DataLoader::batch_indices(std::int64_t epoch, std::int64_t index) const {
  TL_CHECK(index >= 0 && index < batches_per_epoch_, "DataLoader: batch index " + std::to_string(index) +
                                                         " is outside [0, " + std::to_string(batches_per_epoch_) + ")");
  const auto perm = permutation(epoch);
  const std::int64_t part = options_.batch_size / options_.shard_count;
  const std::int64_t begin = index * options_.batch_size + options_.shard_rank * part;
  const std::int64_t end = std::min<std::int64_t>(begin + part, dataset_->size());
  return {perm->begin() + begin, perm->begin() + end};
}

// The samples of `indices` into `batch`'s inputs and labels, each label checked against the classes
// (a token's against the vocabulary).
void DataLoader::produce_samples(const std::vector<std::int64_t>& indices, std::int64_t epoch, HostBatch& batch) const {
  const std::int64_t classes = dataset_->num_classes();
  std::int64_t* labels = batch.label_data();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const auto row = static_cast<std::int64_t>(i);
    std::int64_t* sample_labels = labels + row * labels_per_sample_;
    if (tokens_) {
      std::int64_t* tokens = static_cast<std::int64_t*>(batch.input_data()) + row * sample_elements_;
      dataset_->get_tokens(indices[i], epoch, tokens, sample_labels);
      for (std::int64_t t = 0; t < sample_elements_; ++t) {
        TL_CHECK(tokens[t] >= 0 && tokens[t] < classes,
                 dataset_->describe() + ": sample " + std::to_string(indices[i]) + " has token " +
                     std::to_string(tokens[t]) + " at " + std::to_string(t) + ", outside the vocabulary [0, " +
                     std::to_string(classes) + ")");
      }
    } else {
      double checksum = 0;
      float* values = static_cast<float*>(batch.input_data()) + row * sample_elements_;
      sample_labels[0] = dataset_->get_in_epoch(indices[i], epoch, values, &checksum);
      batch.checksum += checksum;
    }
    for (std::int64_t j = 0; j < labels_per_sample_; ++j) {
      TL_CHECK(sample_labels[j] >= 0 && sample_labels[j] < classes,
               dataset_->describe() + ": sample " + std::to_string(indices[i]) + " has label " +
                   std::to_string(sample_labels[j]) + (tokens_ ? " at " + std::to_string(j) : std::string()) +
                   ", outside [0, " + std::to_string(classes) + ")");
    }
  }
}

DataLoader::HostBatch DataLoader::produce(std::int64_t global) const {
  TL_PROFILE_SCOPE("loader.produce_batch");
  HostBatch batch;
  try {
    const std::int64_t epoch = global / batches_per_epoch_;
    const auto indices = batch_indices(epoch, global % batches_per_epoch_);
    batch.count = static_cast<std::int64_t>(indices.size());
    const std::size_t input_elements = indices.size() * static_cast<std::size_t>(sample_elements_);
    const std::size_t label_elements = indices.size() * static_cast<std::size_t>(labels_per_sample_);
    if (pinned_pool_) {
      // Written straight into page-locked memory: the inputs, then the labels at an 8-byte boundary.
      batch.label_offset = (input_elements * dtype_size(input_dtype_) + 7) / 8 * 8;
      const std::size_t bytes = batch.label_offset + label_elements * sizeof(std::int64_t);
      batch.pinned.data = pinned_pool_->acquire(bytes);
      batch.pinned.pool = pinned_pool_.get();
      batch.pinned.bytes = bytes;
    } else {
      if (tokens_) {
        batch.tokens.resize(input_elements);
      } else {
        batch.values.resize(input_elements);
      }
      batch.labels.resize(label_elements);
    }
    produce_samples(indices, epoch, batch);
  } catch (const std::exception& e) {
    batch.error = e.what();
  }
  return batch;
}

void DataLoader::start_workers(std::int64_t first_global) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
    ready_.clear();
    next_to_claim_ = first_global;
    next_to_consume_ = first_global;
    claim_limit_ = options_.persistent_workers ? std::numeric_limits<std::int64_t>::max()
                                               : (first_global / batches_per_epoch_ + 1) * batches_per_epoch_;
  }
  for (int w = 0; w < options_.num_workers; ++w) {
    workers_.emplace_back([this, w] {
      Profiler::instance().name_this_thread("loader worker " + std::to_string(w));
      std::string init_error;
      if (options_.worker_init) {
        try {
          options_.worker_init(w);
        } catch (const std::exception& e) {
          init_error = "loader worker " + std::to_string(w) + ": worker_init: " + e.what();
        }
      }
      worker_loop(init_error);
    });
  }
}

void DataLoader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  std::lock_guard lock(mutex_);
  ready_.clear();
}

void DataLoader::worker_loop(const std::string& init_error) {
  const std::int64_t in_flight = static_cast<std::int64_t>(options_.num_workers) * options_.prefetch;
  std::unique_lock lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] {
      return stopping_ || next_to_claim_ >= claim_limit_ || next_to_claim_ < next_to_consume_ + in_flight;
    });
    if (stopping_ || next_to_claim_ >= claim_limit_) return;
    const std::int64_t global = next_to_claim_++;
    lock.unlock();
    HostBatch batch;
    if (init_error.empty()) {
      batch = produce(global);
    } else {
      batch.error = init_error;  // raised where the batch is taken
    }
    lock.lock();
    ready_.emplace(global, std::move(batch));
    ready_cv_.notify_all();
  }
}

DataLoader::HostBatch DataLoader::take(std::int64_t global) {
  HostBatch host;
  if (options_.num_workers == 0) {
    host = produce(global);
  } else {
    // Non-persistent workers end with their epoch and are started afresh for the next one.
    if (workers_.empty()) {
      start_workers(global);
    } else if (global >= claim_limit_) {
      stop_workers();
      start_workers(global);
    }
    std::unique_lock lock(mutex_);
    ready_cv_.wait(lock, [&] { return ready_.count(global) > 0; });
    auto it = ready_.find(global);
    host = std::move(it->second);
    ready_.erase(it);
    ++next_to_consume_;
    lock.unlock();
    work_cv_.notify_all();
  }
  if (!host.error.empty()) {
    // The position stays at the failed batch; restarting the workers lets a retry produce it again.
    stop_workers();
    throw Error("data loader: batch " + std::to_string(global % batches_per_epoch_) + " of epoch " +
                std::to_string(global / batches_per_epoch_) + ": " + host.error);
  }
  return host;
}

DataLoader::Upload DataLoader::start_upload(HostBatch& host, std::int64_t global) {
  TL_PROFILE_SCOPE("loader.upload");
  Upload upload;
  upload.global = global;
  MemoryCategoryScope category(MemoryCategory::data);
  upload.batch.inputs = Tensor::empty(batch_shape(host.count), input_dtype_, backend_);
  upload.batch.labels = Tensor::empty(label_shape(host.count), DType::i64, backend_);
  upload.batch.decode_checksum = host.checksum;
  upload.tickets[0] =
      uploads_->upload_async(upload.batch.inputs.raw_data(), host.input_data(), upload.batch.inputs.nbytes());
  upload.tickets[1] =
      uploads_->upload_async(upload.batch.labels.raw_data(), host.label_data(), upload.batch.labels.nbytes());
  in_flight_.push_back(InFlight{std::move(host.pinned), {upload.tickets[0], upload.tickets[1]}});
  return upload;
}

void DataLoader::finish_upload(const Upload& upload) {
  uploads_->wait_upload(upload.tickets[0]);
  uploads_->wait_upload(upload.tickets[1]);
}

void DataLoader::retire_uploads() {
  std::erase_if(in_flight_, [&](InFlight& f) {
    // Both polled every time: a finished ticket is retired by the poll.
    const bool inputs = uploads_->upload_done(f.tickets[0]);
    const bool labels = uploads_->upload_done(f.tickets[1]);
    return inputs && labels;  // the block goes back to the pool with the InFlight
  });
}

// A staged batch that will not be used: the compute stream waits for its copy, so the device
// memory it was copied into is reused only after the copy.
void DataLoader::drop_staged() {
  if (!staged_) return;
  finish_upload(*staged_);
  staged_.reset();
}

Batch DataLoader::next() {
  const std::int64_t global = position_.epoch * batches_per_epoch_ + position_.next_batch;
  Batch batch;
  if (pinned_pool_) {
    retire_uploads();
    if (staged_ && staged_->global == global) {
      finish_upload(*staged_);
      batch = std::move(staged_->batch);
      staged_.reset();
    } else {
      drop_staged();
      HostBatch host = take(global);
      Upload upload = start_upload(host, global);
      finish_upload(upload);
      batch = std::move(upload.batch);
    }
  } else {
    HostBatch host = take(global);
    MemoryCategoryScope category(MemoryCategory::data);
    batch.inputs = Tensor::from_host(host.input_data(), batch_shape(host.count), input_dtype_, backend_);
    batch.labels = Tensor::from_host(host.labels.data(), label_shape(host.count), DType::i64, backend_);
    batch.decode_checksum = host.checksum;
  }
  batch.epoch = position_.epoch;
  batch.index = position_.next_batch;
  if (++position_.next_batch == batches_per_epoch_) {
    position_.next_batch = 0;
    ++position_.epoch;
  }
  // pin_memory with workers: when the next batch is ready, its copy starts now and runs on the
  // copy stream while the caller trains on this one.
  if (pinned_pool_ && options_.num_workers > 0) {
    const std::int64_t ahead = global + 1;
    std::optional<HostBatch> host;
    {
      std::lock_guard lock(mutex_);
      auto it = ready_.find(ahead);
      if (ahead < claim_limit_ && it != ready_.end() && it->second.error.empty()) {
        host = std::move(it->second);
        ready_.erase(it);
        ++next_to_consume_;
      }
    }
    if (host) {
      work_cv_.notify_all();
      staged_ = start_upload(*host, ahead);
    }
  }
  return batch;
}

void DataLoader::set_position(const LoaderPosition& position) {
  TL_CHECK(position.epoch >= 0 && position.epoch < std::numeric_limits<std::int64_t>::max() / batches_per_epoch_ &&
               position.next_batch >= 0 && position.next_batch < batches_per_epoch_,
           "DataLoader: position (epoch " + std::to_string(position.epoch) + ", batch " +
               std::to_string(position.next_batch) + ") is invalid; an epoch has " +
               std::to_string(batches_per_epoch_) + " batches");
  stop_workers();
  drop_staged();
  position_ = position;
}

void DataLoader::set_worker_init(std::function<void(int worker)> init) {
  // Workers already running keep the old one: stop them (the next batch starts new ones, at the
  // same position).
  stop_workers();
  drop_staged();
  options_.worker_init = std::move(init);
}

StateDict DataLoader::state_dict() const {
  StateDict state;
  state.integers["epoch"] = position_.epoch;
  state.integers["next_batch"] = position_.next_batch;
  state.integers["batch_size"] = options_.batch_size;
  state.integers["dataset_size"] = dataset_->size();
  state.integers["shuffle"] = options_.shuffle ? 1 : 0;
  state.integers["drop_last"] = options_.drop_last ? 1 : 0;
  state.strings["seed"] = std::to_string(options_.seed);
  return state;
}

std::string loader_state_problem(const StateDict& state) {
  for (const char* key : {"epoch", "next_batch", "batch_size", "dataset_size"}) {
    if (!state.integers.count(key)) return std::string("it has no ") + key;
  }
  const std::int64_t epoch = state.integers.at("epoch"), next = state.integers.at("next_batch");
  const std::int64_t batch = state.integers.at("batch_size"), size = state.integers.at("dataset_size");
  if (batch < 1) return "batch_size " + std::to_string(batch) + " is not a batch size (>= 1)";
  if (size < 1) return "dataset_size " + std::to_string(size) + " is not a data set size (>= 1)";
  if (epoch < 0) return "epoch " + std::to_string(epoch) + " is negative";
  const bool drop_last = !state.integers.count("drop_last") || state.integers.at("drop_last") != 0;
  const std::int64_t per_epoch = drop_last ? size / batch : (size - 1) / batch + 1;
  if (per_epoch < 1) {
    return "dataset_size " + std::to_string(size) + " makes no full batch of " + std::to_string(batch) +
           " (drop_last is on)";
  }
  if (next < 0 || next >= per_epoch) {
    return "next_batch " + std::to_string(next) + " is outside the epoch's " + std::to_string(per_epoch) +
           " batches (dataset_size " + std::to_string(size) + ", batch_size " + std::to_string(batch) + ")";
  }
  if (epoch > std::numeric_limits<std::int64_t>::max() / per_epoch / batch - 1)
    return "epoch " + std::to_string(epoch) + " is beyond any count of samples";
  return "";
}

std::int64_t loader_state_batches(const StateDict& state) {
  const std::string problem = loader_state_problem(state);
  TL_CHECK(problem.empty(), "data loader state: " + problem);
  const std::int64_t batch = state.integers.at("batch_size"), size = state.integers.at("dataset_size");
  const bool drop_last = !state.integers.count("drop_last") || state.integers.at("drop_last") != 0;
  const std::int64_t per_epoch = drop_last ? size / batch : (size - 1) / batch + 1;
  return state.integers.at("epoch") * per_epoch + state.integers.at("next_batch");
}

void DataLoader::load_state_dict(const StateDict& state) {
  const std::string owner = "data loader state";
  const std::string problem = loader_state_problem(state);
  TL_CHECK(problem.empty(), owner + ": " + problem);
  auto require_same = [&](const char* key, std::int64_t expected) {
    const std::int64_t saved = state.integer(key, owner);
    TL_CHECK(saved == expected, owner + ": " + key + " was " + std::to_string(saved) + " when saved, this loader has " +
                                    std::to_string(expected));
  };
  require_same("batch_size", options_.batch_size);
  require_same("dataset_size", dataset_->size());
  require_same("shuffle", options_.shuffle ? 1 : 0);
  require_same("drop_last", options_.drop_last ? 1 : 0);
  const std::string& seed = state.string("seed", owner);
  TL_CHECK(seed == std::to_string(options_.seed),
           owner + ": seed was " + seed + " when saved, this loader has " + std::to_string(options_.seed));
  set_position({state.integer("epoch", owner), state.integer("next_batch", owner)});
}

}  // namespace trainlab
