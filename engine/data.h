// Data: SyntheticImages (a deterministic, learnable image task with a real per-sample CPU cost)
// and a DataLoader with seeded shuffling, worker threads, prefetch and a resumable position.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/state_dict.h"
#include "engine/tensor.h"

namespace trainlab {

enum class Split { train, held_out };
const char* split_name(Split split);

// 10 classes of 3x32x32 images. Each class has a prototype made of oriented gratings and a
// bright blob, both drawn from the dataset seed; a sample is its class prototype, shifted by up
// to 3 pixels, scaled in contrast, plus Gaussian pixel noise. Sample i of a split is a pure
// function of (seed, split, i): any worker, in any order, produces the same bytes.
//
// decode_cost stands in for JPEG decode and augmentation: each unit is four passes of a 3x3
// stencil over the image (real arithmetic, about 18 flops per pixel per pass), each pass reading
// the previous one's output, folded into a checksum the batch carries so the work cannot be
// optimised away. It never changes the pixels, so the learning problem is the same at every cost.
class SyntheticImages {
 public:
  static constexpr std::int64_t kChannels = 3, kHeight = 32, kWidth = 32, kClasses = 10;
  static constexpr std::int64_t kSampleElements = kChannels * kHeight * kWidth;

  SyntheticImages(std::uint64_t seed, Split split, std::int64_t size, std::int64_t decode_cost = 0);
  std::int64_t size() const { return size_; }
  Split split() const { return split_; }
  std::uint64_t seed() const { return seed_; }
  std::int64_t decode_cost() const { return decode_cost_; }

  // Writes sample `index` ([3, 32, 32] row-major) to `image`; returns its label. `checksum`
  // receives the decode work's result.
  std::int64_t get(std::int64_t index, float* image, double* checksum = nullptr) const;

 private:
  std::uint64_t seed_;
  Split split_;
  std::int64_t size_, decode_cost_;
  std::vector<float> prototypes_;  // [classes, 3, 32, 32]
};

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
};

struct Batch {
  Tensor images;  // [B, 3, 32, 32] f32
  Tensor labels;  // [B] i64
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
  DataLoader(std::shared_ptr<const SyntheticImages> dataset, const DataLoaderOptions& options, Backend& backend);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The next batch, in order; after the last batch of an epoch, the first of the next epoch.
  Batch next();
  LoaderPosition position() const { return position_; }
  void set_position(const LoaderPosition& position);
  StateDict state_dict() const;
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
    std::vector<float> images;  // pageable, without pin_memory
    std::vector<std::int64_t> labels;
    PinnedBlock pinned;  // pin_memory: the images, then the labels
    double checksum = 0;
    std::string error;  // a worker's failure, rethrown on the consuming thread
    float* image_data();
    std::int64_t* label_data();
  };
  // A batch whose copy to the device has been started (pin_memory).
  struct Upload {
    std::int64_t global = -1;
    Batch batch;
    std::uint64_t tickets[2] = {0, 0};
  };
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
  void worker_loop();

  std::shared_ptr<const SyntheticImages> dataset_;
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

}  // namespace trainlab
