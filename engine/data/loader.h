// The DataLoader: batches of any Dataset (engine/data/dataset.h) with seeded shuffling, the distributed
// sampler, worker threads, prefetch, page-locked staging and a resumable position.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"
#include "engine/data/dataset.h"

namespace trainlab {

struct DataLoaderOptions {
  std::int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = true;
  int num_workers = 0;              // 0: batches are produced on the calling thread
  int prefetch = 2;                 // batches in flight per worker
  bool persistent_workers = false;  // keep worker threads across epochs instead of restarting them
  // Page-locked host batches (a backend with pinned memory: cuda): workers write each batch
  // straight into pinned memory, and its host-to-device copy runs on the backend's copy stream.
  // With workers, the next batch's copy starts as soon as the current batch is handed out, so it
  // overlaps the training step.
  bool pin_memory = false;
  std::uint64_t seed = 0;  // the shuffle order of epoch e is a function of (seed, e)
  // The distributed sampler: batch_size is the global batch, and shard r of n takes the r-th of
  // its n equal parts. Every rank draws the same per-epoch permutation, so the shards are disjoint
  // and together are exactly the batch one process would take: the position (epoch, batch) means
  // the same at any world size, and a checkpoint resumes at another.
  int shard_rank = 0;
  int shard_count = 1;
  // Called on each worker thread as it starts, before it produces a batch, with the worker's
  // number (PyTorch's worker_init_fn): a driver confines or names its workers here. A throw ends
  // the worker's batches with that error, raised on the consuming thread.
  std::function<void(int worker)> worker_init;
};

struct Batch {
  Tensor inputs;  // [B, sample shape...]: f32 values (images), or i64 token ids [B, T]
  Tensor labels;  // i64: [B] classes, or [B, T] the next token at every position
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch index within the epoch
  double decode_checksum = 0;
};

struct LoaderPosition {
  std::int64_t epoch = 0;
  std::int64_t next_batch = 0;  // within the epoch
};

class PinnedPool;

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options, Backend& backend);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The next batch, in order; after the last batch of an epoch, the first of the next epoch.
  Batch next();
  LoaderPosition position() const { return position_; }
  void set_position(const LoaderPosition& position);
  // Replaces options().worker_init; only before the first batch has been asked for (the workers
  // start then).
  void set_worker_init(std::function<void(int worker)> init);
  StateDict state_dict() const;
  // Refuses (Error) a state whose own numbers do not hold (loader_state_problem) or that another
  // loader saved (batch size, data set size, shuffle, drop_last, seed).
  void load_state_dict(const StateDict& state);
  const DataLoaderOptions& options() const { return options_; }
  // Sample indices of batch `index` of `epoch` (this shard's part of it).
  std::vector<std::int64_t> batch_indices(std::int64_t epoch, std::int64_t index) const;

 private:
  // A page-locked block from the pool, returned to it when the handle goes (once no copy reads it).
  struct PinnedBlock {
    PinnedPool* pool = nullptr;
    void* data = nullptr;
    std::size_t bytes = 0;
    PinnedBlock() = default;
    PinnedBlock(PinnedBlock&& other) noexcept;
    PinnedBlock& operator=(PinnedBlock&& other) noexcept;
    ~PinnedBlock();
  };
  struct HostBatch {
    std::int64_t count = 0;
    std::vector<float> values;         // pageable, without pin_memory: f32 samples
    std::vector<std::int64_t> tokens;  // pageable, without pin_memory: token samples
    std::vector<std::int64_t> labels;
    PinnedBlock pinned;            // pin_memory: the inputs, then the labels
    std::size_t label_offset = 0;  // bytes into `pinned` where the labels start
    double checksum = 0;
    std::string error;  // a worker's failure, rethrown on the consuming thread
    void* input_data();
    std::int64_t* label_data();
  };
  // A batch whose copy to the device has been started (pin_memory).
  struct Upload {
    std::int64_t global = -1;
    Batch batch;
    std::uint64_t tickets[2] = {0, 0};
  };
  Shape batch_shape(std::int64_t count) const;  // [count, sample shape...]
  Shape label_shape(std::int64_t count) const;  // [count], or [count, T] for tokens
  void produce_samples(const std::vector<std::int64_t>& indices, std::int64_t epoch, HostBatch& batch) const;
  // A global batch number g = epoch * batches_per_epoch + index orders all work.
  HostBatch produce(std::int64_t global) const;
  HostBatch take(std::int64_t global);  // produced here, or waited for from the workers
  Upload start_upload(HostBatch& host, std::int64_t global);
  void finish_upload(const Upload& upload);  // the compute stream waits for its copy
  void retire_uploads();                     // pinned blocks whose copy has finished go back to the pool
  void drop_staged();
  std::shared_ptr<const std::vector<std::int64_t>> permutation(std::int64_t epoch) const;
  void start_workers(std::int64_t first_global);
  void stop_workers();
  void worker_loop(const std::string& init_error);  // init_error: every batch it takes carries it

  std::shared_ptr<const Dataset> dataset_;
  Shape sample_shape_;  // the dataset's, read once
  std::int64_t sample_elements_ = 0;
  bool tokens_ = false;             // SampleKind::tokens: i64 inputs, a label per token
  DType input_dtype_ = DType::f32;  // f32 values, i64 tokens
  std::int64_t labels_per_sample_ = 1;
  DataLoaderOptions options_;
  Backend& backend_;
  PinnedUploads* uploads_ = nullptr;         // pin_memory: the backend's pinned uploads
  std::shared_ptr<PinnedPool> pinned_pool_;  // pin_memory; outlives every PinnedBlock of this loader
  std::optional<Upload> staged_;             // the next batch, its copy already started
  struct InFlight {
    PinnedBlock block;
    std::uint64_t tickets[2];
  };
  std::vector<InFlight> in_flight_;  // pinned blocks with a copy that may still be reading them
  std::int64_t batches_per_epoch_;
  LoaderPosition position_;

  mutable std::mutex perm_mutex_;
  mutable std::map<std::int64_t, std::shared_ptr<const std::vector<std::int64_t>>> permutations_;  // small cache

  std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
  std::int64_t next_to_claim_ = 0;    // next global batch a worker may start
  std::int64_t next_to_consume_ = 0;  // next global batch next() returns
  std::int64_t claim_limit_ = 0;      // workers stop at the end of this (exclusive) unless persistent
  std::map<std::int64_t, HostBatch> ready_;
};

// What is wrong with a saved loader position on its own terms, "" when nothing: epoch >= 0,
// batch_size >= 1, dataset_size >= 1 and next_batch inside the epoch the other three imply (the
// DataLoader's own rule, drop_last from the state). One rule for resume, inspect and diagnose, so
// none of them reads a forged state as fact (or divides by its batch size 0).
std::string loader_state_problem(const StateDict& state);
// The batches a saved position has consumed since step 0 (epoch x batches per epoch + next_batch);
// throws Error with loader_state_problem's words when the state has one.
std::int64_t loader_state_batches(const StateDict& state);

}  // namespace trainlab
