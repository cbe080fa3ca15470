// A data set: what a study brings to train on. Fixed-shape f32 samples with integer labels; the
// loader, the distributed sampler, pinned staging and evaluation need nothing more. SyntheticImages
// (engine/data/synthetic_images.h) is the one the trainlab command uses; a driver defines its own by
// implementing these five calls (examples/own_model_and_data shows one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace trainlab {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  // One sample's shape (e.g. {3, 32, 32}); a batch is [N, shape...], f32, row-major.
  virtual Shape sample_shape() const = 0;
  virtual std::int64_t num_classes() const = 0;
  // Writes sample `index` (in [0, size())) to `out`, sample_elements() floats, and returns its
  // label (in [0, num_classes())). The loader's worker threads call this at once: it must be
  // thread-safe and a pure function of `index`. `work`, when not null, receives a checksum of
  // any per-sample work done (decoding), which the batch carries so that it cannot be optimised
  // away.
  virtual std::int64_t get(std::int64_t index, float* out, double* work = nullptr) const = 0;
  // The same sample as the loader draws it in `epoch`: a data set with random augmentation (a
  // crop, a flip; engine/data/disk_dataset.h) draws it from (its seed, epoch, index), so each epoch sees
  // another view and any worker produces the same one. Without augmentation, get().
  virtual std::int64_t get_in_epoch(std::int64_t index, std::int64_t /*epoch*/, float* out, double* work) const {
    return get(index, out, work);
  }
  // One line for logs: "SyntheticImages(train, 50000 samples, decode cost 60)".
  virtual std::string describe() const = 0;
  // The classes' names in label order, where the data names them (an imported data set on disk);
  // empty: the labels are the names.
  virtual std::vector<std::string> class_names() const { return {}; }

  std::int64_t sample_elements() const { return shape_numel(sample_shape()); }
};

}  // namespace trainlab
