// A data set: what a study brings to train on. Two kinds of sample, fixed-shape either way:
//   values: f32 samples (an image [C, H, W], a feature vector) with one integer label each;
//   tokens: a window of T token ids (i64) with a target per position, the token that follows it
//           (a language model's data: engine/data/token_windows.h).
// The loader, the distributed sampler, pinned staging and evaluation need nothing more.
// SyntheticImages (engine/data/synthetic_images.h) is the one the trainlab command uses for image
// models, SyntheticTokens for token models; a driver defines its own by implementing these five
// calls (examples/own_model_and_data shows one), a token data set get_tokens as well.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace trainlab {

enum class SampleKind { values, tokens };

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

  // tokens: a sample is sample_shape() ([T]) token ids in [0, num_classes()) and as many targets
  // (a batch's labels are then [B, T]); get() and get_in_epoch() are not used.
  virtual SampleKind sample_kind() const { return SampleKind::values; }
  // Sample `index` as the loader draws it in `epoch`: sample_elements() ids to `tokens` and as many
  // targets to `targets`. Thread-safe and a pure function of (index, epoch), as get_in_epoch.
  virtual void get_tokens(std::int64_t /*index*/, std::int64_t /*epoch*/, std::int64_t* /*tokens*/,
                          std::int64_t* /*targets*/) const {
    throw Error(describe() + " holds values, not token windows");
  }

  std::int64_t sample_elements() const { return shape_numel(sample_shape()); }
  // Labels per sample: 1 (its class), or a target per token.
  std::int64_t labels_per_sample() const { return sample_kind() == SampleKind::tokens ? sample_elements() : 1; }
};

}  // namespace trainlab
