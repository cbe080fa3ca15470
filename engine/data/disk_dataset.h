// Image data sets on disk: written once by `trainlab make-dataset` from any Dataset, read back by
// the loader's workers as a Dataset like any other (decoding in the worker, as a real input
// pipeline does).
//
// Two layouts, the two the seed's regression is about:
//   shards: records laid end to end in a few large files (WebDataset/TFRecord style), each record a
//           16-byte header (magic "TLR1", label, payload bytes, the payload's CRC-32) and the
//           encoded image; beside each shard an index of the records' offsets (u64 each);
//   files:  one file per sample under a folder per class (ImageFolder style: train/3/00000012.jpg).
// A manifest (manifest.json, written last: its presence marks a complete data set) records the
// source, the codec, the stored image size, how pixels map back to values, and every file with its
// size and CRC-32 (in the files layout, each sample's file; in the shards layout, each shard and
// index). Reading checks each record's or file's CRC-32 as it decodes, so a corrupted image is an
// error naming the file and the sample, never a silently wrong sample; opening checks every file's
// size, so a truncated file is refused before the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/data/image_codec.h"
#include "engine/data/synthetic_images.h"

namespace trainlab {

// A stored image's largest side, make-dataset's own limit (a decode buffer stays under 48 MiB): the
// writer, the reader and the importers check against it.
constexpr int kMaxImageSize = 4096;

enum class DiskLayout { shards, files };
const char* disk_layout_name(DiskLayout layout);        // "shards", "files"
DiskLayout parse_disk_layout(const std::string& name);  // throws Error listing shards | files

struct DatasetWriteOptions {
  std::string out;  // the data set's directory: created, or an earlier make-dataset's (with overwrite)
  DiskLayout layout = DiskLayout::shards;
  ImageCodec codec = ImageCodec::jpeg;
  int quality = 90;        // JPEG's, 1..100
  double shard_mb = 64;    // a shard is closed once it holds this many MiB (shards layout)
  int image_size = 0;      // stored height and width: a multiple of the source's (0: the source's)
  bool overwrite = false;  // replace a data set an earlier make-dataset wrote at `out` (never anything else)
  // What an import adds to the manifest: its source ("" : the training split's describe()), the
  // class names in label order (empty: none recorded), and per split the source's files it skipped
  // as not images (--skip-bad).
  std::string source;
  std::vector<std::string> class_names;
  std::map<std::string, std::int64_t> skipped;
  // The samples' values are 8-bit pixels / 255 (an imported image set): stored as exactly those
  // bytes (the map value = byte / 255) instead of a map chosen from the data.
  bool unit_values = false;
  // Record the training split's per-channel mean and standard deviation (of the stored values):
  // the reader standardises every sample with them, (value - mean) / std, as torchvision's
  // Normalize does.
  bool normalize = false;
  // Called with one line now and then (every ~2 s) while writing; null: quiet.
  std::function<void(const std::string& line)> progress;
};

struct SplitSummary {
  std::string name;  // "train", "held_out"
  std::int64_t samples = 0, files = 0;
  std::uint64_t bytes = 0;  // encoded images plus record headers (and indexes)
};

struct DatasetWriteSummary {
  std::string out;  // the data set's directory, absolute ("." and "new/" name it as a directory)
  std::vector<SplitSummary> splits;
  double seconds = 0;
  // With overwrite: where files that were in the replaced data set's directory but not in its
  // manifest were kept, when the new data set has files of their names ("" : moved into `out`).
  std::string kept;
};

// Writes `train` (and `held_out` unless null) to options.out. Samples must be [C, H, W] images
// (C 1 or 3, H == W); their values are quantised to 8 bits by one linear map for the whole data set
// (the training split's mean +- 4 standard deviations, from its first 512 samples, onto 0..255),
// recorded in the manifest so that a reader gives back the source's values to within a step.
// Written into a temporary directory beside `out`, then renamed into place: an interrupted write
// leaves no data set behind. Throws Error naming the path when `out` holds anything but an earlier
// data set whose manifest checks (or one without overwrite). Replacing one removes exactly the files
// its manifest lists; a user's own file in its directory is kept (moved into the new data set).
DatasetWriteSummary write_image_dataset(const Dataset& train, const Dataset* held_out,
                                        const DatasetWriteOptions& options);

enum class Augment { none, crop_flip };
const char* augment_name(Augment augment);
Augment parse_augment(const std::string& name);  // none | crop_flip

struct DiskReadOptions {
  // The sample's height and width (square): the stored images are box-filtered down to it (the
  // stored size must be a multiple of it). 0: the data set's sample size (its source's: a
  // SyntheticImages data set stored at 128 pixels gives back 32x32 samples).
  int output_size = 0;
  // On the fly, per sample and epoch: crop_flip pads by 4 pixels (zeros), crops back at a random
  // offset and flips horizontally with probability 1/2 (the CIFAR recipe), drawn from (seed, epoch,
  // index). Precomputing it would give every epoch the same crop.
  Augment augment = Augment::none;
  std::uint64_t seed = 0;
  std::int64_t limit = 0;  // use the first `limit` samples of the split (0: all)
};

// What the readers did, summed over every thread: the CPU seconds spent reading (the system calls
// and the CRC check) and decoding (the codec, the resize, the value map, augmentation).
struct DiskReadStats {
  std::int64_t samples = 0;
  std::uint64_t bytes = 0;
  double read_cpu_s = 0, decode_cpu_s = 0;
};

// The manifest, as read back (a subset for tools: diagnose's layout check, loader-bench).
struct DatasetFile {
  std::string path;  // relative to the data set's directory
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

struct DatasetInfo {
  std::string dir, source;
  DiskLayout layout = DiskLayout::shards;
  ImageCodec codec = ImageCodec::raw;
  int quality = 0;
  ImageSize image;
  int sample_size = 0;  // the source's height and width, what a reader gives back by default
  std::int64_t classes = 0;
  std::vector<std::string> class_names;         // in label order; empty when the source named none
  double pixel_scale = 1, pixel_offset = 0;     // value = (byte - offset) / scale
  std::vector<double> mean, stdev;              // per channel: the reader gives (value - mean) / stdev; empty: none
  std::map<std::string, std::int64_t> skipped;  // per split: source files skipped as not images
  std::vector<std::string> splits;
  std::vector<DatasetFile> files;  // every file the data set consists of, the manifest included last
};

// Reads and checks the manifest (not the files' contents: verify_image_dataset does that).
DatasetInfo read_dataset_info(const std::string& dir);
// The reader's rule for class names, which the writer and the importers apply before any work:
// each of 1..255 bytes of UTF-8. Throws Error naming `where` + the name's index, the name and why.
void check_class_names(const std::vector<std::string>& names, const std::string& where);
bool has_split(const std::string& dir, Split split);

struct DatasetVerifyResult {
  std::int64_t files = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> problems;  // one line each: the file and what differs
};
// Reads every file and compares its size and CRC-32 with the manifest's.
DatasetVerifyResult verify_image_dataset(const std::string& dir);

// One split of a data set on disk. open_image_dataset picks the layout's reader.
class EncodedImageDataset : public Dataset {
 public:
  ~EncodedImageDataset() override;
  std::int64_t size() const override { return size_; }
  Shape sample_shape() const override;
  std::int64_t num_classes() const override { return info_.classes; }
  std::string describe() const override;
  std::vector<std::string> class_names() const override { return info_.class_names; }
  std::int64_t get(std::int64_t index, float* out, double* work = nullptr) const override;
  std::int64_t get_in_epoch(std::int64_t index, std::int64_t epoch, float* out, double* work) const override;

  const DatasetInfo& info() const { return info_; }
  Split split() const { return split_; }
  // The files this split reads (full paths), for cold-cache runs and layout checks.
  const std::vector<std::string>& split_files() const { return split_paths_; }
  DiskReadStats stats() const;
  void reset_stats();
  // Sample `index`'s encoded bytes and its label, read and checked as a reader reads them (not
  // decoded): verify-dataset walks every sample with it.
  std::int64_t read_sample(std::int64_t index, std::vector<unsigned char>& bytes) const;

 protected:
  EncodedImageDataset(DatasetInfo info, Split split, const DiskReadOptions& options);
  // The encoded bytes of sample `index` and its label; errors name the file and the sample.
  virtual std::int64_t read_encoded(std::int64_t index, std::vector<unsigned char>& bytes) const = 0;
  std::string where(std::int64_t index) const;  // "data set DIR, train sample 12"
  void set_size(std::int64_t stored);           // the split's sample count (then options.limit applies)

  DatasetInfo info_;
  Split split_;
  DiskReadOptions options_;
  std::int64_t size_ = 0;
  std::vector<std::string> split_paths_;

 private:
  int output_size_ = 0;
  mutable std::atomic<std::int64_t> samples_{0};
  mutable std::atomic<std::uint64_t> bytes_{0}, read_ns_{0}, decode_ns_{0};
};

std::shared_ptr<EncodedImageDataset> open_image_dataset(const std::string& dir, Split split,
                                                        const DiskReadOptions& options = {});

// Cold-cache runs: asks the kernel to drop the page cache's copy of each file
// (posix_fadvise(DONTNEED); clean pages go, so the next read comes from storage), and measures
// what is still cached (mincore), as a fraction of the files' bytes.
void drop_page_cache(const std::vector<std::string>& paths);
double page_cache_resident_fraction(const std::vector<std::string>& paths);

}  // namespace trainlab
