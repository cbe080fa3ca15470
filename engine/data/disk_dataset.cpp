#include "engine/data/disk_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "engine/core/rng.h"
#include "engine/io/fields.h"
#include "engine/io/fileio.h"
#include "engine/io/version.h"

namespace trainlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

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

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "trainlab-image-dataset";
// Version 2: the manifest carries its own CRC-32, and a record's CRC-32 covers its sample's index,
// its label and its length as well as the image (a label changed in a header, or a shard swapped
// for another of the same size, is caught where it is read). Version 3 (imports): the sample size
// a reader gives back, the class names, the per-channel mean and standard deviation the reader
// standardises with, and per split the source files skipped. A version 2 data set (SyntheticImages
// only, stored at a multiple of 32) reads as before: 32x32 samples, no names, no standardising.
constexpr int kFormatVersion = 3, kOldestVersion = 2;
constexpr std::uint32_t kRecordMagic = 0x32524c54;  // "TLR2" little-endian
constexpr std::size_t kRecordHeader = 16;
constexpr std::uint64_t kMaxManifestBytes = 1ull << 30;
constexpr std::uint32_t kMaxRecordBytes = 64u << 20;
constexpr int kMaxImageSize = 4096;      // make-dataset's own limit: a decode buffer stays under 48 MiB
constexpr double kMaxPixelMap = 1e6;     // |scale| and |offset| of the value map
constexpr std::size_t kOpenShards = 64;  // shard files a reader keeps open at once

struct RecordHeader {
  std::uint32_t magic, label, bytes, crc;
};
static_assert(sizeof(RecordHeader) == kRecordHeader);

// A record's CRC-32: the sample's index in its split, its label and its length, then the image.
std::uint32_t record_crc(std::int64_t index, std::uint32_t label, const unsigned char* image, std::uint32_t bytes) {
  unsigned char head[16];
  const auto i = static_cast<std::uint64_t>(index);
  std::memcpy(head, &i, 8);
  std::memcpy(head + 8, &label, 4);
  std::memcpy(head + 12, &bytes, 4);
  return crc32(image, bytes, crc32(head, sizeof head));
}

// ---- the manifest, typed (engine/io/fields.h): one list of keys reads and writes it ----------------

struct ManifestIndex {
  std::string path;
  std::uint64_t bytes = 0;
  std::string crc32;
  template <class F>
  void fields(F& f) {
    f("path", path);
    f("bytes", bytes);
    f("crc32", crc32);
  }
};
struct ManifestFile {
  std::string path;
  std::uint64_t bytes = 0;
  std::string crc32;
  std::optional<std::int64_t> label;           // files layout
  std::optional<std::int64_t> first, samples;  // shards layout: the shard's first sample and its count
  std::optional<ManifestIndex> index;          // shards layout
  template <class F>
  void fields(F& f) {
    f("path", path);
    f("bytes", bytes);
    f("crc32", crc32);
    f.optional("label", label);
    f.optional("first", first);
    f.optional("samples", samples);
    f.optional("index", index);
  }
};
struct ManifestSplit {
  std::int64_t samples = 0;
  std::uint64_t bytes = 0;
  std::string source;
  std::optional<std::int64_t> skipped;  // source files skipped as not images (an import's --skip-bad)
  std::vector<ManifestFile> files;
  template <class F>
  void fields(F& f) {
    f("samples", samples);
    f.optional("bytes", bytes);
    f.optional("source", source);
    f.optional("skipped", skipped);
    f("files", files);
  }
};
struct ManifestImage {
  int height = 0, width = 0, channels = 0;
  template <class F>
  void fields(F& f) {
    f("height", height);
    f("width", width);
    f("channels", channels);
  }
};
struct ManifestPixels {
  double scale = 1, offset = 0;
  template <class F>
  void fields(F& f) {
    f("scale", scale);
    f("offset", offset);
  }
};
struct ManifestNormalize {
  std::vector<double> mean, std;  // per channel, of the stored values (after the pixel map)
  template <class F>
  void fields(F& f) {
    f("mean", mean);
    f("std", std);
  }
};
struct ManifestDoc {
  std::string format;
  int version = 0;
  std::string writer, source, layout, codec;
  int quality = 0;
  ManifestImage image;
  std::optional<int> sample_size;  // version 3
  std::int64_t classes = 0;
  std::optional<std::vector<std::string>> class_names;
  ManifestPixels pixels;
  std::optional<ManifestNormalize> normalize;
  std::map<std::string, ManifestSplit> splits;
  std::string crc32;  // of the manifest's JSON without this key (json::dump, sorted keys)
  template <class F>
  void fields(F& f) {
    f("format", format);
    f("version", version);
    f.optional("writer", writer);
    f.optional("source", source);
    f("layout", layout);
    f("codec", codec);
    f("quality", quality);
    f("image", image);
    f.optional("sample_size", sample_size);
    f("classes", classes);
    f.optional("class_names", class_names);
    f("pixels", pixels);
    f.optional("normalize", normalize);
    f("splits", splits);
    f.optional("crc32", crc32);
  }
};

// The manifest's own CRC-32: of its JSON with the crc32 key removed.
std::uint32_t manifest_crc(json j) {
  j.erase("crc32");
  const std::string text = j.dump();
  return crc32(text.data(), text.size());
}

std::string split_dir_name(Split split) { return split == Split::train ? "train" : "held_out"; }

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// ---- writing ---------------------------------------------------------------------------------

struct PixelMap {
  double scale = 1, offset = 0;  // byte = value * scale + offset
};

// The training split's mean +- 4 standard deviations onto 0..255, from its first 512 samples.
PixelMap choose_pixel_map(const Dataset& data) {
  const std::int64_t n = std::min<std::int64_t>(512, data.size());
  std::vector<float> sample(static_cast<std::size_t>(data.sample_elements()));
  double sum = 0, sq = 0, count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    data.get(i, sample.data());
    for (float v : sample) {
      sum += v;
      sq += static_cast<double>(v) * v;
      count += 1;
    }
  }
  const double mean = sum / count;
  const double stdev = std::sqrt(std::max(sq / count - mean * mean, 1e-12));
  PixelMap map;
  map.scale = 255.0 / (8.0 * stdev);
  map.offset = 127.5 - mean * map.scale;
  return map;
}

// A [C, H, W] float sample to H*f x W*f x C bytes: bilinear upsampling by the integer factor f
// (pixel centres aligned, edges clamped), then the value map, rounded and clamped.
void sample_to_pixels(const float* sample, ImageSize source, int factor, const PixelMap& map,
                      std::vector<unsigned char>& pixels) {
  const int h = source.height * factor, w = source.width * factor, c = source.channels;
  pixels.resize(static_cast<std::size_t>(h) * w * c);
  for (int y = 0; y < h; ++y) {
    const double sy = std::clamp((y + 0.5) / factor - 0.5, 0.0, source.height - 1.0);
    const int y0 = static_cast<int>(sy), y1 = std::min(y0 + 1, source.height - 1);
    const double fy = sy - y0;
    for (int x = 0; x < w; ++x) {
      const double sx = std::clamp((x + 0.5) / factor - 0.5, 0.0, source.width - 1.0);
      const int x0 = static_cast<int>(sx), x1 = std::min(x0 + 1, source.width - 1);
      const double fx = sx - x0;
      for (int ch = 0; ch < c; ++ch) {
        const float* plane = sample + static_cast<std::ptrdiff_t>(ch) * source.height * source.width;
        const auto at = [&](int yy, int xx) { return static_cast<double>(plane[yy * source.width + xx]); };
        const double v =
            (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) + fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1));
        const double byte = std::round(v * map.scale + map.offset);
        pixels[(static_cast<std::size_t>(y) * w + x) * c + ch] =
            static_cast<unsigned char>(std::clamp(byte, 0.0, 255.0));
      }
    }
  }
}

// A file written with plain writes; durability comes from one syncfs at the end of the data set.
class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    TL_CHECK(fd_ >= 0, "make-dataset: cannot create " + path + ": " + std::strerror(errno));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void write(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      TL_CHECK(n > 0, "make-dataset: cannot write " + path_ + ": " + std::strerror(errno));
      crc_ = crc32(p, static_cast<std::size_t>(n), crc_);
      p += n;
      size -= static_cast<std::size_t>(n);
      bytes_ += static_cast<std::uint64_t>(n);
    }
  }
  void close() {
    TL_CHECK(::close(fd_) == 0, "make-dataset: cannot close " + path_ + ": " + std::strerror(errno));
    fd_ = -1;
  }
  std::uint64_t bytes() const { return bytes_; }
  std::uint32_t crc() const { return crc_; }

 private:
  std::uint32_t crc_ = 0;  // of everything written so far
  std::string path_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
};

ManifestFile file_entry(const std::string& rel, const OutFile& f) {
  ManifestFile e;
  e.path = rel;
  e.bytes = f.bytes();
  e.crc32 = crc32_hex(f.crc());
  return e;
}

class Progress {
 public:
  explicit Progress(const std::function<void(const std::string&)>& sink) : sink_(sink) {}
  void tick(const std::string& split, std::int64_t done, std::int64_t total, std::uint64_t bytes) {
    if (!sink_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    char line[160];
    std::snprintf(line, sizeof line, "make-dataset: %s %lld/%lld samples, %.1f MiB", split.c_str(),
                  static_cast<long long>(done), static_cast<long long>(total), static_cast<double>(bytes) / (1 << 20));
    sink_(line);
  }

 private:
  const std::function<void(const std::string&)>& sink_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// Per-channel sums of the stored values (after the pixel map), for the manifest's mean and std.
struct ChannelStats {
  std::vector<double> sum, sq;
  double count = 0;  // values per channel
  void add(const std::vector<unsigned char>& pixels, int channels, const PixelMap& map) {
    if (sum.empty())
      sum.assign(static_cast<std::size_t>(channels), 0), sq.assign(static_cast<std::size_t>(channels), 0);
    for (std::size_t i = 0; i < pixels.size(); ++i) {
      const double v = (pixels[i] - map.offset) / map.scale;
      sum[i % static_cast<std::size_t>(channels)] += v;
      sq[i % static_cast<std::size_t>(channels)] += v * v;
    }
    count += static_cast<double>(pixels.size() / static_cast<std::size_t>(channels));
  }
  ManifestNormalize normalize() const {
    ManifestNormalize n;
    for (std::size_t c = 0; c < sum.size(); ++c) {
      const double mean = sum[c] / count;
      n.mean.push_back(mean);
      // A channel with one value everywhere: std 1 (standardising only centres it).
      const double var = sq[c] / count - mean * mean;
      n.std.push_back(var > 1e-12 ? std::sqrt(var) : 1.0);
    }
    return n;
  }
};

SplitSummary write_split(const Dataset& data, const std::string& name, const fs::path& root, const ImageSize source,
                         int factor, const PixelMap& map, const DatasetWriteOptions& o, ManifestSplit& entry,
                         ChannelStats* stats) {
  SplitSummary summary;
  summary.name = name;
  const ImageSize stored{source.height * factor, source.width * factor, source.channels};
  fs::create_directories(root / name);
  std::vector<float> sample(static_cast<std::size_t>(data.sample_elements()));
  std::vector<unsigned char> pixels;
  std::vector<ManifestFile>& files = entry.files;
  Progress progress(o.progress);
  const std::uint64_t shard_cap = static_cast<std::uint64_t>(o.shard_mb * 1024 * 1024);
  std::unique_ptr<OutFile> shard;
  std::vector<std::uint64_t> offsets;
  std::string shard_rel;
  std::int64_t shard_first = 0;
  const auto close_shard = [&](std::int64_t next) {
    if (!shard) return;
    shard->close();
    const std::string index_rel = shard_rel.substr(0, shard_rel.size() - 6) + ".idx";
    OutFile index((root / index_rel).string());
    index.write(offsets.data(), offsets.size() * sizeof(std::uint64_t));
    index.close();
    ManifestFile e = file_entry(shard_rel, *shard);
    e.first = shard_first;
    e.samples = next - shard_first;
    e.index = ManifestIndex{index_rel, index.bytes(), crc32_hex(index.crc())};
    files.push_back(e);
    summary.bytes += shard->bytes() + index.bytes();
    summary.files += 2;
    shard.reset();
    offsets.clear();
  };
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const std::int64_t label = data.get(i, sample.data());
    TL_CHECK(label >= 0 && label < data.num_classes(), "make-dataset: " + data.describe() + " sample " +
                                                           std::to_string(i) + " has label " + std::to_string(label));
    sample_to_pixels(sample.data(), source, factor, map, pixels);
    if (stats) stats->add(pixels, source.channels, map);
    const auto encoded = encode_image(o.codec, pixels.data(), stored, o.quality);
    if (o.layout == DiskLayout::files) {
      char rel[64];
      std::snprintf(rel, sizeof rel, "%s/%lld/%08lld%s", name.c_str(), static_cast<long long>(label),
                    static_cast<long long>(i), image_codec_extension(o.codec));
      fs::create_directories((root / rel).parent_path());
      OutFile f((root / rel).string());
      f.write(encoded.data(), encoded.size());
      f.close();
      ManifestFile e = file_entry(rel, f);
      e.label = label;
      files.push_back(e);
      summary.bytes += f.bytes();
      summary.files += 1;
    } else {
      if (shard && shard->bytes() + kRecordHeader + encoded.size() > shard_cap && !offsets.empty()) close_shard(i);
      if (!shard) {
        char rel[64];
        std::snprintf(rel, sizeof rel, "%s/shard-%06zu.tlrec", name.c_str(), files.size());
        shard_rel = rel;
        shard = std::make_unique<OutFile>((root / rel).string());
        shard_first = i;
      }
      offsets.push_back(shard->bytes());
      const auto length = static_cast<std::uint32_t>(encoded.size());
      const RecordHeader h{kRecordMagic, static_cast<std::uint32_t>(label), length,
                           record_crc(i, static_cast<std::uint32_t>(label), encoded.data(), length)};
      shard->write(&h, sizeof h);
      shard->write(encoded.data(), encoded.size());
    }
    summary.samples += 1;
    progress.tick(name, i + 1, data.size(), summary.bytes + (shard ? shard->bytes() : 0));
  }
  close_shard(data.size());
  entry.samples = summary.samples;
  entry.bytes = summary.bytes;
  entry.source = data.describe();
  if (const auto it = o.skipped.find(name); it != o.skipped.end()) entry.skipped = it->second;
  return summary;
}

}  // namespace

namespace {
// After a replace: the old data set's own files (its manifest's list) are removed from `old`; what
// else was in it (a user's files) moves into the new data set at `out` unless the new one has that
// name, in which case `old` is kept with it. Returns `old` when kept, "" when it is gone.
std::string retire_old_dataset(const fs::path& old, const fs::path& out, const DatasetInfo& info) {
  std::error_code ec;
  for (const auto& f : info.files) fs::remove(old / f.path, ec);
  // Directories the data set made, emptied, deepest first.
  std::vector<fs::path> dirs;
  for (auto it = fs::recursive_directory_iterator(old, ec); it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path());
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) { return a.native() > b.native(); });
  for (const auto& d : dirs)
    if (fs::is_empty(d, ec)) fs::remove(d, ec);
  for (const auto& entry : fs::directory_iterator(old, ec)) {
    const fs::path target = out / entry.path().filename();
    if (!fs::exists(fs::symlink_status(target, ec))) fs::rename(entry.path(), target, ec);
  }
  if (fs::is_empty(old, ec)) {
    fs::remove(old, ec);
    return "";
  }
  return old.string();
}

// The file that marks a staging directory as make-dataset's own (removed just before the rename).
const char* const kStagingMark = ".trainlab-staging";

// What killed make-dataset runs left beside `name`: NAME.partial-PID (or -PID-N), marked as ours,
// whose process is gone. Anything else that looks like it is left alone.
void remove_stale_partials(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  const std::string prefix = name + ".partial-";
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string entry_name = entry.path().filename().string();
    if (entry_name.rfind(prefix, 0) != 0) continue;
    const std::string rest = entry_name.substr(prefix.size());
    const std::string pid = rest.substr(0, rest.find('-'));
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (process_alive(std::stol(pid))) continue;  // a run in progress
    std::error_code check;
    if (!fs::is_directory(fs::symlink_status(entry.path(), check)) || !fs::exists(entry.path() / kStagingMark, check))
      continue;  // not our staging
    fs::remove_all(entry.path(), check);
  }
}
}  // namespace

DatasetWriteSummary write_image_dataset(const Dataset& train, const Dataset* held_out, const DatasetWriteOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  TL_CHECK(!o.out.empty(), "make-dataset: --out is required (the data set's directory)");
  const Shape shape = train.sample_shape();
  TL_CHECK(shape.size() == 3 && (shape[0] == 1 || shape[0] == 3) && shape[1] == shape[2],
           "make-dataset: " + train.describe() + " has samples of shape " + shape_str(shape) +
               "; an image data set needs [C, H, H] with C 1 or 3");
  if (held_out) {
    TL_CHECK(held_out->sample_shape() == shape && held_out->num_classes() == train.num_classes(),
             "make-dataset: the held-out split's samples or classes differ from the training split's");
  }
  const ImageSize source{static_cast<int>(shape[1]), static_cast<int>(shape[2]), static_cast<int>(shape[0])};
  const int stored = o.image_size == 0 ? source.height : o.image_size;
  TL_CHECK(stored >= source.height && stored % source.height == 0 && stored <= 4096,
           "make-dataset: --image-size " + std::to_string(o.image_size) + " must be a multiple of the source's " +
               std::to_string(source.height) + " (up to 4096)");
  TL_CHECK(o.quality >= 1 && o.quality <= 100,
           "make-dataset: --quality " + std::to_string(o.quality) + " is outside 1..100");
  TL_CHECK(o.shard_mb > 0 && o.shard_mb <= 1 << 20, "make-dataset: --shard-mb must be in (0, 1048576]");
  const int factor = stored / source.height;
  TL_CHECK(o.class_names.empty() || static_cast<std::int64_t>(o.class_names.size()) == train.num_classes(),
           "make-dataset: " + std::to_string(o.class_names.size()) + " class names for " +
               std::to_string(train.num_classes()) + " classes");

  // Never replace what is not ours: `out` must not exist, be an empty directory, or (with
  // overwrite) hold a data set an earlier make-dataset wrote.
  // The directory itself ("new/" and "." name it too: without the trailing separator, its staging
  // would have been made inside it).
  fs::path out = fs::absolute(o.out).lexically_normal();
  while (out.filename().empty() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  TL_CHECK(out != out.root_path(), "make-dataset: --out " + quote_value(o.out) + " is the root directory");
  std::error_code ec;
  const auto status = fs::symlink_status(out, ec);
  // With --overwrite, what is replaced is exactly the files a valid manifest lists (its own CRC-32
  // holds): a one-line manifest beside a user's photos is not a data set, and a user's own file
  // inside a real data set is kept.
  std::optional<DatasetInfo> existing;
  if (fs::exists(status)) {
    TL_CHECK(fs::is_directory(status), "make-dataset: --out " + out.string() + " exists and is not a directory");
    if (!fs::is_empty(out)) {
      std::string why;
      try {
        existing = read_dataset_info(out.string());
      } catch (const Error& e) {
        why = e.what();
      }
      TL_CHECK(existing.has_value(), "make-dataset: --out " + out.string() +
                                         " is a directory with files that are not a trainlab data set (" + why +
                                         "); choose a new or empty directory");
      TL_CHECK(o.overwrite,
               "make-dataset: --out " + out.string() + " already holds a data set; pass --overwrite to replace it");
    }
  }
  const fs::path parent = out.parent_path();
  fs::create_directories(parent, ec);
  TL_CHECK(!ec, "make-dataset: --out " + out.string() + ": cannot create " + parent.string() + ": " + ec.message());
  remove_stale_partials(parent, out.filename().string());
  // Our own staging directory, marked as ours; one that exists already is not (another run's, or
  // a stale one whose process had this number): it is left alone, and another name is taken.
  const std::string stem = out.filename().string() + ".partial-" + std::to_string(::getpid());
  fs::path tmp = parent / stem;
  for (int n = 1; fs::exists(fs::symlink_status(tmp, ec)); ++n) tmp = parent / (stem + "-" + std::to_string(n));
  TL_CHECK(fs::create_directory(tmp, ec) && !ec,
           "make-dataset: cannot create the staging directory " + tmp.string() + ": " + ec.message());
  write_file_atomic((tmp / kStagingMark).string(), std::string("make-dataset staging\n"));
  DatasetWriteSummary summary;
  try {
    const PixelMap map = o.unit_values ? PixelMap{255, 0} : choose_pixel_map(train);
    ManifestDoc doc;
    doc.format = kFormat;
    doc.version = kFormatVersion;
    doc.writer = "trainlab " + version() + " (" + git_describe() + ")";
    doc.source = o.source.empty() ? train.describe() : o.source;
    doc.layout = disk_layout_name(o.layout);
    doc.codec = image_codec_name(o.codec);
    doc.quality = o.codec == ImageCodec::jpeg ? o.quality : 0;
    doc.image = {stored, stored, source.channels};
    doc.sample_size = source.height;
    doc.classes = train.num_classes();
    if (!o.class_names.empty()) doc.class_names = o.class_names;
    doc.pixels = {map.scale, map.offset};
    ChannelStats stats;
    summary.splits.push_back(
        write_split(train, "train", tmp, source, factor, map, o, doc.splits["train"], o.normalize ? &stats : nullptr));
    if (o.normalize) doc.normalize = stats.normalize();
    if (held_out)
      summary.splits.push_back(
          write_split(*held_out, "held_out", tmp, source, factor, map, o, doc.splits["held_out"], nullptr));
    json manifest = fields::to_json(doc);
    manifest["crc32"] = crc32_hex(manifest_crc(manifest));
    // Everything on storage before the manifest that says it is complete.
    const int dir_fd = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    TL_CHECK(dir_fd >= 0 && ::syncfs(dir_fd) == 0, "make-dataset: cannot sync " + tmp.string());
    ::close(dir_fd);
    write_file_atomic((tmp / kManifest).string(), manifest.dump(1) + "\n");
    fs::remove(tmp / kStagingMark, ec);
    if (existing) {
      const fs::path old = parent / (out.filename().string() + ".old-" + std::to_string(::getpid()));
      fs::rename(out, old);
      fs::rename(tmp, out);
      summary.kept = retire_old_dataset(old, out, *existing);
    } else {
      if (fs::exists(out)) fs::remove(out);  // an empty directory
      fs::rename(tmp, out);
    }
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  summary.out = out.string();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

// ---- reading ---------------------------------------------------------------------------------

namespace {

std::uint32_t parse_crc(const std::string& text, const std::string& where) {
  TL_CHECK(text.size() == 8 && text.find_first_not_of("0123456789abcdef") == std::string::npos,
           where + ": CRC-32 " + quote_value(text) + " is not 8 hex digits");
  return static_cast<std::uint32_t>(std::stoul(text, nullptr, 16));
}

DatasetFile parse_file(const std::string& path, std::uint64_t bytes, const std::string& crc, const std::string& where) {
  DatasetFile f;
  f.path = path;
  TL_CHECK(!f.path.empty() && f.path[0] != '/' && f.path.find("..") == std::string::npos,
           where + ": file path " + quote_value(f.path) + " is not inside the data set");
  f.bytes = bytes;
  f.crc32 = parse_crc(crc, where + ": " + f.path);
  return f;
}

// The manifest, read and checked: everything train, loader-bench and verify-dataset rely on is
// checked here, once, for all of them (its own CRC-32; the layout, codec, image size and pixel map
// within their limits; every split's files consistent with its sample count; labels in range and,
// in the files layout, in their class folder; every path inside the data set and listed once).
struct Manifest {
  DatasetInfo info;
  ManifestDoc doc;
};

void check_split(const ManifestDoc& doc, const std::string& name, const ManifestSplit& split, DiskLayout layout,
                 const std::string& where) {
  const std::string at = where + ": splits." + name;
  TL_CHECK(name == "train" || name == "held_out", where + ": split " + quote_value(name) + " is not train or held_out");
  TL_CHECK(split.samples >= 1, at + ".samples is " + std::to_string(split.samples) + "; a split holds samples");
  TL_CHECK(!split.files.empty(), at + ".files is empty");
  std::int64_t next = 0;
  for (std::size_t i = 0; i < split.files.size(); ++i) {
    const ManifestFile& f = split.files[i];
    const std::string file_at = at + ".files[" + std::to_string(i) + "] (" + f.path + ")";
    TL_CHECK(f.path.rfind(name + "/", 0) == 0, file_at + ": not under " + name + "/");
    if (layout == DiskLayout::shards) {
      TL_CHECK(f.first && f.samples && f.index, file_at + ": a shard needs first, samples and index");
      TL_CHECK(*f.first == next && *f.samples >= 1,
               file_at + ": first " + std::to_string(*f.first) + ", samples " + std::to_string(*f.samples) +
                   " does not follow the shard before it (next sample " + std::to_string(next) + ")");
      next += *f.samples;
      TL_CHECK(f.index->bytes == static_cast<std::uint64_t>(*f.samples) * 8,
               file_at + ": its index holds " + std::to_string(f.index->bytes) + " bytes for " +
                   std::to_string(*f.samples) + " records");
      TL_CHECK(
          f.bytes >= static_cast<std::uint64_t>(*f.samples) * kRecordHeader,
          file_at + ": " + std::to_string(f.bytes) + " bytes cannot hold " + std::to_string(*f.samples) + " records");
    } else {
      TL_CHECK(f.label.has_value(), file_at + ": a file needs its label");
      TL_CHECK(*f.label >= 0 && *f.label < doc.classes, file_at + ": label " + std::to_string(*f.label) +
                                                            " is outside [0, " + std::to_string(doc.classes) + ")");
      TL_CHECK(f.path.rfind(name + "/" + std::to_string(*f.label) + "/", 0) == 0,
               file_at + ": label " + std::to_string(*f.label) + " contradicts its class folder");
      TL_CHECK(f.bytes >= 1 && f.bytes <= kMaxRecordBytes, file_at + ": " + std::to_string(f.bytes) + " bytes");
      next += 1;
    }
  }
  TL_CHECK(next == split.samples,
           at + ": its files hold " + std::to_string(next) + " samples, samples says " + std::to_string(split.samples));
}

// What version 3 adds (the sample size, class names, the standardisation, skipped files), checked
// into `info`; a version 2 manifest has none of them and reads as SyntheticImages' 32x32.
void check_version_3_keys(const ManifestDoc& doc, const std::string& path, DatasetInfo& info) {
  const bool v3 = doc.version >= 3;
  const bool skipped =
      std::any_of(doc.splits.begin(), doc.splits.end(), [](const auto& s) { return s.second.skipped; });
  const std::pair<const char*, bool> added[] = {{"sample_size", doc.sample_size.has_value()},
                                                {"class_names", doc.class_names.has_value()},
                                                {"normalize", doc.normalize.has_value()},
                                                {"skipped", skipped}};
  for (const auto& [key, present] : added)
    TL_CHECK(v3 || !present,
             path + ": " + key + " in a version " + std::to_string(doc.version) + " manifest (it came with version 3)");
  TL_CHECK(!v3 || doc.sample_size, path + ": a version 3 manifest needs sample_size");
  info.sample_size = doc.sample_size ? *doc.sample_size : 32;
  TL_CHECK(info.sample_size >= 1 && info.sample_size <= info.image.height && info.image.height % info.sample_size == 0,
           path + ": sample_size " + std::to_string(info.sample_size) + " does not divide the stored " +
               std::to_string(info.image.height) + " pixels");
  if (doc.class_names) {
    TL_CHECK(static_cast<std::int64_t>(doc.class_names->size()) == info.classes,
             path + ": class_names holds " + std::to_string(doc.class_names->size()) + " names for " +
                 std::to_string(info.classes) + " classes");
    for (std::size_t i = 0; i < doc.class_names->size(); ++i) {
      const std::string& name = (*doc.class_names)[i];
      TL_CHECK(!name.empty() && name.size() <= 255, path + ": class_names/" + std::to_string(i) + " is " +
                                                        quote_value(name) + ", not a name of 1..255 characters");
    }
    info.class_names = *doc.class_names;
  }
  if (doc.normalize) {
    const auto channels = static_cast<std::size_t>(info.image.channels);
    TL_CHECK(doc.normalize->mean.size() == channels && doc.normalize->std.size() == channels,
             path + ": normalize holds " + std::to_string(doc.normalize->mean.size()) + " means and " +
                 std::to_string(doc.normalize->std.size()) + " standard deviations for " + std::to_string(channels) +
                 " channels");
    for (std::size_t c = 0; c < channels; ++c) {
      const double mean = doc.normalize->mean[c], stdev = doc.normalize->std[c];
      TL_CHECK(std::isfinite(mean) && std::abs(mean) <= kMaxPixelMap && std::isfinite(stdev) && stdev >= 1e-6 &&
                   stdev <= kMaxPixelMap,
               path + ": normalize channel " + std::to_string(c) + " (mean " + std::to_string(mean) + ", std " +
                   std::to_string(stdev) + ") is outside |mean| <= 1e6, std in [1e-6, 1e6]");
    }
    info.mean = doc.normalize->mean;
    info.stdev = doc.normalize->std;
  }
  for (const auto& [name, split] : doc.splits) {
    if (!split.skipped) continue;
    TL_CHECK(*split.skipped >= 0, path + ": splits." + name + ".skipped is " + std::to_string(*split.skipped));
    info.skipped[name] = *split.skipped;
  }
}

Manifest load_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::error_code ec;
  TL_CHECK(fs::is_directory(dir, ec), "data set " + quote_value(dir) + " is not a directory");
  TL_CHECK(fs::exists(path, ec), "data set " + dir + " has no " + kManifest +
                                     " (written last by trainlab make-dataset: an incomplete or foreign directory)");
  const auto bytes = read_file(path, kMaxManifestBytes);
  check_json_bounds(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 16, kMaxManifestBytes, path);
  json j;
  try {
    j = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw Error(path + " is not JSON: " + e.what());
  }
  // What it is, before what it says: another format, or a version this build does not read.
  const auto format = j.is_object() ? j.find("format") : j.end();
  TL_CHECK(j.is_object() && format != j.end() && *format == kFormat,
           path + " is not a trainlab data set manifest (its format is " +
               (j.is_object() && format != j.end() ? format->dump() : std::string("missing")) + ")");
  const auto version = j.find("version");
  TL_CHECK(
      version != j.end() && version->is_number_integer() && *version >= kOldestVersion && *version <= kFormatVersion,
      path + ": manifest version " + (version != j.end() ? version->dump() : std::string("missing")) +
          " (this trainlab reads versions " + std::to_string(kOldestVersion) + " to " + std::to_string(kFormatVersion) +
          "; write the data set again with trainlab make-dataset)");
  Manifest m;
  try {
    m.doc = fields::from_json<ManifestDoc>(j);
  } catch (const fields::FieldError& e) {
    throw Error(path + ": " + e.what());
  }
  const ManifestDoc& doc = m.doc;
  TL_CHECK(manifest_crc(j) == parse_crc(doc.crc32, path),
           path + ": its CRC-32 is " + crc32_hex(manifest_crc(j)) + ", it says " + doc.crc32 +
               " (edited or corrupted; write the data set again with trainlab make-dataset)");
  DatasetInfo& info = m.info;
  info.dir = dir;
  info.source = doc.source;
  info.layout = parse_disk_layout(doc.layout);
  info.codec = parse_image_codec(doc.codec);
  info.quality = doc.quality;
  TL_CHECK(info.quality >= 0 && info.quality <= 100,
           path + ": quality " + std::to_string(info.quality) + " is outside 0..100");
  info.image = {doc.image.height, doc.image.width, doc.image.channels};
  TL_CHECK(info.image.height >= 1 && info.image.height <= kMaxImageSize && info.image.width == info.image.height &&
               (info.image.channels == 1 || info.image.channels == 3),
           path + ": image " + std::to_string(doc.image.height) + "x" + std::to_string(doc.image.width) + "x" +
               std::to_string(doc.image.channels) + " is not square HxHxC with H in 1.." +
               std::to_string(kMaxImageSize) + " and C 1 or 3");
  info.classes = doc.classes;
  TL_CHECK(info.classes >= 1 && info.classes <= 1 << 24,
           path + ": classes " + std::to_string(info.classes) + " is outside 1..16777216");
  check_version_3_keys(doc, path, info);
  info.pixel_scale = doc.pixels.scale;
  info.pixel_offset = doc.pixels.offset;
  TL_CHECK(std::isfinite(info.pixel_scale) && info.pixel_scale > 0 && info.pixel_scale <= kMaxPixelMap &&
               std::isfinite(info.pixel_offset) && std::abs(info.pixel_offset) <= kMaxPixelMap,
           path + ": the pixel map (scale " + std::to_string(info.pixel_scale) + ", offset " +
               std::to_string(info.pixel_offset) + ") is outside scale in (0, 1e6], |offset| <= 1e6");
  TL_CHECK(!doc.splits.empty(), path + ": no splits");
  std::set<std::string> paths;
  const auto add = [&](const DatasetFile& f) {
    TL_CHECK(paths.insert(f.path).second, path + ": " + f.path + " is listed twice");
    info.files.push_back(f);
  };
  for (const auto& [name, split] : doc.splits) {
    check_split(doc, name, split, info.layout, path);
    info.splits.push_back(name);
    for (const auto& e : split.files) {
      add(parse_file(e.path, e.bytes, e.crc32, path));
      if (e.index) add(parse_file(e.index->path, e.index->bytes, e.index->crc32, path));
    }
  }
  info.files.push_back({kManifest, bytes.size(), crc32(bytes.data(), bytes.size())});
  return m;
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

DatasetInfo read_dataset_info(const std::string& dir) { return load_manifest(dir).info; }

bool has_split(const std::string& dir, Split split) {
  const DatasetInfo info = read_dataset_info(dir);
  return std::find(info.splits.begin(), info.splits.end(), split_dir_name(split)) != info.splits.end();
}

namespace {
// verify-dataset on one file: there, a regular file, its size and its CRC-32.
std::optional<std::string> verify_file(const std::string& dir, const DatasetFile& f, DatasetVerifyResult& result) {
  const std::string path = (fs::path(dir) / f.path).string();
  result.files += 1;
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (!fs::exists(status)) return path + ": missing";
  if (!fs::is_regular_file(fs::status(path, ec))) return path + ": not a regular file (" + file_kind(path) + ")";
  const auto bytes = read_file(path);
  result.bytes += bytes.size();
  if (bytes.size() != f.bytes)
    return path + ": " + std::to_string(bytes.size()) + " bytes, the manifest says " + std::to_string(f.bytes);
  const std::uint32_t crc = crc32(bytes.data(), bytes.size());
  if (crc != f.crc32) return path + ": CRC-32 " + crc32_hex(crc) + ", the manifest says " + crc32_hex(f.crc32);
  return std::nullopt;
}
}  // namespace

DatasetVerifyResult verify_image_dataset(const std::string& dir) {
  // The manifest's own check first (the one train and loader-bench make), then every file.
  const Manifest m = load_manifest(dir);
  DatasetVerifyResult result;
  for (const auto& f : m.info.files) {
    if (f.path == kManifest) continue;
    if (auto problem = verify_file(dir, f, result)) result.problems.push_back(*problem);
  }
  if (!result.problems.empty()) return result;
  // Then every sample as a reader reads it: each record's header and CRC-32 in the shards layout.
  for (const auto& [name, split] : m.doc.splits) {
    try {
      const auto data = open_image_dataset(dir, name == "train" ? Split::train : Split::held_out);
      std::vector<unsigned char> bytes;
      for (std::int64_t i = 0; i < data->size(); ++i) data->read_sample(i, bytes);
    } catch (const Error& e) {
      result.problems.push_back(e.what());
    }
  }
  return result;
}

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
  if (info_.codec == ImageCodec::jpeg) text += " q" + std::to_string(info_.quality);
  text += " " + std::to_string(info_.image.height) + "px";
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
