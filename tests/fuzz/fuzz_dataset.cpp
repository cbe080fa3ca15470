// Fuzz target: the data-set reader. Three small data sets are written once (shards of JPEG
// records, shards of PNG records, and PNG files under class folders); each input replaces one
// file of one of them (the first byte, mod 4, picks the data set, the second the file: the
// manifest, a shard, its index or an image; a first byte of 3 mod 4 feeds the decoders alone,
// the second byte picking raw, PNG or JPEG and the size expected). With the second byte's top bit set, the manifest is
// resealed to match (each file's size and CRC-32, and its own CRC), as a careful forger would, so the input reaches the
// index and record checks and, in the files layout, the PNG decoder itself. Then everything a run and verify-dataset
// do: the manifest read, every file verified, both splits opened and every sample read and decoded.
#include <nlohmann/json.hpp>

#include <fstream>
#include <vector>

#include "engine/data/disk_dataset.h"
#include "engine/data/synthetic_images.h"
#include "engine/io/fileio.h"
#include "fuzz_util.h"

namespace {

using namespace trainlab;
namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// One data set as written: its files (relative path -> bytes), the manifest first.
struct Written {
  std::vector<std::pair<std::string, std::string>> files;
};

Written write(const fs::path& out, DiskLayout layout, ImageCodec codec) {
  const SyntheticImages train(7, Split::train, 12, 0), held_out(7, Split::held_out, 4, 0);
  DatasetWriteOptions o;
  o.out = out.string();
  o.layout = layout;
  o.codec = codec;
  o.shard_mb = 0.004;  // a few records per shard: several shards and indexes
  write_image_dataset(train, &held_out, o);
  Written w;
  w.files.emplace_back("manifest.json", read_text(out / "manifest.json"));
  for (const auto& entry : fs::recursive_directory_iterator(out)) {
    if (!entry.is_regular_file() || entry.path().filename() == "manifest.json") continue;
    w.files.emplace_back(fs::relative(entry.path(), out).string(), read_text(entry.path()));
  }
  return w;
}

// The manifest rewritten for the files as they are now.
void reseal(const fs::path& dir) {
  nlohmann::json manifest = nlohmann::json::parse(read_text(dir / "manifest.json"), nullptr, false);
  if (!manifest.is_object() || !manifest.contains("splits") || !manifest["splits"].is_object()) return;
  auto seal = [&](nlohmann::json& entry) {
    if (!entry.is_object() || !entry.contains("path") || !entry["path"].is_string()) return;
    const fs::path file = dir / entry["path"].get<std::string>();
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return;
    const std::string bytes = read_text(file);
    entry["bytes"] = bytes.size();
    entry["crc32"] = crc32_hex(crc32(bytes.data(), bytes.size()));
  };
  for (auto& [name, split] : manifest["splits"].items()) {
    if (!split.is_object() || !split.contains("files") || !split["files"].is_array()) continue;
    for (auto& file : split["files"]) {
      seal(file);
      if (file.is_object() && file.contains("index")) seal(file["index"]);
    }
  }
  manifest.erase("crc32");
  const std::string text = manifest.dump();
  manifest["crc32"] = crc32_hex(crc32(text.data(), text.size()));
  write_text(dir / "manifest.json", manifest.dump(1) + "\n");
}

struct Fixture {
  std::vector<Written> sets;
  fs::path work;
  Fixture() {
    const fs::path root = fuzz::scratch();
    sets.push_back(write(root / "shards-jpeg", DiskLayout::shards, ImageCodec::jpeg));
    sets.push_back(write(root / "shards-png", DiskLayout::shards, ImageCodec::png));
    sets.push_back(write(root / "files-png", DiskLayout::files, ImageCodec::png));
    work = root / "work";
  }
};

void read_everything(const std::string& dir) {
  fuzz::expect_error_or_success([&] { read_dataset_info(dir); });
  fuzz::expect_error_or_success([&] { verify_image_dataset(dir); });
  for (Split split : {Split::train, Split::held_out}) {
    fuzz::expect_error_or_success([&] {
      DiskReadOptions options;
      options.augment = split == Split::train ? Augment::crop_flip : Augment::none;
      const auto data = open_image_dataset(dir, split, options);
      std::vector<float> sample(static_cast<std::size_t>(shape_numel(data->sample_shape())));
      std::vector<unsigned char> bytes;
      for (std::int64_t i = 0; i < std::min<std::int64_t>(data->size(), 32); ++i) {
        fuzz::expect_error_or_success([&] { data->get_in_epoch(i, 1, sample.data(), nullptr); });
        fuzz::expect_error_or_success([&] { data->read_sample(i, bytes); });
      }
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture fixture;
  if (size < 2) return 0;
  if (data[0] % 4 == 3) {  // the decoders alone, at one of three expected sizes
    const ImageCodec codec = data[1] % 3 == 0 ? ImageCodec::raw : data[1] % 3 == 1 ? ImageCodec::png : ImageCodec::jpeg;
    const ImageSize sizes[] = {{32, 32, 3}, {16, 16, 1}, {64, 64, 3}};
    const ImageSize expected = sizes[(data[1] / 3) % 3];
    std::vector<unsigned char> pixels(expected.bytes());
    fuzz::expect_error_or_success([&] { decode_image(codec, data + 2, size - 2, expected, pixels.data()); });
    return 0;
  }
  const Written& set = fixture.sets[data[0] % 4];
  std::error_code ec;
  fs::remove_all(fixture.work, ec);
  for (const auto& [path, bytes] : set.files) {
    fs::create_directories((fixture.work / path).parent_path());
    write_text(fixture.work / path, bytes);
  }
  const std::string& replaced = set.files[(data[1] & 0x7f) % set.files.size()].first;
  write_text(fixture.work / replaced, std::string(reinterpret_cast<const char*>(data) + 2, size - 2));
  if ((data[1] & 0x80) != 0 && replaced != "manifest.json") reseal(fixture.work);
  read_everything(fixture.work.string());
  return 0;
}
