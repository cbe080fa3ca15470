// Writing an image data set (trainlab make-dataset): samples quantised to 8-bit pixels by one
// value map, encoded, laid into shards or one file per sample in a staging directory beside the
// data set's, the manifest written last, then renamed into place.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/dataset_dir.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/disk_dataset_internal.h"
#include "engine/io/fileio.h"
#include "engine/io/progress.h"
#include "engine/io/text.h"
#include "engine/io/version.h"

namespace trainlab {

namespace fs = std::filesystem;
using namespace disk_format;

namespace {

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
  ThrottledProgress progress(o.progress);
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
    progress.tick(i + 1, static_cast<std::int64_t>(data.size()), [&] {
      char line[160];
      std::snprintf(line, sizeof line, "make-dataset: %s %lld/%lld samples, %.1f MiB", name.c_str(),
                    static_cast<long long>(i + 1), static_cast<long long>(data.size()),
                    static_cast<double>(summary.bytes + (shard ? shard->bytes() : 0)) / (1 << 20));
      return std::string(line);
    });
  }
  close_shard(data.size());
  entry.samples = summary.samples;
  entry.bytes = summary.bytes;
  entry.source = data.describe();
  if (const auto it = o.skipped.find(name); it != o.skipped.end()) entry.skipped = it->second;
  return summary;
}

// The source's image size, the stored one and the factor between them, from the training split's
// samples and the options, checked.
struct WriteGeometry {
  ImageSize source;
  int stored = 0, factor = 1;
};

WriteGeometry check_write_request(const Dataset& train, const Dataset* held_out, const DatasetWriteOptions& o) {
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
  check_class_names(o.class_names, "make-dataset: class name ");
  return {source, stored, factor};
}

// What the manifest says of the whole data set; its splits (and the standardisation) come as they
// are written.
ManifestDoc manifest_head(const Dataset& train, const DatasetWriteOptions& o, const WriteGeometry& g,
                          const PixelMap& map) {
  ManifestDoc doc;
  doc.format = kDatasetFormat;
  doc.version = kFormatVersion;
  doc.writer = "trainlab " + version() + " (" + git_describe() + ")";
  doc.source = escape_invalid_utf8(o.source.empty() ? train.describe() : o.source);  // a path's bytes
  doc.layout = disk_layout_name(o.layout);
  doc.codec = image_codec_name(o.codec);
  doc.quality = o.codec == ImageCodec::jpeg ? o.quality : 0;
  doc.image = {g.stored, g.stored, g.source.channels};
  doc.sample_size = g.source.height;
  doc.classes = train.num_classes();
  if (!o.class_names.empty()) doc.class_names = o.class_names;
  doc.pixels = {map.scale, map.offset};
  return doc;
}

}  // namespace

DatasetWriteSummary write_image_dataset(const Dataset& train, const Dataset* held_out, const DatasetWriteOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const WriteGeometry g = check_write_request(train, held_out, o);
  dataset_dir::StagedWrite write(o.out, o.overwrite);
  const fs::path& tmp = write.staging();
  DatasetWriteSummary summary;
  const PixelMap map = o.unit_values ? PixelMap{255, 0} : choose_pixel_map(train);
  ManifestDoc doc = manifest_head(train, o, g, map);
  ChannelStats stats;
  summary.splits.push_back(write_split(train, "train", tmp, g.source, g.factor, map, o, doc.splits["train"],
                                       o.normalize ? &stats : nullptr));
  if (o.normalize) doc.normalize = stats.normalize();
  if (held_out)
    summary.splits.push_back(
        write_split(*held_out, "held_out", tmp, g.source, g.factor, map, o, doc.splits["held_out"], nullptr));
  summary.kept = write.commit(manifest_text(doc));
  summary.out = write.out().string();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace trainlab
