// The image data set's manifest, read and checked (the one check train, loader-bench and
// verify-dataset all rely on) and serialised for make-dataset; verify-dataset's walk over every
// file and sample against it.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "engine/data/dataset_dir.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/disk_dataset_internal.h"
#include "engine/io/fields.h"
#include "engine/io/fileio.h"
#include "engine/io/text.h"

namespace trainlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace disk_format {

namespace {

using dataset_dir::manifest_crc;
using dataset_dir::parse_crc;

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
    check_class_names(*doc.class_names, path + ": class_names/");
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

}  // namespace

DatasetFile parse_file(const std::string& path, std::uint64_t bytes, const std::string& crc, const std::string& where) {
  DatasetFile f;
  f.path = path;
  TL_CHECK(!f.path.empty() && f.path[0] != '/' && f.path.find("..") == std::string::npos,
           where + ": file path " + quote_value(f.path) + " is not inside the data set");
  f.bytes = bytes;
  f.crc32 = parse_crc(crc, where + ": " + f.path);
  return f;
}

std::string manifest_text(const ManifestDoc& doc) { return dataset_dir::manifest_text(fields::to_json(doc)); }

Manifest load_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  const dataset_dir::ManifestRead read =
      dataset_dir::read_manifest(dir, kDatasetFormat, kOldestVersion, kFormatVersion);
  const json& j = read.json;
  Manifest m;
  try {
    m.doc = fields::from_json<ManifestDoc>(j);
  } catch (const fields::FieldError& e) {
    throw Error(path + ": " + e.what());
  }
  const ManifestDoc& doc = m.doc;
  dataset_dir::check_manifest_crc(j, doc.crc32, path);
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
  info.files.push_back(read.file);
  return m;
}

}  // namespace disk_format

using namespace disk_format;

void check_class_names(const std::vector<std::string>& names, const std::string& where) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const std::size_t bad = invalid_utf8_offset(name);
    TL_CHECK(!name.empty() && name.size() <= 255 && bad == std::string::npos,
             where + std::to_string(i) + " is " + quote_value(escape_invalid_utf8(name)) + ": " +
                 (name.empty()               ? std::string("empty")
                  : bad != std::string::npos ? "not UTF-8 (byte " + std::to_string(bad) + ")"
                                             : std::to_string(name.size()) + " bytes long") +
                 "; a class name is 1..255 bytes of UTF-8");
  }
}

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

}  // namespace trainlab
