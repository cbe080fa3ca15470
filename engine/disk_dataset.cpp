#include "engine/disk_dataset.h"

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
#include <nlohmann/json.hpp>

#include "engine/fileio.h"
#include "engine/rng.h"
#include "engine/version.h"

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
constexpr int kFormatVersion = 1;
constexpr std::uint32_t kRecordMagic = 0x31524c54;  // "TLR1" little-endian
constexpr std::size_t kRecordHeader = 16;
constexpr std::uint64_t kMaxManifestBytes = 1ull << 30;
constexpr std::uint32_t kMaxRecordBytes = 64u << 20;

struct RecordHeader {
  std::uint32_t magic, label, bytes, crc;
};
static_assert(sizeof(RecordHeader) == kRecordHeader);

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

json file_entry(const std::string& rel, const OutFile& f) {
  return json{{"path", rel}, {"bytes", f.bytes()}, {"crc32", crc32_hex(f.crc())}};
}

bool is_our_dataset(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kManifest, ec)) return false;
  try {
    const auto bytes = read_file((dir / kManifest).string(), kMaxManifestBytes);
    const json m = json::parse(bytes.begin(), bytes.end());
    return m.value("format", "") == kFormat;
  } catch (const std::exception&) {
    return false;
  }
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

SplitSummary write_split(const Dataset& data, const std::string& name, const fs::path& root, const ImageSize source,
                         int factor, const PixelMap& map, const DatasetWriteOptions& o, json& entry) {
  SplitSummary summary;
  summary.name = name;
  const ImageSize stored{source.height * factor, source.width * factor, source.channels};
  fs::create_directories(root / name);
  std::vector<float> sample(static_cast<std::size_t>(data.sample_elements()));
  std::vector<unsigned char> pixels;
  json files = json::array();
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
    json e = file_entry(shard_rel, *shard);
    e["first"] = shard_first;
    e["samples"] = next - shard_first;
    e["index"] = file_entry(index_rel, index);
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
    const auto encoded = encode_image(o.codec, pixels.data(), stored, o.quality);
    if (o.layout == DiskLayout::files) {
      char rel[64];
      std::snprintf(rel, sizeof rel, "%s/%lld/%08lld%s", name.c_str(), static_cast<long long>(label),
                    static_cast<long long>(i), image_codec_extension(o.codec));
      fs::create_directories((root / rel).parent_path());
      OutFile f((root / rel).string());
      f.write(encoded.data(), encoded.size());
      f.close();
      json e = file_entry(rel, f);
      e["label"] = label;
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
      const RecordHeader h{kRecordMagic, static_cast<std::uint32_t>(label), static_cast<std::uint32_t>(encoded.size()),
                           crc32(encoded.data(), encoded.size())};
      shard->write(&h, sizeof h);
      shard->write(encoded.data(), encoded.size());
    }
    summary.samples += 1;
    progress.tick(name, i + 1, data.size(), summary.bytes + (shard ? shard->bytes() : 0));
  }
  close_shard(data.size());
  entry = json{{"samples", summary.samples}, {"bytes", summary.bytes}, {"source", data.describe()}, {"files", files}};
  return summary;
}

}  // namespace

namespace {
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

  // Never replace what is not ours: `out` must not exist, be an empty directory, or (with
  // overwrite) hold a data set an earlier make-dataset wrote.
  // The directory itself ("new/" and "." name it too: without the trailing separator, its staging
  // would have been made inside it).
  fs::path out = fs::absolute(o.out).lexically_normal();
  while (out.filename().empty() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  TL_CHECK(out != out.root_path(), "make-dataset: --out " + quote_value(o.out) + " is the root directory");
  std::error_code ec;
  const auto status = fs::symlink_status(out, ec);
  bool replace = false;
  if (fs::exists(status)) {
    TL_CHECK(fs::is_directory(status), "make-dataset: --out " + out.string() + " exists and is not a directory");
    if (!fs::is_empty(out)) {
      TL_CHECK(is_our_dataset(out), "make-dataset: --out " + out.string() +
                                        " is a directory with files that are not a trainlab data set; "
                                        "choose a new or empty directory");
      TL_CHECK(o.overwrite,
               "make-dataset: --out " + out.string() + " already holds a data set; pass --overwrite to replace it");
      replace = true;
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
    const PixelMap map = choose_pixel_map(train);
    json manifest = {{"format", kFormat},
                     {"version", kFormatVersion},
                     {"writer", "trainlab " + version() + " (" + git_describe() + ")"},
                     {"source", train.describe()},
                     {"layout", disk_layout_name(o.layout)},
                     {"codec", image_codec_name(o.codec)},
                     {"quality", o.codec == ImageCodec::jpeg ? o.quality : 0},
                     {"image", {{"height", stored}, {"width", stored}, {"channels", source.channels}}},
                     {"classes", train.num_classes()},
                     {"pixels", {{"scale", map.scale}, {"offset", map.offset}}}};
    json splits = json::object();
    summary.splits.push_back(write_split(train, "train", tmp, source, factor, map, o, splits["train"]));
    if (held_out)
      summary.splits.push_back(write_split(*held_out, "held_out", tmp, source, factor, map, o, splits["held_out"]));
    manifest["splits"] = splits;
    // Everything on storage before the manifest that says it is complete.
    const int dir_fd = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    TL_CHECK(dir_fd >= 0 && ::syncfs(dir_fd) == 0, "make-dataset: cannot sync " + tmp.string());
    ::close(dir_fd);
    write_file_atomic((tmp / kManifest).string(), manifest.dump(1) + "\n");
    fs::remove(tmp / kStagingMark, ec);
    if (replace) {
      const fs::path old = parent / (out.filename().string() + ".old-" + std::to_string(::getpid()));
      fs::rename(out, old);
      fs::rename(tmp, out);
      fs::remove_all(old);
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

std::uint32_t parse_crc(const json& v, const std::string& where) {
  const std::string text = v.get<std::string>();
  TL_CHECK(text.size() == 8 && text.find_first_not_of("0123456789abcdef") == std::string::npos,
           where + ": CRC-32 " + quote_value(text) + " is not 8 hex digits");
  return static_cast<std::uint32_t>(std::stoul(text, nullptr, 16));
}

DatasetFile parse_file(const json& e, const std::string& where) {
  DatasetFile f;
  f.path = e.at("path").get<std::string>();
  TL_CHECK(!f.path.empty() && f.path[0] != '/' && f.path.find("..") == std::string::npos,
           where + ": file path " + quote_value(f.path) + " is not inside the data set");
  f.bytes = e.at("bytes").get<std::uint64_t>();
  f.crc32 = parse_crc(e.at("crc32"), where);
  return f;
}

struct Manifest {
  DatasetInfo info;
  json splits;
};

Manifest load_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::error_code ec;
  TL_CHECK(fs::is_directory(dir, ec), "data set " + quote_value(dir) + " is not a directory");
  TL_CHECK(fs::exists(path, ec), "data set " + dir + " has no " + kManifest +
                                     " (written last by trainlab make-dataset: an incomplete or foreign directory)");
  const auto bytes = read_file(path, kMaxManifestBytes);
  check_json_bounds(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 16, kMaxManifestBytes, path);
  Manifest m;
  try {
    const json j = json::parse(bytes.begin(), bytes.end());
    TL_CHECK(j.value("format", "") == kFormat,
             path + " is not a trainlab data set manifest (format " + quote_value(j.value("format", "")) + ")");
    TL_CHECK(j.at("version").get<int>() == kFormatVersion,
             path + ": manifest version " + std::to_string(j.at("version").get<int>()) + " (this trainlab reads " +
                 std::to_string(kFormatVersion) + ")");
    DatasetInfo& info = m.info;
    info.dir = dir;
    info.source = j.at("source").get<std::string>();
    info.layout = parse_disk_layout(j.at("layout").get<std::string>());
    info.codec = parse_image_codec(j.at("codec").get<std::string>());
    info.quality = j.at("quality").get<int>();
    info.image = {j.at("image").at("height").get<int>(), j.at("image").at("width").get<int>(),
                  j.at("image").at("channels").get<int>()};
    TL_CHECK(info.image.height >= 1 && info.image.height <= 65535 && info.image.width == info.image.height &&
                 (info.image.channels == 1 || info.image.channels == 3),
             path + ": image size is not square HxHxC with C 1 or 3");
    info.classes = j.at("classes").get<std::int64_t>();
    TL_CHECK(info.classes >= 1 && info.classes <= 1 << 24, path + ": classes out of range");
    info.pixel_scale = j.at("pixels").at("scale").get<double>();
    info.pixel_offset = j.at("pixels").at("offset").get<double>();
    TL_CHECK(std::isfinite(info.pixel_scale) && info.pixel_scale > 0 && std::isfinite(info.pixel_offset),
             path + ": the pixel map is not finite and positive");
    m.splits = j.at("splits");
    for (const auto& [name, split] : m.splits.items()) {
      info.splits.push_back(name);
      for (const auto& e : split.at("files")) {
        info.files.push_back(parse_file(e, path));
        if (e.contains("index")) info.files.push_back(parse_file(e.at("index"), path));
      }
    }
    info.files.push_back({kManifest, bytes.size(), crc32(bytes.data(), bytes.size())});
  } catch (const json::exception& e) {
    throw Error(path + " is not a valid manifest: " + e.what());
  }
  return m;
}

// Opens `path` for reading and checks it is the size the manifest says (a truncated or extended
// file is refused here, before any sample is read).
int open_checked(const std::string& dir, const DatasetFile& f) {
  const std::string path = (fs::path(dir) / f.path).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TL_CHECK(fd >= 0, "data set " + dir + ": cannot open " + f.path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != f.bytes) {
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

class ShardDataset final : public EncodedImageDataset {
 public:
  ShardDataset(DatasetInfo info, Split split, const DiskReadOptions& options, const json& entry)
      : EncodedImageDataset(std::move(info), split, options) {
    const std::string& dir = info_.dir;
    std::int64_t next = 0;
    for (const auto& e : entry.at("files")) {
      Shard s;
      s.file = parse_file(e, dir);
      s.first = e.at("first").get<std::int64_t>();
      const std::int64_t count = e.at("samples").get<std::int64_t>();
      TL_CHECK(s.first == next && count >= 1,
               "data set " + dir + ": " + s.file.path + " does not follow the shard before it");
      next += count;
      const DatasetFile index = parse_file(e.at("index"), dir);
      TL_CHECK(index.bytes == static_cast<std::uint64_t>(count) * 8, "data set " + dir + ": " + index.path + " holds " +
                                                                         std::to_string(index.bytes) + " bytes for " +
                                                                         std::to_string(count) + " records");
      const int index_fd = open_checked(dir, index);
      s.offsets.resize(static_cast<std::size_t>(count));
      try {
        pread_all(index_fd, s.offsets.data(), index.bytes, 0, "data set " + dir + ": " + index.path);
      } catch (...) {
        ::close(index_fd);
        throw;
      }
      ::close(index_fd);
      TL_CHECK(crc32(s.offsets.data(), index.bytes) == index.crc32,
               "data set " + dir + ": " + index.path + ": CRC-32 differs from the manifest's (corrupted)");
      s.fd = open_checked(dir, s.file);
      split_paths_.push_back((fs::path(dir) / index.path).string());
      split_paths_.push_back((fs::path(dir) / s.file.path).string());
      shards_.push_back(std::move(s));
    }
    TL_CHECK(next == entry.at("samples").get<std::int64_t>(),
             "data set " + dir + ": the shards hold " + std::to_string(next) + " samples, the manifest says " +
                 std::to_string(entry.at("samples").get<std::int64_t>()));
    set_size(next);
  }
  ~ShardDataset() override {
    for (auto& s : shards_)
      if (s.fd >= 0) ::close(s.fd);
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
    TL_CHECK(offset + kRecordHeader <= s.file.bytes, what + ": the index points past the end of the shard");
    RecordHeader h{};
    pread_all(s.fd, &h, sizeof h, offset, what);
    TL_CHECK(h.magic == kRecordMagic, what + ": no record header there (corrupted)");
    TL_CHECK(h.bytes <= kMaxRecordBytes && offset + kRecordHeader + h.bytes <= s.file.bytes,
             what + ": the record's length " + std::to_string(h.bytes) + " runs past the end of the shard (corrupted)");
    bytes.resize(h.bytes);
    pread_all(s.fd, bytes.data(), h.bytes, offset + kRecordHeader, what);
    const std::uint32_t crc = crc32(bytes.data(), bytes.size());
    TL_CHECK(crc == h.crc, what + ": the image's CRC-32 is " + crc32_hex(crc) + ", the record says " +
                               crc32_hex(h.crc) + " (corrupted; trainlab verify-dataset " + info_.dir +
                               " checks every file)");
    return h.label;
  }

 private:
  struct Shard {
    DatasetFile file;
    std::int64_t first = 0;
    std::vector<std::uint64_t> offsets;
    int fd = -1;
  };
  std::vector<Shard> shards_;
};

class ImageFolderDataset final : public EncodedImageDataset {
 public:
  ImageFolderDataset(DatasetInfo info, Split split, const DiskReadOptions& options, const json& entry)
      : EncodedImageDataset(std::move(info), split, options) {
    for (const auto& e : entry.at("files")) {
      Sample s{parse_file(e, info_.dir), e.at("label").get<std::int64_t>()};
      TL_CHECK(s.label >= 0 && s.label < info_.classes, "data set " + info_.dir + ": " + s.file.path + " has label " +
                                                            std::to_string(s.label) + ", outside [0, " +
                                                            std::to_string(info_.classes) + ")");
      split_paths_.push_back((fs::path(info_.dir) / s.file.path).string());
      samples_.push_back(std::move(s));
    }
    // Every file is there and has its size: a missing or truncated file is refused before the run.
    for (const auto& s : samples_) ::close(open_checked(info_.dir, s.file));
    set_size(static_cast<std::int64_t>(samples_.size()));
  }

 protected:
  std::int64_t read_encoded(std::int64_t index, std::vector<unsigned char>& bytes) const override {
    const Sample& s = samples_[static_cast<std::size_t>(index)];
    const std::string what = where(index) + " (" + s.file.path + ")";
    const int fd = open_checked(info_.dir, s.file);
    bytes.resize(s.file.bytes);
    try {
      pread_all(fd, bytes.data(), bytes.size(), 0, what);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
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

DatasetVerifyResult verify_image_dataset(const std::string& dir) {
  const DatasetInfo info = read_dataset_info(dir);
  DatasetVerifyResult result;
  for (const auto& f : info.files) {
    if (f.path == kManifest) continue;
    const std::string path = (fs::path(dir) / f.path).string();
    result.files += 1;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      result.problems.push_back(f.path + ": missing");
      continue;
    }
    const auto bytes = read_file(path);
    result.bytes += bytes.size();
    if (bytes.size() != f.bytes) {
      result.problems.push_back(f.path + ": " + std::to_string(bytes.size()) + " bytes, the manifest says " +
                                std::to_string(f.bytes));
      continue;
    }
    const std::uint32_t crc = crc32(bytes.data(), bytes.size());
    if (crc != f.crc32)
      result.problems.push_back(f.path + ": CRC-32 " + crc32_hex(crc) + ", the manifest says " + crc32_hex(f.crc32));
  }
  return result;
}

EncodedImageDataset::EncodedImageDataset(DatasetInfo info, Split split, const DiskReadOptions& options)
    : info_(std::move(info)), split_(split), options_(options) {
  output_size_ = options.output_size == 0 ? info_.image.height : options.output_size;
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
        dest[(static_cast<std::size_t>(ch) * o + y) * o + x] =
            static_cast<float>((sum - info_.pixel_offset * f * f) * inv);
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
  TL_CHECK(
      m.splits.contains(name), "data set " + dir + " has no " + name + " split (it has: " + [&] {
        std::string all;
        for (const auto& s : m.info.splits) all += (all.empty() ? "" : ", ") + s;
        return all;
      }() + ")");
  try {
    const json& entry = m.splits.at(name);
    if (m.info.layout == DiskLayout::shards)
      return std::make_shared<ShardDataset>(std::move(m.info), split, options, entry);
    return std::make_shared<ImageFolderDataset>(std::move(m.info), split, options, entry);
  } catch (const json::exception& e) {
    throw Error("data set " + dir + ": the manifest's " + name + " split is not valid: " + e.what());
  }
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
