// Real data sets in (engine/data/dataset_import.h): IDX and CIFAR-10 files and a folder of class folders
// imported, written and read back exactly (bytes / 255, standardised by the manifest's statistics),
// the same images as IDX or as an imagefolder giving the same data set, SmallCNN built for the
// data set's shape, and every bad input refused with one line naming the file.
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "engine/data/dataset_import.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/image_codec.h"
#include "engine/io/fileio.h"
#include "engine/train/task.h"
#include "engine/train/trainer.h"
#include "models/smallcnn/smallcnn.h"
#include "test_util.h"

using namespace trainlab;
using trainlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A small Fashion-MNIST-like set: n images of side x side grey bytes, labels i % classes.
struct Images {
  int side = 8;
  std::vector<std::vector<unsigned char>> pixels;
  std::vector<unsigned char> labels;
};

Images make_images(int n, int side, int classes, unsigned seed) {
  Images im;
  im.side = side;
  std::uint32_t state = seed;
  for (int i = 0; i < n; ++i) {
    std::vector<unsigned char> p(static_cast<std::size_t>(side) * side);
    for (auto& b : p) {
      state = state * 1664525u + 1013904223u;
      b = static_cast<unsigned char>(state >> 24);
    }
    im.pixels.push_back(p);
    im.labels.push_back(static_cast<unsigned char>(i % classes));
  }
  return im;
}

void put_be(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
}

std::vector<unsigned char> gzip(const std::vector<unsigned char>& data) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<unsigned char> out(deflateBound(&z, static_cast<uLong>(data.size())) + 64);
  z.next_in = const_cast<unsigned char*>(data.data());
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_bytes(const fs::path& path, const std::vector<unsigned char>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// IDX files for one split (split "train" or "t10k"), gzipped or not.
void write_idx(const fs::path& dir, const std::string& split, const Images& im, bool gz) {
  std::vector<unsigned char> images, labels;
  put_be(images, 0x803);
  put_be(images, static_cast<std::uint32_t>(im.pixels.size()));
  put_be(images, static_cast<std::uint32_t>(im.side));
  put_be(images, static_cast<std::uint32_t>(im.side));
  for (const auto& p : im.pixels) images.insert(images.end(), p.begin(), p.end());
  put_be(labels, 0x801);
  put_be(labels, static_cast<std::uint32_t>(im.labels.size()));
  labels.insert(labels.end(), im.labels.begin(), im.labels.end());
  const std::string ext = gz ? ".gz" : "";
  write_bytes(dir / (split + "-images-idx3-ubyte" + ext), gz ? gzip(images) : images);
  write_bytes(dir / (split + "-labels-idx1-ubyte" + ext), gz ? gzip(labels) : labels);
}

// The same images as PNG files under root/<split>/<class name>/<index>.png.
void write_folder(const fs::path& root, const std::string& split, const Images& im,
                  const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < im.pixels.size(); ++i) {
    const auto png = encode_image(ImageCodec::png, im.pixels[i].data(), {im.side, im.side, 1}, 0);
    char name[32];
    std::snprintf(name, sizeof name, "%05zu.png", i);
    write_bytes(root / split / names[im.labels[i]] / name, png);
  }
}

// Every sample of a split as (label, values), sorted: the data set's content whatever its order.
std::vector<std::pair<std::int64_t, std::vector<float>>> content(const std::string& dir, Split split) {
  const auto data = open_image_dataset(dir, split);
  std::vector<std::pair<std::int64_t, std::vector<float>>> all;
  for (std::int64_t i = 0; i < data->size(); ++i) {
    std::vector<float> v(static_cast<std::size_t>(data->sample_elements()));
    const std::int64_t label = data->get(i, v.data());
    all.emplace_back(label, std::move(v));
  }
  std::sort(all.begin(), all.end());
  return all;
}

DatasetWriteSummary import_to(const std::string& from, const std::string& out, ImportOptions o = {},
                              DiskLayout layout = DiskLayout::shards, ImageCodec codec = ImageCodec::png) {
  const ImportedDataset source = open_import(parse_import_source(from), o, out);
  DatasetWriteOptions w;
  w.out = out;
  w.layout = layout;
  w.codec = codec;
  w.source = source.source;
  w.class_names = source.class_names;
  w.skipped = source.skipped;
  w.unit_values = true;
  w.normalize = true;
  return write_image_dataset(*source.train, source.test.get(), w);
}

void refused(const std::string& from, const std::string& out, const std::vector<std::string>& fragments,
             ImportOptions o = {}) {
  try {
    import_to(from, out, o);
    FAIL("imported " << from);
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find('\n') == std::string::npos);
    for (const auto& f : fragments) CHECK(what.find(f) != std::string::npos);
  }
  CHECK_FALSE(fs::exists(out));  // nothing half-written
}

const std::vector<std::string> kNames = {"ankle", "bag", "coat"};

}  // namespace

TEST_CASE("import: IDX files read back as their bytes / 255, standardised by the training split's statistics",
          "[disk][import]") {
  TempDir tmp("import-idx");
  const Images train = make_images(30, 8, 3, 1), test = make_images(9, 8, 3, 2);
  for (bool gz : {true, false}) {
    const fs::path src = tmp.path / (gz ? "fashion-gz" : "plain");
    write_idx(src, "train", train, gz);
    write_idx(src, "t10k", test, gz);
    const std::string out = tmp / (gz ? "ds-gz" : "ds-plain");
    import_to("idx:" + src.string(), out);
    const DatasetInfo info = read_dataset_info(out);
    CHECK(info.image.height == 8);
    CHECK(info.sample_size == 8);
    CHECK(info.classes == 3);
    // A directory named fashion gets Fashion-MNIST's names only with its 10 classes; 3 are numbered.
    CHECK(info.class_names == std::vector<std::string>{"0", "1", "2"});
    double sum = 0, sq = 0, n = 0;
    for (const auto& p : train.pixels)
      for (auto b : p) sum += b / 255.0, sq += (b / 255.0) * (b / 255.0), n += 1;
    const double mean = sum / n, stdev = std::sqrt(sq / n - mean * mean);
    REQUIRE(info.mean.size() == 1);
    CHECK(info.mean[0] == Approx(mean).epsilon(1e-12));
    CHECK(info.stdev[0] == Approx(stdev).epsilon(1e-12));
    for (Split split : {Split::train, Split::held_out}) {
      const Images& im = split == Split::train ? train : test;
      const auto data = open_image_dataset(out, split);
      REQUIRE(data->size() == static_cast<std::int64_t>(im.pixels.size()));
      CHECK(data->sample_shape() == Shape({1, 8, 8}));
      std::vector<float> v(64);
      for (std::int64_t i = 0; i < data->size(); ++i) {
        CHECK(data->get(i, v.data()) == im.labels[static_cast<std::size_t>(i)]);
        for (std::size_t k = 0; k < 64; ++k) {
          const double expected = (im.pixels[static_cast<std::size_t>(i)][k] / 255.0 - mean) / stdev;
          REQUIRE(v[k] == Approx(expected).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("import: the same images as IDX files and as an imagefolder of PNGs give the same data set",
          "[disk][import]") {
  TempDir tmp("import-same");
  const Images train = make_images(24, 12, 3, 3), test = make_images(6, 12, 3, 4);
  write_idx(tmp.path / "idx", "train", train, true);
  write_idx(tmp.path / "idx", "t10k", test, true);
  write_folder(tmp.path / "folder", "train", train, kNames);
  write_folder(tmp.path / "folder", "test", test, kNames);
  import_to("idx:" + tmp / "idx", tmp / "from-idx");
  import_to("imagefolder:" + tmp / "folder", tmp / "from-folder", {}, DiskLayout::files, ImageCodec::png);
  const DatasetInfo a = read_dataset_info(tmp / "from-idx"), b = read_dataset_info(tmp / "from-folder");
  CHECK(b.class_names == kNames);  // sorted folder names, as torchvision's ImageFolder
  CHECK(a.classes == b.classes);
  CHECK(a.image.height == b.image.height);
  CHECK(a.image.channels == b.image.channels);
  // The same values summed in another order (the imagefolder's is by class): equal to rounding.
  REQUIRE(a.mean.size() == 1);
  REQUIRE(b.mean.size() == 1);
  CHECK(a.mean[0] == Approx(b.mean[0]).epsilon(1e-12));
  CHECK(a.stdev[0] == Approx(b.stdev[0]).epsilon(1e-12));
  for (Split split : {Split::train, Split::held_out})
    CHECK(content(tmp / "from-idx", split) == content(tmp / "from-folder", split));
}

TEST_CASE("import: an imagefolder of mixed colour, resized on request, skipping what is not an image",
          "[disk][import]") {
  TempDir tmp("import-folder");
  const fs::path root = tmp.path / "photos";
  // Grey, RGB and RGBA images of two sizes.
  std::vector<unsigned char> grey(20 * 20, 90), rgb(20 * 20 * 3, 150), rgba(16 * 16 * 4, 200);
  write_bytes(root / "train/cat/a.png", encode_image(ImageCodec::png, rgb.data(), {20, 20, 3}, 0));
  write_bytes(root / "train/cat/b.jpg", encode_image(ImageCodec::jpeg, rgb.data(), {20, 20, 3}, 95));
  write_bytes(root / "train/dog/c.png", encode_image(ImageCodec::png, grey.data(), {20, 20, 1}, 0));
  {
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = 16;
    image.height = 16;
    image.format = PNG_FORMAT_RGBA;
    png_alloc_size_t size = 0;
    REQUIRE(png_image_write_to_memory(&image, nullptr, &size, 0, rgba.data(), 0, nullptr));
    std::vector<unsigned char> out(size);
    REQUIRE(png_image_write_to_memory(&image, out.data(), &size, 0, rgba.data(), 0, nullptr));
    out.resize(size);
    write_bytes(root / "train/dog/d.png", out);
  }
  write_bytes(root / "train/dog/notes.txt", {'h', 'i'});  // not an image file name: not a sample
  write_bytes(root / "test/cat/e.png", encode_image(ImageCodec::png, rgb.data(), {20, 20, 3}, 0));

  SECTION("sizes differ: refused without --image-size, naming the file") {
    refused("imagefolder:" + root.string(), tmp / "out", {"d.png", "16x16", "--image-size"});
  }
  SECTION("resized to 8: RGB kept, grey replicated, alpha dropped") {
    ImportOptions o;
    o.image_size = 8;
    import_to("imagefolder:" + root.string(), tmp / "out", o);
    const DatasetInfo info = read_dataset_info(tmp / "out");
    CHECK(info.image.height == 8);
    CHECK(info.image.channels == 3);
    CHECK(info.class_names == std::vector<std::string>{"cat", "dog"});
    CHECK(open_image_dataset(tmp / "out", Split::train)->size() == 4);
    CHECK(open_image_dataset(tmp / "out", Split::held_out)->size() == 1);
  }
  SECTION("a corrupt image: refused, or skipped and counted with --skip-bad") {
    write_bytes(root / "train/cat/z.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0});
    ImportOptions o;
    o.image_size = 8;
    refused("imagefolder:" + root.string(), tmp / "out", {"z.png", "PNG", "--skip-bad"}, o);
    o.skip_bad = true;
    import_to("imagefolder:" + root.string(), tmp / "out", o);
    const DatasetInfo info = read_dataset_info(tmp / "out");
    CHECK(info.skipped.at("train") == 1);
    CHECK(open_image_dataset(tmp / "out", Split::train)->size() == 4);
  }
}

TEST_CASE("import: bad sources are refused with one line naming the file, nothing written", "[disk][import]") {
  TempDir tmp("import-bad");
  const Images train = make_images(10, 8, 2, 5), test = make_images(4, 8, 2, 6);
  const fs::path idx = tmp.path / "idx";
  write_idx(idx, "train", train, true);
  write_idx(idx, "t10k", test, false);
  const std::string out = tmp / "out";
  ImportOptions o;

  SECTION("IDX: counts that disagree, a truncated gzip, a wrong magic, no file") {
    Images fewer = train;
    fewer.labels.pop_back();
    std::vector<unsigned char> labels;
    put_be(labels, 0x801);
    put_be(labels, 9);
    labels.insert(labels.end(), fewer.labels.begin(), fewer.labels.end());
    write_bytes(idx / "train-labels-idx1-ubyte.gz", gzip(labels));
    refused("idx:" + idx.string(), out, {"train-images-idx3-ubyte.gz holds 10 images", "9 labels"});
    write_idx(idx, "train", train, true);
    auto gz = read_file((idx / "train-images-idx3-ubyte.gz").string());
    gz.resize(gz.size() / 2);
    write_bytes(idx / "train-images-idx3-ubyte.gz", gz);
    refused("idx:" + idx.string(), out, {"train-images-idx3-ubyte.gz", "truncated gzip"});
    write_idx(idx, "train", train, true);
    auto raw = read_file((idx / "t10k-images-idx3-ubyte").string());
    raw[3] = 0x01;
    write_bytes(idx / "t10k-images-idx3-ubyte", raw);
    refused("idx:" + idx.string(), out, {"t10k-images-idx3-ubyte", "magic number 0x00000801", "expected 0x00000803"});
    fs::remove(idx / "t10k-images-idx3-ubyte");
    refused("idx:" + idx.string(), out, {"no t10k images file"});
  }
  SECTION("CIFAR-10: a record of the wrong length, a label past 9") {
    const fs::path cifar = tmp.path / "cifar";
    std::vector<unsigned char> batch(3073 * 2, 7);
    batch[0] = 1;
    batch[3073] = 2;
    for (int b = 1; b <= 5; ++b) write_bytes(cifar / ("data_batch_" + std::to_string(b) + ".bin"), batch);
    write_bytes(cifar / "test_batch.bin", std::vector<unsigned char>(batch.begin(), batch.end() - 5));
    refused("cifar10:" + cifar.string(), out, {"test_batch.bin", "6141 bytes", "3073 bytes each"});
    batch[3073] = 10;
    write_bytes(cifar / "test_batch.bin", batch);
    refused("cifar10:" + cifar.string(), out, {"test_batch.bin", "record 1 has label 10", "0..9"});
    batch[3073] = 9;
    write_bytes(cifar / "test_batch.bin", batch);
    import_to("cifar10:" + cifar.string(), out);
    CHECK(read_dataset_info(out).class_names.at(9) == "truck");
    CHECK(open_image_dataset(out, Split::train)->size() == 10);
  }
  SECTION("imagefolder: no class folders, an empty class, a 16-bit PNG, a truncated JPEG, a symlink loop") {
    const fs::path root = tmp.path / "photos";
    fs::create_directories(root / "train");
    refused("imagefolder:" + root.string(), out, {"has no class folders"});
    const std::vector<unsigned char> px(8 * 8 * 3, 100);
    write_bytes(root / "train/a/1.png", encode_image(ImageCodec::png, px.data(), {8, 8, 3}, 0));
    fs::create_directories(root / "train/b");
    refused("imagefolder:" + root.string(), out, {"train/b", "holds no .png, .jpg or .jpeg file"});
    {
      png_image image{};
      image.version = PNG_IMAGE_VERSION;
      image.width = 8;
      image.height = 8;
      image.format = PNG_FORMAT_LINEAR_RGB;
      std::vector<std::uint16_t> wide(8 * 8 * 3, 30000);
      png_alloc_size_t size = 0;
      REQUIRE(png_image_write_to_memory(&image, nullptr, &size, 0, wide.data(), 0, nullptr));
      std::vector<unsigned char> bytes(size);
      REQUIRE(png_image_write_to_memory(&image, bytes.data(), &size, 0, wide.data(), 0, nullptr));
      bytes.resize(size);
      write_bytes(root / "train/b/2.png", bytes);
    }
    refused("imagefolder:" + root.string(), out, {"train/b/2.png", "16 bits per channel"});
    fs::remove(root / "train/b/2.png");
    auto jpeg = encode_image(ImageCodec::jpeg, px.data(), {8, 8, 3}, 90);
    jpeg.resize(jpeg.size() - 8);  // into the entropy-coded data: the header reads, the image does not
    write_bytes(root / "train/b/3.jpg", jpeg);
    refused("imagefolder:" + root.string(), out, {"train/b/3.jpg", "JPEG"});
    write_bytes(root / "train/b/3.jpg", encode_image(ImageCodec::jpeg, px.data(), {8, 8, 3}, 90));
    fs::create_directory_symlink(root / "train/b", root / "train/b/loop");
    refused("imagefolder:" + root.string(), out, {"symlink loop"});
    fs::remove(root / "train/b/loop");
    refused("imagefolder:" + root.string(), (root / "train/out").string(), {"lies inside the source"});
    import_to("imagefolder:" + root.string(), out);
    CHECK(read_dataset_info(out).classes == 2);
  }
  SECTION("the source's form") {
    CHECK_THROWS_WITH(parse_import_source("mnist:/x"), Catch::Contains("imagefolder:ROOT | idx:DIR | cifar10:DIR"));
    CHECK_THROWS_WITH(parse_import_source("idx:"), Catch::Contains("names no directory"));
  }
}

TEST_CASE("import: the hostile trees and names of issue 49, each imported or refused before any work",
          "[disk][import]") {
  TempDir tmp("import-hostile");
  const fs::path root = tmp.path / "photos";
  const std::string out = tmp / "out";
  const std::vector<unsigned char> px(8 * 8 * 3, 100), big(16 * 16 * 3, 50);
  const auto png8 = encode_image(ImageCodec::png, px.data(), {8, 8, 3}, 0);

  SECTION("a symlink DAG of 2^24 paths to each image: every directory walked once, every file read once") {
    // level k holds two links to level k+1; the last level holds the images (plus a link to one).
    for (const char* cls : {"a", "b"}) {
      const fs::path levels = tmp.path / "levels" / cls;
      for (int k = 0; k < 24; ++k) {
        fs::create_directories(levels / std::to_string(k));
        for (const char* link : {"x", "y"})
          fs::create_directory_symlink(levels / std::to_string(k + 1), levels / std::to_string(k) / link);
      }
      write_bytes(levels / "24" / "1.png", png8);
      write_bytes(levels / "24" / "2.png", png8);
      fs::create_symlink(levels / "24" / "1.png", levels / "24" / "3.png");
      fs::create_directories(root / "train");
      fs::create_directory_symlink(levels / "0", root / "train" / cls);
    }
    ImportedDataset source = open_import(parse_import_source("imagefolder:" + root.string()), {}, out);
    CHECK(source.train->size() == 4);  // 2 real files per class
    const auto note = std::find_if(source.notes.begin(), source.notes.end(),
                                   [](const std::string& n) { return n.rfind("symlinks: ", 0) == 0; });
    REQUIRE(note != source.notes.end());
    CHECK(note->find("48 directory path(s) and 2 file path(s)") != std::string::npos);
  }
  SECTION("a class folder whose name is not UTF-8: imported, its ill-formed byte kept as \\xe9") {
    write_bytes(root / "train" / "caf\xe9" / "1.png", png8);
    write_bytes(root / "train" / "tea" / "1.png", png8);
    write_bytes(root / "test" / "caf\xe9" / "2.png", png8);
    import_to("imagefolder:" + root.string(), out);
    const DatasetInfo info = read_dataset_info(out);
    CHECK(info.class_names == std::vector<std::string>{"caf\\xe9", "tea"});
    CHECK(open_image_dataset(out, Split::held_out)->size() == 1);
    fs::remove_all(out);
    ImportOptions o;
    o.class_names = {"caf\xe9", "tea"};
    refused("imagefolder:" + root.string(), out, {"--class-names: name 0", "'caf\\xe9'", "not UTF-8 (byte 3)"}, o);
  }
  SECTION("--class-names over 255 bytes: refused before anything is read or written") {
    write_bytes(root / "train" / "a" / "1.png", png8);
    write_bytes(root / "train" / "b" / "1.png", png8);
    ImportOptions o;
    o.class_names = {"a", std::string(256, 'n')};
    refused("imagefolder:" + root.string(), out, {"--class-names: name 1", "256 bytes long", "1..255 bytes"}, o);
  }
  SECTION("--skip-bad: the first training image unreadable, or of another size, does not set the shape") {
    std::vector<unsigned char> truncated = png8;
    truncated.resize(truncated.size() / 2);
    write_bytes(root / "train" / "a" / "0.png", truncated);  // sorted first
    write_bytes(root / "train" / "a" / "1.jpg", encode_image(ImageCodec::jpeg, big.data(), {16, 16, 3}, 90));
    for (const char* f : {"2.png", "3.png"}) write_bytes(root / "train" / "a" / f, png8);
    write_bytes(root / "train" / "b" / "1.png", png8);
    write_bytes(root / "test" / "a" / "1.jpg", encode_image(ImageCodec::jpeg, big.data(), {16, 16, 3}, 90));
    write_bytes(root / "test" / "b" / "1.png", png8);
    refused("imagefolder:" + root.string(), out, {"train/a/0.png", "--skip-bad"});
    fs::remove(root / "train" / "a" / "0.png");
    refused("imagefolder:" + root.string(), out, {"train/a/2.png", "size differs: 8x8", "the data set's 16x16"});
    write_bytes(root / "train" / "a" / "0.png", truncated);
    ImportOptions o;
    o.skip_bad = true;
    ImportedDataset source = open_import(parse_import_source("imagefolder:" + root.string()), o, out);
    CHECK(source.train->sample_shape() == Shape{3, 8, 8});
    CHECK(source.train->size() == 3);
    CHECK(source.skipped.at("train") == 2);
    CHECK(source.skipped.at("held_out") == 1);
    bool noted = false;
    for (const auto& n : source.notes) noted |= n.find("1 unreadable, 2 of another size") != std::string::npos;
    CHECK(noted);
    // Every training image unreadable: the one line counts them.
    for (const char* f : {"a/1.jpg", "a/2.png", "a/3.png", "b/1.png"}) write_bytes(root / "train" / f, truncated);
    refused("imagefolder:" + root.string(), out, {"every image of train was skipped", "5 unreadable"}, o);
  }
}

TEST_CASE("SmallCNN is built for the data set's shape: a 1x12x12 import with 3 classes trains", "[disk][import]") {
  TempDir tmp("import-train");
  write_idx(tmp.path / "idx", "train", make_images(48, 12, 3, 7), true);
  write_idx(tmp.path / "idx", "t10k", make_images(12, 12, 3, 8), true);
  import_to("idx:" + tmp / "idx", tmp / "ds");
  TrainConfig config;
  config.data.dir = tmp / "ds";
  config.execution.backend = "reference";
  config.execution.threads = 1;
  config.steps = 3;
  config.batch = 8;
  config.data.eval_samples = 12;
  config.reporting.log_every = 1000;
  const TrainTask task = model_task(config);
  InitOptions init;
  Generator gen(1);
  init.generator = &gen;
  const auto model = task.make_model(init);
  const auto* cnn = dynamic_cast<const SmallCNN*>(model.get());
  REQUIRE(cnn != nullptr);
  CHECK(cnn->shape() == SmallCNNShape{1, 12, 12, 3});
  CHECK(cnn->fc1->weight.shape() == Shape({256, 64 * 3 * 3}));
  CHECK(cnn->fc2->weight.shape() == Shape({3, 256}));
  Trainer trainer(config, task);
  const TrainResult result = trainer.train(nullptr);
  CHECK(result.losses.size() == 3);
  for (double loss : result.losses) CHECK(std::isfinite(loss));
  CHECK_THROWS_WITH(SmallCNN(init, SmallCNNShape{1, 3, 3, 10}), Catch::Contains("1x3x3, 10 classes"));
}
