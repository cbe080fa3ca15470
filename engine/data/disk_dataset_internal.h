// What the image data set's writer (disk_dataset_write.cpp), its manifest's reader
// (disk_dataset_manifest.cpp) and its sample readers (disk_dataset.cpp) share: the format's
// constants, the record header and the manifest, typed. Private to engine/data/: nothing outside
// these three files includes it (the public interface is engine/data/disk_dataset.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/dataset_dir.h"
#include "engine/data/disk_dataset.h"
#include "engine/io/fileio.h"

namespace trainlab::disk_format {

using dataset_dir::kManifest;
constexpr const char* kDatasetFormat = "trainlab-image-dataset";
// Version 2: the manifest carries its own CRC-32, and a record's CRC-32 covers its sample's index,
// its label and its length as well as the image (a label changed in a header, or a shard swapped
// for another of the same size, is caught where it is read). Version 3 (imports): the sample size
// a reader gives back, the class names, the per-channel mean and standard deviation the reader
// standardises with, and per split the source files skipped. A version 2 data set (SyntheticImages
// only, stored at a multiple of 32) reads as before: 32x32 samples, no names, no standardising.
constexpr int kFormatVersion = 3, kOldestVersion = 2;
constexpr std::uint32_t kRecordMagic = 0x32524c54;  // "TLR2" little-endian
constexpr std::size_t kRecordHeader = 16;
constexpr std::uint32_t kMaxRecordBytes = 64u << 20;
constexpr double kMaxPixelMap = 1e6;  // |scale| and |offset| of the value map

struct RecordHeader {
  std::uint32_t magic, label, bytes, crc;
};
static_assert(sizeof(RecordHeader) == kRecordHeader);

// A record's CRC-32: the sample's index in its split, its label and its length, then the image.
inline std::uint32_t record_crc(std::int64_t index, std::uint32_t label, const unsigned char* image,
                                std::uint32_t bytes) {
  unsigned char head[16];
  const auto i = static_cast<std::uint64_t>(index);
  std::memcpy(head, &i, 8);
  std::memcpy(head + 8, &label, 4);
  std::memcpy(head + 12, &bytes, 4);
  return crc32(image, bytes, crc32(head, sizeof head));
}

// ---- the manifest, typed (engine/io/fields.h): one list of keys reads and writes it ----------------

using ManifestIndex = dataset_dir::ManifestFileRef;  // a shard's offset index
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

inline std::string split_dir_name(Split split) { return split == Split::train ? "train" : "held_out"; }

// The manifest, read and checked: everything train, loader-bench and verify-dataset rely on is
// checked here, once, for all of them (its own CRC-32; the layout, codec, image size and pixel map
// within their limits; every split's files consistent with its sample count; labels in range and,
// in the files layout, in their class folder; every path inside the data set and listed once).
struct Manifest {
  DatasetInfo info;
  ManifestDoc doc;
};
Manifest load_manifest(const std::string& dir);

// A file entry of the manifest, checked: its path inside the data set, its CRC-32 8 hex digits.
DatasetFile parse_file(const std::string& path, std::uint64_t bytes, const std::string& crc, const std::string& where);

// The manifest's JSON as make-dataset writes it, its own CRC-32 included.
std::string manifest_text(const ManifestDoc& doc);

}  // namespace trainlab::disk_format
