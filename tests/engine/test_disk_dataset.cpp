// Data sets on disk (engine/data/image_codec.h, engine/data/disk_dataset.h): codec round trips against the raw
// pixels, corruption and truncation named by file and sample, the manifest's checksums, the
// distributed sampler over files, augmentation on the fly.
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/data/disk_dataset.h"
#include "engine/data/image_codec.h"
#include "engine/data/loader.h"
#include "engine/io/fileio.h"
#include "test_util.h"

using namespace trainlab;
using trainlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A 32x32x3 byte image from SyntheticImages' sample 0 (the kind of image the data sets hold).
std::vector<unsigned char> sample_pixels(std::int64_t index, int channels = 3) {
  const SyntheticImages data(7, Split::train, 16);
  std::vector<float> sample(static_cast<std::size_t>(data.sample_elements()));
  data.get(index, sample.data());
  std::vector<unsigned char> pixels(32 * 32 * static_cast<std::size_t>(channels));
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < channels; ++c) {
        const double v = std::round(sample[static_cast<std::size_t>((c * 32 + y) * 32 + x)] * 10 + 128);
        pixels[static_cast<std::size_t>((y * 32 + x) * channels + c)] =
            static_cast<unsigned char>(std::clamp(v, 0.0, 255.0));
      }
  return pixels;
}

void flip_byte(const std::string& path, std::uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

void truncate_to(const std::string& path, std::uint64_t bytes) { fs::resize_file(path, bytes); }

DatasetWriteOptions options_for(const std::string& out, DiskLayout layout, ImageCodec codec) {
  DatasetWriteOptions o;
  o.out = out;
  o.layout = layout;
  o.codec = codec;
  o.shard_mb = 0.05;  // several shards for a small data set
  return o;
}

std::string first_file(const DatasetInfo& info, const std::string& prefix, const std::string& suffix) {
  for (const auto& f : info.files)
    if (f.path.rfind(prefix, 0) == 0 && f.path.size() > suffix.size() &&
        f.path.compare(f.path.size() - suffix.size(), suffix.size(), suffix) == 0)
      return f.path;
  FAIL("no file " << prefix << "*" << suffix);
  return {};
}

}  // namespace

TEST_CASE("image codecs: lossless round trips are exact, JPEG within its stated PSNR", "[disk]") {
  for (int channels : {1, 3}) {
    const auto pixels = sample_pixels(0, channels);
    const ImageSize size{32, 32, channels};
    for (ImageCodec codec : {ImageCodec::raw, ImageCodec::png}) {
      const auto encoded = encode_image(codec, pixels.data(), size, 90);
      std::vector<unsigned char> decoded(size.bytes());
      decode_image(codec, encoded.data(), encoded.size(), size, decoded.data());
      CHECK(decoded == pixels);
    }
    // 4:4:4 JPEG of these noisy images (pixel noise of ~40 levels, which JPEG's quantisation is
    // made to drop, most of all in the chroma planes): at least 20 / 28 / 40 dB at quality 75 / 90 /
    // 98 (measured 21.8 / 29.8 / 43.0 dB in colour, 28.6 / 36.3 / 49.6 in grey); higher quality never
    // loses PSNR.
    double previous = 0;
    for (auto [quality, floor_db] : {std::pair{75, 20.0}, std::pair{90, 28.0}, std::pair{98, 40.0}}) {
      const auto encoded = encode_image(ImageCodec::jpeg, pixels.data(), size, quality);
      std::vector<unsigned char> decoded(size.bytes());
      decode_image(ImageCodec::jpeg, encoded.data(), encoded.size(), size, decoded.data());
      const double db = psnr_db(pixels.data(), decoded.data(), pixels.size());
      INFO("channels " << channels << ", quality " << quality << ": " << db << " dB, " << encoded.size() << " bytes");
      CHECK(db >= floor_db);
      CHECK(db >= previous);
      previous = db;
    }
  }
}

TEST_CASE("image codecs: a truncated, corrupted or mis-sized image is an error, never a partial image", "[disk]") {
  const auto pixels = sample_pixels(1);
  const ImageSize size{32, 32, 3};
  std::vector<unsigned char> out(size.bytes());
  for (ImageCodec codec : {ImageCodec::jpeg, ImageCodec::png, ImageCodec::raw}) {
    INFO(image_codec_name(codec));
    const auto encoded = encode_image(codec, pixels.data(), size, 90);
    std::vector<unsigned char> cut(encoded.begin(),
                                   encoded.begin() + static_cast<std::ptrdiff_t>(encoded.size() * 2 / 3));
    CHECK_THROWS_AS(decode_image(codec, cut.data(), cut.size(), size, out.data()), Error);
    CHECK_THROWS_AS(decode_image(codec, encoded.data(), encoded.size(), ImageSize{16, 16, 3}, out.data()), Error);
  }
  // Damage in the middle of the compressed data: libpng's CRC and libjpeg's warnings are errors.
  auto png = encode_image(ImageCodec::png, pixels.data(), size, 0);
  png[png.size() / 2] ^= 0xff;
  REQUIRE_THROWS_CONTAINING(decode_image(ImageCodec::png, png.data(), png.size(), size, out.data()), "PNG");
  std::vector<unsigned char> garbage(300, 0x42);
  REQUIRE_THROWS_CONTAINING(decode_image(ImageCodec::jpeg, garbage.data(), garbage.size(), size, out.data()), "JPEG");
  REQUIRE_THROWS_CONTAINING(parse_image_codec("webp"), "'webp'", "raw | png | jpeg");
}

TEST_CASE("data set on disk: both layouts give back the source's samples to within a quantisation step", "[disk]") {
  TempDir tmp("disk-roundtrip");
  const SyntheticImages train(3, Split::train, 40), held_out(3, Split::held_out, 12);
  for (DiskLayout layout : {DiskLayout::shards, DiskLayout::files}) {
    for (ImageCodec codec : {ImageCodec::raw, ImageCodec::png}) {
      const std::string dir = tmp / (std::string(disk_layout_name(layout)) + "-" + image_codec_name(codec));
      INFO(dir);
      const auto summary = write_image_dataset(train, &held_out, options_for(dir, layout, codec));
      REQUIRE(summary.splits.size() == 2);
      CHECK(summary.splits[0].samples == 40);
      if (layout == DiskLayout::shards) CHECK(summary.splits[0].files > 2);  // several shards and their indexes
      if (layout == DiskLayout::files) CHECK(summary.splits[0].files == 40);
      const auto data = open_image_dataset(dir, Split::train);
      CHECK(data->size() == 40);
      CHECK(data->sample_shape() == Shape({3, 32, 32}));
      CHECK(data->num_classes() == 10);
      const double step = 1.0 / data->info().pixel_scale;
      std::vector<float> want(3 * 32 * 32), got(3 * 32 * 32);
      std::int64_t clipped = 0;
      for (std::int64_t i = 0; i < 40; ++i) {
        CHECK(data->get(i, got.data()) == train.get(i, want.data()));
        for (std::size_t k = 0; k < want.size(); ++k) {
          const double err = std::abs(static_cast<double>(got[k]) - want[k]);
          if (err > 0.5 * step + 1e-4) ++clipped;  // outside mean +- 4 sd: clamped to 0 or 255
        }
      }
      CHECK(clipped < 40 * 3072 / 1000);  // under 0.1% of the values
      CHECK(open_image_dataset(dir, Split::held_out)->size() == 12);
      CHECK(verify_image_dataset(dir).problems.empty());
    }
  }
}

TEST_CASE("data set on disk: a larger stored size is box-filtered back, JPEG stays close", "[disk]") {
  TempDir tmp("disk-resize");
  const SyntheticImages train(5, Split::train, 8);
  auto o = options_for(tmp / "big", DiskLayout::shards, ImageCodec::jpeg);
  o.image_size = 64;
  o.quality = 95;
  write_image_dataset(train, nullptr, o);
  CHECK(read_dataset_info(tmp / "big").image.height == 64);
  DiskReadOptions r;
  r.output_size = 32;
  const auto data = open_image_dataset(tmp / "big", Split::train, r);
  CHECK(data->sample_shape() == Shape({3, 32, 32}));
  std::vector<float> want(3072), got(3072);
  double dot = 0, ww = 0, gg = 0;
  for (std::int64_t i = 0; i < 8; ++i) {
    data->get(i, got.data());
    train.get(i, want.data());
    for (std::size_t k = 0; k < want.size(); ++k) {
      dot += static_cast<double>(want[k]) * got[k];
      ww += static_cast<double>(want[k]) * want[k];
      gg += static_cast<double>(got[k]) * got[k];
    }
  }
  // Bilinear up, box down and JPEG's loss blur the pixel noise; the images stay the same images.
  CHECK(dot / std::sqrt(ww * gg) > 0.8);
  r.output_size = 24;
  REQUIRE_THROWS_CONTAINING(open_image_dataset(tmp / "big", Split::train, r), "24 does not divide");
  CHECK_FALSE(has_split(tmp / "big", Split::held_out));
  REQUIRE_THROWS_CONTAINING(open_image_dataset(tmp / "big", Split::held_out), "no held_out split", "train");
}

TEST_CASE("data set on disk: truncation and corruption name the file and the sample", "[disk]") {
  TempDir tmp("disk-corrupt");
  const SyntheticImages train(3, Split::train, 30);
  std::vector<float> out(3072);
  SECTION("shards") {
    const std::string dir = tmp / "shards";
    write_image_dataset(train, nullptr, options_for(dir, DiskLayout::shards, ImageCodec::jpeg));
    const DatasetInfo info = read_dataset_info(dir);
    const std::string shard = first_file(info, "train/shard-", ".tlrec");
    // A byte inside the first record's image: the read names the shard, the record and the sample.
    flip_byte(fs::path(dir) / shard, 16 + 40);
    {
      const auto data = open_image_dataset(dir, Split::train);
      REQUIRE_THROWS_CONTAINING(data->get(0, out.data()), shard.c_str(), "train sample 0", "record 0", "CRC-32");
      data->get(1, out.data());  // the other records are intact
    }
    const auto verify = verify_image_dataset(dir);
    REQUIRE(verify.problems.size() == 1);
    CHECK(verify.problems[0].find(shard) != std::string::npos);
    // A truncated shard is refused when the data set is opened, before any step.
    truncate_to(fs::path(dir) / shard, 100);
    REQUIRE_THROWS_CONTAINING(open_image_dataset(dir, Split::train), shard.c_str(), "100 bytes", "truncated");
  }
  SECTION("files") {
    const std::string dir = tmp / "files";
    write_image_dataset(train, nullptr, options_for(dir, DiskLayout::files, ImageCodec::png));
    const DatasetInfo info = read_dataset_info(dir);
    // Sample 0's file, with the same size but one byte changed.
    std::string file;
    for (const auto& f : info.files)
      if (f.path.find("/00000000.png") != std::string::npos) file = f.path;
    REQUIRE(!file.empty());
    flip_byte(fs::path(dir) / file, 60);
    const auto data = open_image_dataset(dir, Split::train);
    REQUIRE_THROWS_CONTAINING(data->get(0, out.data()), file.c_str(), "train sample 0", "CRC-32");
    CHECK(verify_image_dataset(dir).problems.size() == 1);
    fs::remove(fs::path(dir) / file);
    REQUIRE_THROWS_CONTAINING(open_image_dataset(dir, Split::train), file.c_str(), "cannot open");
  }
  SECTION("the manifest") {
    const std::string dir = tmp / "m";
    write_image_dataset(train, nullptr, options_for(dir, DiskLayout::shards, ImageCodec::raw));
    truncate_to(fs::path(dir) / "manifest.json", 50);
    REQUIRE_THROWS_CONTAINING(open_image_dataset(dir, Split::train), "manifest.json");
    fs::remove(fs::path(dir) / "manifest.json");
    REQUIRE_THROWS_CONTAINING(open_image_dataset(dir, Split::train), "no manifest.json", "incomplete");
  }
}

TEST_CASE("make-dataset never replaces what is not its own", "[disk]") {
  TempDir tmp("disk-overwrite");
  const SyntheticImages train(3, Split::train, 4);
  const std::string dir = tmp / "d";
  fs::create_directories(dir);
  { std::ofstream(fs::path(dir) / "notes.txt") << "mine\n"; }
  REQUIRE_THROWS_CONTAINING(write_image_dataset(train, nullptr, options_for(dir, DiskLayout::files, ImageCodec::raw)),
                            "not a trainlab data set");
  CHECK(fs::exists(fs::path(dir) / "notes.txt"));
  const std::string ours = tmp / "ours";
  write_image_dataset(train, nullptr, options_for(ours, DiskLayout::files, ImageCodec::raw));
  REQUIRE_THROWS_CONTAINING(write_image_dataset(train, nullptr, options_for(ours, DiskLayout::shards, ImageCodec::raw)),
                            "--overwrite");
  auto o = options_for(ours, DiskLayout::shards, ImageCodec::raw);
  o.overwrite = true;
  write_image_dataset(train, nullptr, o);
  CHECK(read_dataset_info(ours).layout == DiskLayout::shards);
  // Nothing left beside it: no partial or old directory.
  std::int64_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path)) ++entries;
  CHECK(entries == 2);
}

TEST_CASE("data set on disk: the distributed sampler gives each rank disjoint samples of the same batch", "[disk]") {
  TempDir tmp("disk-sampler");
  const SyntheticImages train(9, Split::train, 48);
  write_image_dataset(train, nullptr, options_for(tmp / "f", DiskLayout::files, ImageCodec::png));
  const auto data = open_image_dataset(tmp / "f", Split::train);
  DataLoaderOptions whole;
  whole.batch_size = 16;
  whole.seed = 4;
  DataLoader one(data, whole, trainlab::test::ref());
  for (std::int64_t b = 0; b < one.batches_per_epoch(); ++b) {
    std::set<std::int64_t> seen;
    std::vector<std::int64_t> all;
    for (int rank = 0; rank < 2; ++rank) {
      DataLoaderOptions part = whole;
      part.shard_rank = rank;
      part.shard_count = 2;
      part.num_workers = 1;
      DataLoader loader(data, part, trainlab::test::ref());
      const auto indices = loader.batch_indices(0, b);
      CHECK(indices.size() == 8);
      for (auto i : indices) CHECK(seen.insert(i).second);  // no sample on both ranks
      all.insert(all.end(), indices.begin(), indices.end());
      // What the rank's loader reads from disk is those samples.
      for (std::int64_t k = 0; k < b; ++k) loader.next();
      const Batch batch = loader.next();
      const auto labels = batch.labels.to_vector<std::int64_t>();
      std::vector<float> image(3072);
      for (std::size_t k = 0; k < indices.size(); ++k) CHECK(labels[k] == data->get(indices[k], image.data()));
    }
    CHECK(all == one.batch_indices(0, b));  // together, exactly one process's batch
  }
}

TEST_CASE("data set on disk: crop_flip is drawn per epoch and sample, the same on any worker", "[disk]") {
  TempDir tmp("disk-augment");
  const SyntheticImages train(2, Split::train, 6);
  write_image_dataset(train, nullptr, options_for(tmp / "a", DiskLayout::shards, ImageCodec::raw));
  DiskReadOptions r;
  r.augment = Augment::crop_flip;
  r.seed = 11;
  const auto a = open_image_dataset(tmp / "a", Split::train, r);
  const auto b = open_image_dataset(tmp / "a", Split::train, r);
  const auto plain = open_image_dataset(tmp / "a", Split::train);
  std::vector<float> x(3072), y(3072), p(3072);
  int differs_by_epoch = 0;
  for (std::int64_t i = 0; i < 6; ++i) {
    a->get_in_epoch(i, 1, x.data(), nullptr);
    b->get_in_epoch(i, 1, y.data(), nullptr);
    CHECK(x == y);
    a->get_in_epoch(i, 2, y.data(), nullptr);
    differs_by_epoch += x != y ? 1 : 0;
    // A crop and flip of the plain image: the values are the plain image's, moved, or padding zeros.
    plain->get(i, p.data());
    std::multiset<float> values(p.begin(), p.end());
    for (float v : x) CHECK((v == 0.0f || values.count(v) > 0));
  }
  CHECK(differs_by_epoch >= 4);
  CHECK(parse_augment("crop_flip") == Augment::crop_flip);
  REQUIRE_THROWS_CONTAINING(parse_augment("mixup"), "'mixup'", "none | crop_flip");
}

TEST_CASE("data set on disk: cold-cache runs drop the files' pages", "[disk]") {
  TempDir tmp("disk-cold");
  const SyntheticImages train(2, Split::train, 64);
  write_image_dataset(train, nullptr, options_for(tmp / "c", DiskLayout::shards, ImageCodec::raw));
  const auto data = open_image_dataset(tmp / "c", Split::train);
  std::vector<float> x(3072);
  for (std::int64_t i = 0; i < data->size(); ++i) data->get(i, x.data());
  const double warm = page_cache_resident_fraction(data->split_files());
  drop_page_cache(data->split_files());
  const double cold = page_cache_resident_fraction(data->split_files());
  INFO("resident (mincore): warm " << warm << ", after dropping " << cold);
  // tmpfs and overlay keep pages whatever one advises: there the drop cannot be seen, and the test
  // says so. On a disk file system the pages just read are resident and the drop evicts them
  // (the data set was synced when written, so none is dirty): a drop that does nothing fails here.
  struct statfs fs {};
  REQUIRE(::statfs((tmp / "c").c_str(), &fs) == 0);
  constexpr long kTmpfs = 0x01021994, kOverlay = 0x794c7630;
  if (fs.f_type == kTmpfs || fs.f_type == kOverlay) {
    WARN("the data set is on tmpfs or overlay, which keep pages: the cold-cache drop cannot be checked here");
  } else {
    CHECK(warm > 0.9);
    CHECK(cold < 0.1);
  }
  CHECK(data->stats().samples == data->size());
  CHECK(data->stats().bytes == 64u * 3072u);
}

namespace {

// A manifest edited and marked again (its own CRC-32 recomputed), as a forger would: what is left
// to catch it is the manifest's validation, the one open and verify-dataset share.
void edit_manifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/manifest.json";
  const auto bytes = read_file(path);
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
  edit(j);
  nlohmann::json unmarked = j;
  unmarked.erase("crc32");
  const std::string text = unmarked.dump();
  j["crc32"] = crc32_hex(crc32(text.data(), text.size()));
  write_file_atomic(path, j.dump(1) + "\n");
}

// Both readers refuse it with a message holding every fragment: open (train, loader-bench) and
// verify-dataset, one validation.
void refused(const std::string& dir, const std::vector<std::string>& fragments) {
  for (const bool verify : {false, true}) {
    INFO((verify ? "verify-dataset" : "open"));
    try {
      if (verify) {
        const DatasetVerifyResult r = verify_image_dataset(dir);
        FAIL_CHECK("verify-dataset accepted it (" << r.problems.size() << " problems)");
      } else {
        (void)open_image_dataset(dir, Split::train);
        FAIL_CHECK("open accepted it");
      }
    } catch (const Error& e) {
      const std::string what = e.what();
      INFO(what);
      for (const auto& f : fragments) CHECK(what.find(f) != std::string::npos);
    }
  }
}

}  // namespace

// Issue 30's fault-injection findings on data sets (items 5, 7, 11, 12, 13, 25, 28): each failed
// on the reader before this one.
TEST_CASE("data set on disk: hostile manifests and files are refused by open and verify alike", "[disk]") {
  TempDir tmp("disk-hostile");
  const SyntheticImages train(3, Split::train, 24), held_out(3, Split::held_out, 8);
  const std::string shards = tmp / "s", files = tmp / "f";
  write_image_dataset(train, &held_out, options_for(shards, DiskLayout::shards, ImageCodec::raw));
  write_image_dataset(train, &held_out, options_for(files, DiskLayout::files, ImageCodec::png));
  const auto copy = [&](const std::string& from, const std::string& name) {
    const std::string to = tmp / name;
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  };
  std::vector<float> out(3072);

  SECTION("an edited manifest that is not marked again: its own CRC-32") {
    const std::string d = copy(shards, "edited");
    const auto bytes = read_file(d + "/manifest.json");
    std::string text(bytes.begin(), bytes.end());
    text.replace(text.find("\"classes\": 10"), 13, "\"classes\": 11");
    write_file_atomic(d + "/manifest.json", text);
    refused(d, {"manifest.json", "CRC-32", "edited or corrupted"});
  }
  SECTION("version 1.5, true, and an older version") {
    for (const nlohmann::json& v : {nlohmann::json(1.5), nlohmann::json(true), nlohmann::json(1)}) {
      const std::string d = copy(shards, "version" + std::to_string(v.dump().size()) + v.type_name());
      edit_manifest(d, [&](nlohmann::json& j) { j["version"] = v; });
      refused(d, {"manifest version " + v.dump(), "reads versions 2 to 3"});
    }
  }
  SECTION("a split's sample count as text, a label 1.5, a huge count: the key is named") {
    const std::string a = copy(shards, "samples-text");
    edit_manifest(a, [](nlohmann::json& j) { j["splits"]["train"]["samples"] = "24"; });
    refused(a, {"splits/train/samples is \"24\", not an integer"});
    const std::string b = copy(files, "label-fraction");
    edit_manifest(b, [](nlohmann::json& j) { j["splits"]["train"]["files"][0]["label"] = 1.5; });
    refused(b, {"splits/train/files/0/label is 1.5, not an integer"});
    const std::string c = copy(shards, "samples-huge");
    edit_manifest(c, [](nlohmann::json& j) { j["splits"]["train"]["samples"] = (std::int64_t{1} << 61) + 5; });
    refused(c, {"splits/train/samples", "not an integer in range"});
    const std::string e = copy(shards, "first-text");
    edit_manifest(e, [](nlohmann::json& j) { j["splits"]["train"]["files"][0]["first"] = "x"; });
    refused(e, {"splits/train/files/0/first is \"x\""});
  }
  SECTION("structure: no splits, no files, a count the files do not hold, the other layout") {
    const std::string a = copy(shards, "no-splits");
    edit_manifest(a, [](nlohmann::json& j) { j["splits"] = nlohmann::json::object(); });
    refused(a, {"no splits"});
    const std::string b = copy(shards, "no-files");
    edit_manifest(b, [](nlohmann::json& j) { j["splits"]["train"]["files"] = nlohmann::json::array(); });
    refused(b, {"splits.train.files is empty"});
    const std::string c = copy(files, "count");
    edit_manifest(c, [](nlohmann::json& j) { j["splits"]["train"]["samples"] = 25; });
    refused(c, {"its files hold 24 samples, samples says 25"});
    const std::string d = copy(shards, "swapped-layout");
    edit_manifest(d, [](nlohmann::json& j) { j["layout"] = "files"; });
    refused(d, {"a file needs its label"});
  }
  SECTION("limits: an image of 65504 pixels, a pixel offset of 1e308") {
    const std::string a = copy(shards, "huge-image");
    edit_manifest(a, [](nlohmann::json& j) { j["image"]["height"] = j["image"]["width"] = 65504; });
    refused(a, {"image 65504x65504x3", "H in 1..4096"});
    const std::string b = copy(shards, "offset");
    edit_manifest(b, [](nlohmann::json& j) { j["pixels"]["offset"] = 1e308; });
    refused(b, {"the pixel map", "|offset| <= 1e6"});
  }
  SECTION("files layout: a label contradicting its class folder") {
    const std::string d = copy(files, "wrong-folder");
    edit_manifest(d, [](nlohmann::json& j) {
      auto& f = j["splits"]["train"]["files"][0];
      f["label"] = (f["label"].get<int>() + 1) % 10;
    });
    refused(d, {"contradicts its class folder"});
  }
  SECTION("a record's label changed in its header: the record's CRC-32 covers it") {
    const std::string d = copy(shards, "label-byte");
    const DatasetInfo info = read_dataset_info(d);
    const std::string shard = d + "/" + first_file(info, "train/shard-", ".tlrec");
    flip_byte(shard, 4);  // the first record's label
    const auto data = open_image_dataset(d, Split::train);
    REQUIRE_THROWS_CONTAINING(data->get(0, out.data()), "train sample 0", "record 0", "CRC-32");
    CHECK(!verify_image_dataset(d).problems.empty());
  }
  SECTION("a shard swapped for another of the same size: its records are other samples'") {
    // One raw record per shard: every shard the same size.
    const std::string d = tmp / "swapped";
    auto one = options_for(d, DiskLayout::shards, ImageCodec::raw);
    one.shard_mb = 0.001;
    write_image_dataset(train, nullptr, one);
    const DatasetInfo info = read_dataset_info(d);
    std::vector<std::string> shard_files;
    for (const auto& f : info.files)
      if (f.path.rfind("train/shard-", 0) == 0 && f.path.find(".tlrec") != std::string::npos)
        shard_files.push_back(d + "/" + f.path);
    REQUIRE(shard_files.size() == 24);
    // Two shards of the same size: swap them.
    fs::rename(shard_files[0], d + "/tmp");
    fs::rename(shard_files[1], shard_files[0]);
    fs::rename(d + "/tmp", shard_files[1]);
    const auto data = open_image_dataset(d, Split::train);  // sizes agree: open cannot tell
    REQUIRE_THROWS_CONTAINING(data->get(0, out.data()), "a record of another sample");
  }
  SECTION("a FIFO in place of a shard: refused, never waited on") {
    const std::string d = copy(shards, "fifo");
    const DatasetInfo info = read_dataset_info(d);
    const std::string shard = d + "/" + first_file(info, "train/shard-", ".tlrec");
    fs::remove(shard);
    REQUIRE(::mkfifo(shard.c_str(), 0600) == 0);
    REQUIRE_THROWS_CONTAINING(open_image_dataset(d, Split::train), "is not a regular file (a FIFO)");
    const DatasetVerifyResult r = verify_image_dataset(d);
    REQUIRE(!r.problems.empty());
    CHECK_THAT(r.problems[0], Catch::Contains("not a regular file (a FIFO)"));
  }
}

TEST_CASE("data set on disk: --overwrite replaces exactly what the manifest lists", "[disk]") {
  TempDir tmp("disk-overwrite");
  const SyntheticImages train(4, Split::train, 16);
  const std::string d = tmp / "d";
  auto o = options_for(d, DiskLayout::files, ImageCodec::png);
  write_image_dataset(train, nullptr, o);
  // A user's own file inside the data set's directory survives a replace.
  write_file_atomic(d + "/notes.txt", std::string("mine\n"));
  o.overwrite = true;
  o.layout = DiskLayout::shards;
  const DatasetWriteSummary summary = write_image_dataset(train, nullptr, o);
  CHECK(summary.kept.empty());
  CHECK(read_dataset_info(d).layout == DiskLayout::shards);
  CHECK(fs::exists(d + "/notes.txt"));
  CHECK(!fs::exists(d + "/train/0"));  // the old layout's class folders are gone
  // A directory whose one-line manifest merely names the format is not a data set: refused, and
  // nothing in it is touched.
  const std::string photos = tmp / "photos";
  fs::create_directories(photos + "/2019");
  write_file_atomic(photos + "/2019/wedding.jpg", std::string("jpeg bytes"));
  write_file_atomic(photos + "/manifest.json", std::string(R"({"format":"trainlab-image-dataset"})"));
  o.out = photos;
  REQUIRE_THROWS_CONTAINING(write_image_dataset(train, nullptr, o), "not a trainlab data set");
  CHECK(fs::exists(photos + "/2019/wedding.jpg"));
}
