// Reading an image data set: the layouts' readers (shards, one file per sample), each record or
// file checked as it is read, and the decode to a sample (resize, value map, standardisation,
// augmentation). The manifest they start from is read in disk_dataset_manifest.cpp, the data set
// written in disk_dataset_write.cpp.
#include "engine/data/disk_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "engine/core/rng.h"
#include "engine/data/disk_dataset_internal.h"
#include "engine/io/fileio.h"

namespace trainlab {

namespace fs = std::filesystem;
using namespace disk_format;

const char* disk_layout_name(DiskLayout layout) { return layout == DiskLayout::shards ? "shards" : "files"; }

DiskLayout parse_disk_layout(const std::string& name) {
  if (name == "shards") return DiskLayout::shards;
  if (name == "files") return DiskLayout::files;
  throw Error("layout " + quote_value(name) + " is not one of shards | files");
}

const char* augment_name(Augment augment) { return augment == Augment::none ? "none" : "crop_flip"; }

Augment parse_augment(const std::string& name) {
  if (name == "none") return Augment::none;
  if (name == "crop_flip") return Augment::crop_flip;
  throw Error("augment " + quote_value(name) + " is not one of none | crop_flip");
}

namespace {

constexpr std::size_t kOpenShards = 64;  // shard files a reader keeps open at once

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Opens `path` for reading and checks it is a regular file of the size the manifest says (a
// truncated or extended file is refused here, before any sample is read). O_NONBLOCK: a FIFO in its
// place is refused, never waited on.
int open_checked(const std::string& dir, const DatasetFile& f) {
  const std::string path = (fs::path(dir) / f.path).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TL_CHECK(fd >= 0, "data set " + dir + ": cannot open " + f.path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("data set " + dir + ": " + f.path + " is not a regular file (" + file_kind(path) + ")");
  }
  if (static_cast<std::uint64_t>(st.st_size) != f.bytes) {
    const auto size = static_cast<long long>(st.st_size);
    ::close(fd);
    throw Error("data set " + dir + ": " + f.path + " is " + std::to_string(size) + " bytes, the manifest says " +
                std::to_string(f.bytes) + " (truncated or changed; trainlab verify-dataset " + dir +
                " checks every file)");
  }
  return fd;
}

void pread_all(int fd, void* out, std::size_t size, std::uint64_t offset, const std::string& what) {
  auto* p = static_cast<unsigned char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    TL_CHECK(n > 0, what + ": " + (n == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

// An open file, closed when the last reader lets go of it.
struct OpenFile {
  int fd = -1;
  explicit OpenFile(int f) : fd(f) {}
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
};

// One record of a shard: its header and image, checked (magic, length within the shard, the CRC-32
// over the sample's index, label, length and image). Returns the label.
std::uint32_t read_record(int fd, std::uint64_t offset, std::uint64_t shard_bytes, std::int64_t sample,
                          std::vector<unsigned char>& bytes, const std::string& what, const std::string& dir) {
  TL_CHECK(offset <= shard_bytes && shard_bytes - offset >= kRecordHeader,
           what + ": the index points past the end of the shard");
  RecordHeader h{};
  pread_all(fd, &h, sizeof h, offset, what);
  TL_CHECK(h.magic == kRecordMagic, what + ": no record header there (corrupted)");
  TL_CHECK(h.bytes <= kMaxRecordBytes && h.bytes <= shard_bytes - offset - kRecordHeader,
           what + ": the record's length " + std::to_string(h.bytes) + " runs past the end of the shard (corrupted)");
  bytes.resize(h.bytes);
  pread_all(fd, bytes.data(), h.bytes, offset + kRecordHeader, what);
  const std::uint32_t crc = record_crc(sample, h.label, bytes.data(), h.bytes);
  TL_CHECK(crc == h.crc, what + ": the record's CRC-32 (its sample, label, length and image) is " + crc32_hex(crc) +
                             ", the record says " + crc32_hex(h.crc) +
                             " (corrupted, or a record of another sample; trainlab verify-dataset " + dir +
                             " checks every file)");
  return h.label;
}

class ShardDataset final : public EncodedImageDataset {
 public:
  ShardDataset(DatasetInfo info, Split split, const DiskReadOptions& options, const ManifestSplit& entry)
      : EncodedImageDataset(std::move(info), split, options) {
    const std::string& dir = info_.dir;
    for (const auto& e : entry.files) {
      Shard s;
      s.file = parse_file(e.path, e.bytes, e.crc32, dir);
      s.first = *e.first;
      const std::int64_t count = *e.samples;
      const DatasetFile index = parse_file(e.index->path, e.index->bytes, e.index->crc32, dir);
      const OpenFile index_file(open_checked(dir, index));
      s.offsets.resize(static_cast<std::size_t>(count));
      pread_all(index_file.fd, s.offsets.data(), index.bytes, 0, "data set " + dir + ": " + index.path);
      TL_CHECK(crc32(s.offsets.data(), index.bytes) == index.crc32,
               "data set " + dir + ": " + index.path + ": CRC-32 differs from the manifest's (corrupted)");
      // Every shard is there, a regular file of its size; it is opened again when read, a bounded
      // number at a time (a data set may have many thousands of shards).
      OpenFile(open_checked(dir, s.file));
      split_paths_.push_back((fs::path(dir) / index.path).string());
      split_paths_.push_back((fs::path(dir) / s.file.path).string());
      shards_.push_back(std::move(s));
    }
    set_size(entry.samples);
  }

 protected:
  std::int64_t read_encoded(std::int64_t index, std::vector<unsigned char>& bytes) const override {
    const auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                                     [](std::int64_t i, const Shard& s) { return i < s.first; }) -
                    1;
    const Shard& s = *it;
    const std::int64_t record = index - s.first;
    const std::uint64_t offset = s.offsets[static_cast<std::size_t>(record)];
    const std::string what = where(index) + " (" + s.file.path + ", record " + std::to_string(record) + " at byte " +
                             std::to_string(offset) + ")";
    const std::shared_ptr<OpenFile> file = open_shard(static_cast<std::size_t>(it - shards_.begin()));
    return read_record(file->fd, offset, s.file.bytes, index, bytes, what, info_.dir);
  }

 private:
  struct Shard {
    DatasetFile file;
    std::int64_t first = 0;
    std::vector<std::uint64_t> offsets;
  };
  // The shard's file, from a cache of at most kOpenShards (the least recently used closed first:
  // a reader still holding one keeps it open until it is done).
  std::shared_ptr<OpenFile> open_shard(std::size_t shard) const {
    std::lock_guard lock(mutex_);
    const auto found = std::find_if(open_.begin(), open_.end(), [&](const auto& e) { return e.first == shard; });
    if (found != open_.end()) {
      std::rotate(open_.begin(), found, found + 1);  // most recent first
      return open_.front().second;
    }
    auto file = std::make_shared<OpenFile>(open_checked(info_.dir, shards_[shard].file));
    open_.insert(open_.begin(), {shard, file});
    if (open_.size() > kOpenShards) open_.pop_back();
    return file;
  }
  std::vector<Shard> shards_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<std::size_t, std::shared_ptr<OpenFile>>> open_;
};

class ImageFolderDataset final : public EncodedImageDataset {
 public:
  ImageFolderDataset(DatasetInfo info, Split split, const DiskReadOptions& options, const ManifestSplit& entry)
      : EncodedImageDataset(std::move(info), split, options) {
    for (const auto& e : entry.files) {
      Sample s{parse_file(e.path, e.bytes, e.crc32, info_.dir), *e.label};
      split_paths_.push_back((fs::path(info_.dir) / s.file.path).string());
      samples_.push_back(std::move(s));
    }
    // Every file is there and has its size: a missing or truncated file is refused before the run.
    for (const auto& s : samples_) OpenFile(open_checked(info_.dir, s.file));
    set_size(static_cast<std::int64_t>(samples_.size()));
  }

 protected:
  std::int64_t read_encoded(std::int64_t index, std::vector<unsigned char>& bytes) const override {
    const Sample& s = samples_[static_cast<std::size_t>(index)];
    const std::string what = where(index) + " (" + s.file.path + ")";
    const OpenFile file(open_checked(info_.dir, s.file));
    bytes.resize(s.file.bytes);
    pread_all(file.fd, bytes.data(), bytes.size(), 0, what);
    const std::uint32_t crc = crc32(bytes.data(), bytes.size());
    TL_CHECK(crc == s.file.crc32, what + ": CRC-32 is " + crc32_hex(crc) + ", the manifest says " +
                                      crc32_hex(s.file.crc32) + " (changed or corrupted)");
    return s.label;
  }

 private:
  struct Sample {
    DatasetFile file;
    std::int64_t label = 0;
  };
  std::vector<Sample> samples_;
};

}  // namespace

EncodedImageDataset::EncodedImageDataset(DatasetInfo info, Split split, const DiskReadOptions& options)
    : info_(std::move(info)), split_(split), options_(options) {
  output_size_ = options.output_size == 0 ? info_.sample_size : options.output_size;
  TL_CHECK(output_size_ >= 1 && info_.image.height % output_size_ == 0,
           "data set " + info_.dir + ": its images are " + std::to_string(info_.image.height) + " pixels square; " +
               std::to_string(output_size_) +
               " does not divide that (the stored size must be a multiple of the "
               "sample size)");
  TL_CHECK(options.limit >= 0, "data set: limit must be >= 0");
}

EncodedImageDataset::~EncodedImageDataset() = default;

void EncodedImageDataset::set_size(std::int64_t stored) {
  TL_CHECK(stored >= 1, "data set " + info_.dir + ": the " + split_dir_name(split_) + " split is empty");
  size_ = options_.limit > 0 ? std::min(options_.limit, stored) : stored;
}

Shape EncodedImageDataset::sample_shape() const { return {info_.image.channels, output_size_, output_size_}; }

std::string EncodedImageDataset::describe() const {
  std::string text = std::string(info_.layout == DiskLayout::shards ? "ShardDataset(" : "ImageFolderDataset(") +
                     info_.dir + ", " + split_name(split_) + ", " + std::to_string(size_) + " samples, " +
                     image_codec_name(info_.codec);
  // Appended piece by piece: `" q" + std::to_string(...)` trips GCC 12's -Wrestrict (a false positive).
  if (info_.codec == ImageCodec::jpeg) text.append(" q").append(std::to_string(info_.quality));
  text.append(" ").append(std::to_string(info_.image.height)).append("px");
  if (output_size_ != info_.image.height) text += " -> " + std::to_string(output_size_) + "px";
  if (options_.augment != Augment::none) text += std::string(", ") + augment_name(options_.augment);
  return text + ")";
}

std::int64_t EncodedImageDataset::get(std::int64_t index, float* out, double* work) const {
  return get_in_epoch(index, 0, out, work);
}

std::int64_t EncodedImageDataset::get_in_epoch(std::int64_t index, std::int64_t epoch, float* out, double* work) const {
  TL_CHECK(index >= 0 && index < size_,
           describe() + ": index " + std::to_string(index) + " is outside [0, " + std::to_string(size_) + ")");
  thread_local std::vector<unsigned char> encoded, pixels;
  thread_local std::vector<float> plain;
  const double t0 = thread_cpu_seconds();
  const std::int64_t label = read_encoded(index, encoded);
  TL_CHECK(label >= 0 && label < info_.classes, where(index) + ": label " + std::to_string(label) + " is outside [0, " +
                                                    std::to_string(info_.classes) + ")");
  const double t1 = thread_cpu_seconds();
  pixels.resize(info_.image.bytes());
  try {
    decode_image(info_.codec, encoded.data(), encoded.size(), info_.image, pixels.data());
  } catch (const Error& e) {
    throw Error(where(index) + ": " + e.what());
  }
  // Box filter down to the sample size, HWC bytes to CHW values through the manifest's map.
  const int c = info_.image.channels, s = info_.image.height, o = output_size_, f = s / o;
  const double inv = 1.0 / (info_.pixel_scale * f * f);
  const bool standardise = !info_.mean.empty();
  const bool augment = options_.augment == Augment::crop_flip;
  float* dest = out;
  if (augment) {
    plain.resize(static_cast<std::size_t>(c) * o * o);
    dest = plain.data();
  }
  double checksum = 0;
  for (int ch = 0; ch < c; ++ch) {
    for (int y = 0; y < o; ++y) {
      for (int x = 0; x < o; ++x) {
        int sum = 0;
        for (int dy = 0; dy < f; ++dy)
          for (int dx = 0; dx < f; ++dx)
            sum += pixels[(static_cast<std::size_t>(y * f + dy) * s + (x * f + dx)) * c + ch];
        checksum += sum;
        const double value = (sum - info_.pixel_offset * f * f) * inv;
        dest[(static_cast<std::size_t>(ch) * o + y) * o + x] =
            static_cast<float>(standardise ? (value - info_.mean[ch]) / info_.stdev[ch] : value);
      }
    }
  }
  if (augment) {
    // Pad by 4 (zeros), crop back at a random offset, flip with probability 1/2.
    constexpr int kPad = 4;
    Generator gen(
        mix_seed(mix_seed(options_.seed, static_cast<std::uint64_t>(epoch)), static_cast<std::uint64_t>(index)));
    const int oy = static_cast<int>(gen.below(2 * kPad + 1)) - kPad,
              ox = static_cast<int>(gen.below(2 * kPad + 1)) - kPad;
    const bool flip = gen.below(2) == 1;
    for (int ch = 0; ch < c; ++ch) {
      for (int y = 0; y < o; ++y) {
        for (int x = 0; x < o; ++x) {
          const int sy = y + oy, sx0 = x + ox, sx = flip ? o - 1 - sx0 : sx0;
          const bool inside = sy >= 0 && sy < o && sx >= 0 && sx < o;
          out[(static_cast<std::size_t>(ch) * o + y) * o + x] =
              inside ? plain[(static_cast<std::size_t>(ch) * o + sy) * o + sx] : 0.0f;
        }
      }
    }
  }
  const double t2 = thread_cpu_seconds();
  if (work) *work = checksum;
  samples_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(encoded.size(), std::memory_order_relaxed);
  read_ns_.fetch_add(static_cast<std::uint64_t>((t1 - t0) * 1e9), std::memory_order_relaxed);
  decode_ns_.fetch_add(static_cast<std::uint64_t>((t2 - t1) * 1e9), std::memory_order_relaxed);
  return label;
}

std::int64_t EncodedImageDataset::read_sample(std::int64_t index, std::vector<unsigned char>& bytes) const {
  TL_CHECK(index >= 0 && index < size_,
           describe() + ": index " + std::to_string(index) + " is outside [0, " + std::to_string(size_) + ")");
  const std::int64_t label = read_encoded(index, bytes);
  TL_CHECK(label >= 0 && label < info_.classes, where(index) + ": label " + std::to_string(label) + " is outside [0, " +
                                                    std::to_string(info_.classes) + ")");
  return label;
}

std::string EncodedImageDataset::where(std::int64_t index) const {
  return "data set " + info_.dir + ", " + split_dir_name(split_) + " sample " + std::to_string(index);
}

DiskReadStats EncodedImageDataset::stats() const {
  DiskReadStats s;
  s.samples = samples_.load();
  s.bytes = bytes_.load();
  s.read_cpu_s = static_cast<double>(read_ns_.load()) * 1e-9;
  s.decode_cpu_s = static_cast<double>(decode_ns_.load()) * 1e-9;
  return s;
}

void EncodedImageDataset::reset_stats() {
  samples_ = 0;
  bytes_ = 0;
  read_ns_ = 0;
  decode_ns_ = 0;
}

std::shared_ptr<EncodedImageDataset> open_image_dataset(const std::string& dir, Split split,
                                                        const DiskReadOptions& options) {
  Manifest m = load_manifest(dir);
  const std::string name = split_dir_name(split);
  const auto entry = m.doc.splits.find(name);
  if (entry == m.doc.splits.end()) {
    std::string all;
    for (const auto& s : m.info.splits) all += (all.empty() ? "" : ", ") + s;
    throw Error("data set " + dir + " has no " + name + " split (it has: " + all + ")");
  }
  if (m.info.layout == DiskLayout::shards)
    return std::make_shared<ShardDataset>(std::move(m.info), split, options, entry->second);
  return std::make_shared<ImageFolderDataset>(std::move(m.info), split, options, entry->second);
}

void drop_page_cache(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double page_cache_resident_fraction(const std::vector<std::string>& paths) {
  const long page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t total = 0, resident = 0;
  std::vector<unsigned char> vec;
  for (const auto& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        const std::size_t pages = (static_cast<std::size_t>(st.st_size) + page - 1) / page;
        vec.assign(pages, 0);
        if (::mincore(map, static_cast<std::size_t>(st.st_size), vec.data()) == 0) {
          for (unsigned char v : vec) resident += (v & 1) ? 1 : 0;
          total += pages;
        }
        ::munmap(map, static_cast<std::size_t>(st.st_size));
      }
    }
    ::close(fd);
  }
  return total == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(total);
}

}  // namespace trainlab
