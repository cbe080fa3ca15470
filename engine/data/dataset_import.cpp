#include "engine/data/dataset_import.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "backends/error.h"
#include "engine/data/image_codec.h"
#include "engine/io/fileio.h"

namespace trainlab {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kMaxSourceFile = 4ull << 30;    // an IDX or CIFAR file, uncompressed
constexpr std::uint64_t kMaxImageFile = 256ull << 20;   // one image file of an imagefolder
constexpr std::uint64_t kMaxImagePixels = 64ull << 20;  // one decoded image (64 Mpx: 256 MiB as RGBA)
constexpr int kMaxImageSize = 4096;                     // a stored image's side (the data set's limit)
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 24;

// Samples held in memory as 8-bit [C, H, W] planes: IDX and CIFAR-10 (small data sets by design).
class ByteImages final : public Dataset {
 public:
  ByteImages(std::string name, std::int64_t channels, std::int64_t size, std::int64_t classes)
      : name_(std::move(name)), channels_(channels), size_(size), classes_(classes) {}
  std::vector<unsigned char> pixels;  // n x C x H x W
  std::vector<std::int64_t> labels;

  std::int64_t size() const override { return static_cast<std::int64_t>(labels.size()); }
  Shape sample_shape() const override { return {channels_, size_, size_}; }
  std::int64_t num_classes() const override { return classes_; }
  std::int64_t get(std::int64_t index, float* out, double* /*work*/) const override {
    TL_CHECK(index >= 0 && index < size(),
             name_ + ": index " + std::to_string(index) + " is outside [0, " + std::to_string(size()) + ")");
    const std::size_t n = static_cast<std::size_t>(channels_ * size_ * size_);
    const unsigned char* p = pixels.data() + static_cast<std::size_t>(index) * n;
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]) / 255.0f;
    return labels[static_cast<std::size_t>(index)];
  }
  std::string describe() const override { return name_; }
  void set_classes(std::int64_t classes) { classes_ = classes; }

 private:
  std::string name_;
  std::int64_t channels_, size_, classes_;
};

class Progress {
 public:
  explicit Progress(const std::function<void(const std::string&)>& sink) : sink_(sink) {}
  void tick(const std::string& what, std::int64_t done, std::int64_t total) {
    if (!sink_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    sink_("make-dataset: " + what + " " + std::to_string(done) + "/" + std::to_string(total));
  }

 private:
  const std::function<void(const std::string&)>& sink_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::string hex(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

// ITU-R 601 luma of one RGB pixel, as PIL's convert("L") computes it.
unsigned char luma(unsigned r, unsigned g, unsigned b) {
  return static_cast<unsigned char>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// ---- IDX ------------------------------------------------------------------------------------------

// The first of `names` that exists in `dir`.
std::string find_file(const fs::path& dir, const std::vector<std::string>& names, const std::string& what) {
  std::error_code ec;
  for (const auto& name : names)
    if (fs::exists(dir / name, ec)) return (dir / name).string();
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
  throw Error("idx:" + dir.string() + ": no " + what + " file (looked for " + list + ")");
}

std::vector<std::string> idx_names(const std::string& split, const std::string& kind, int dims) {
  // Fashion-MNIST's and MNIST's names (train-images-idx3-ubyte), and the dotted form some mirrors use.
  const std::string dash = split + "-" + kind + "-idx" + std::to_string(dims) + "-ubyte";
  const std::string dot = split + "-" + kind + ".idx" + std::to_string(dims) + "-ubyte";
  return {dash + ".gz", dash, dot + ".gz", dot};
}

struct IdxFile {
  std::vector<std::uint32_t> dims;
  std::vector<unsigned char> data;  // what follows the header
};

IdxFile read_idx(const std::string& path, int dims) {
  const std::vector<unsigned char> bytes = gunzip_if_gzipped(read_file(path, kMaxSourceFile), path);
  TL_CHECK(bytes.size() >= 4, path + ": " + std::to_string(bytes.size()) + " bytes, too short for an IDX header");
  const std::uint32_t magic = big_endian(bytes.data());
  const std::uint32_t expected = 0x0800u + static_cast<std::uint32_t>(dims);  // unsigned bytes, `dims` dimensions
  TL_CHECK(magic == expected, path + ": magic number 0x" + hex(magic) + ", expected 0x" + hex(expected) +
                                  " (IDX, unsigned bytes, " + std::to_string(dims) + " dimension(s))");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(dims);
  TL_CHECK(bytes.size() >= header, path + ": truncated IDX header");
  IdxFile f;
  std::uint64_t count = 1;
  for (int i = 0; i < dims; ++i) {
    f.dims.push_back(big_endian(bytes.data() + 4 + 4 * i));
    count *= f.dims.back();
    TL_CHECK(count <= kMaxSourceFile, path + ": dimensions too large");
  }
  TL_CHECK(bytes.size() - header == count, path + ": " + std::to_string(bytes.size() - header) +
                                               " bytes of data, its header says " + std::to_string(count) +
                                               " (truncated or extended)");
  f.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return f;
}

std::shared_ptr<ByteImages> idx_split(const fs::path& dir, const std::string& split, int channels) {
  const std::string images_path = find_file(dir, idx_names(split, "images", 3), split + " images");
  const std::string labels_path = find_file(dir, idx_names(split, "labels", 1), split + " labels");
  const IdxFile images = read_idx(images_path, 3), labels = read_idx(labels_path, 1);
  const std::uint32_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  TL_CHECK(n == labels.dims[0], images_path + " holds " + std::to_string(n) + " images, " + labels_path + " " +
                                    std::to_string(labels.dims[0]) + " labels");
  TL_CHECK(n >= 1, images_path + ": no images");
  TL_CHECK(h == w && h >= 4 && h <= static_cast<std::uint32_t>(kMaxImageSize),
           images_path + ": images of " + std::to_string(h) + "x" + std::to_string(w) +
               " pixels; trainlab stores square images of 4..4096 pixels");
  auto data = std::make_shared<ByteImages>("idx:" + dir.string() + " " + split, channels, h, 0);
  const std::size_t plane = static_cast<std::size_t>(h) * w;
  data->pixels.resize(static_cast<std::size_t>(n) * plane * static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < channels; ++c)  // grey replicated into each channel asked for
      std::memcpy(data->pixels.data() + (i * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c)) * plane,
                  images.data.data() + i * plane, plane);
  data->labels.assign(labels.data.begin(), labels.data.end());
  return data;
}

// Fashion-MNIST's classes in label order (its README); MNIST's are the digits.
const std::vector<std::string> kFashionClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                  "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
const std::vector<std::string> kCifar10Classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                  "dog",      "frog",       "horse", "ship", "truck"};

std::vector<std::string> numbered_classes(std::int64_t classes) {
  std::vector<std::string> names;
  for (std::int64_t i = 0; i < classes; ++i) names.push_back(std::to_string(i));
  return names;
}

// ---- CIFAR-10 -------------------------------------------------------------------------------------

constexpr std::size_t kCifarRecord = 1 + 3 * 32 * 32;

void read_cifar_file(const std::string& path, int channels, ByteImages& data) {
  const std::vector<unsigned char> bytes = read_file(path, kMaxSourceFile);
  TL_CHECK(!bytes.empty() && bytes.size() % kCifarRecord == 0,
           path + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of CIFAR-10 records (" +
               std::to_string(kCifarRecord) + " bytes each: a label, then 1024 red, green and blue bytes)");
  const std::size_t records = bytes.size() / kCifarRecord, plane = 32 * 32;
  for (std::size_t r = 0; r < records; ++r) {
    const unsigned char* rec = bytes.data() + r * kCifarRecord;
    TL_CHECK(rec[0] < 10, path + ": record " + std::to_string(r) + " has label " + std::to_string(rec[0]) +
                              "; CIFAR-10's labels are 0..9");
    data.labels.push_back(rec[0]);
    const unsigned char* rgb = rec + 1;
    if (channels == 3) {
      data.pixels.insert(data.pixels.end(), rgb, rgb + 3 * plane);
    } else {
      for (std::size_t i = 0; i < plane; ++i) data.pixels.push_back(luma(rgb[i], rgb[plane + i], rgb[2 * plane + i]));
    }
  }
}

std::shared_ptr<ByteImages> cifar_split(const fs::path& dir, bool train, int channels) {
  auto data = std::make_shared<ByteImages>("cifar10:" + dir.string() + (train ? " train" : " test"), channels, 32, 10);
  std::error_code ec;
  if (train) {
    for (int b = 1; b <= 5; ++b) {
      const fs::path path = dir / ("data_batch_" + std::to_string(b) + ".bin");
      TL_CHECK(fs::exists(path, ec), "cifar10:" + dir.string() + ": no " + path.filename().string() +
                                         " (the binary version's data_batch_1..5.bin and test_batch.bin)");
      read_cifar_file(path.string(), channels, *data);
    }
  } else {
    const fs::path path = dir / "test_batch.bin";
    TL_CHECK(fs::exists(path, ec), "cifar10:" + dir.string() + ": no test_batch.bin");
    read_cifar_file(path.string(), channels, *data);
  }
  return data;
}

// ---- imagefolder ----------------------------------------------------------------------------------

bool image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// Every image file under `dir` (symlinks followed, as torchvision's os.walk(followlinks=True);
// a directory reached twice is a loop and refused), sorted.
void walk_images(const fs::path& dir, std::set<fs::path>& seen, std::vector<fs::path>& files, std::int64_t& other) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  TL_CHECK(!ec, "imagefolder: cannot resolve " + dir.string() + ": " + ec.message());
  TL_CHECK(seen.insert(canonical).second,
           "imagefolder: " + dir.string() + " leads back to " + canonical.string() + " (a symlink loop)");
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
  TL_CHECK(!ec, "imagefolder: cannot list " + dir.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  for (const auto& path : entries) {
    if (fs::is_directory(path, ec)) {
      walk_images(path, seen, files, other);
    } else if (fs::is_regular_file(path, ec) && image_extension(path)) {
      files.push_back(path);
    } else {
      other += 1;
    }
  }
  seen.erase(canonical);  // a loop is a path that reaches its own ancestor; a shared directory is not
}

// The pixels of one image converted to `channels` (1 or 3): grey replicated, alpha dropped, RGB to
// ITU-R 601 luma (PIL's convert("L")).
std::vector<unsigned char> convert_channels(const DecodedImage& image, int channels) {
  const std::size_t n = static_cast<std::size_t>(image.height) * image.width;
  std::vector<unsigned char> out(n * static_cast<std::size_t>(channels));
  const int in = image.channels;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char* p = image.pixels.data() + i * static_cast<std::size_t>(in);
    if (in <= 2) {  // grey (and alpha)
      for (int c = 0; c < channels; ++c)
        out[i * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c)] = p[0];
    } else if (channels == 3) {
      std::memcpy(out.data() + i * 3, p, 3);
    } else {
      out[i] = luma(p[0], p[1], p[2]);
    }
  }
  return out;
}

// Resampling weights of one axis, `in` pixels to `out`: a triangle filter widened by the scale when
// shrinking (PIL's bilinear with antialiasing, what torchvision's Resize does on PIL images).
struct AxisWeights {
  std::vector<int> first;
  std::vector<std::vector<double>> weights;
};
AxisWeights axis_weights(int in, int out) {
  AxisWeights a;
  const double scale = static_cast<double>(in) / out, support = std::max(1.0, scale);
  for (int o = 0; o < out; ++o) {
    const double centre = (o + 0.5) * scale;
    const int lo = std::max(0, static_cast<int>(std::floor(centre - support))),
              hi = std::min(in, static_cast<int>(std::ceil(centre + support)));
    std::vector<double> w;
    double total = 0;
    for (int i = lo; i < hi; ++i) {
      const double x = (i + 0.5 - centre) / support;
      const double v = std::max(0.0, 1.0 - std::abs(x));
      w.push_back(v);
      total += v;
    }
    for (double& v : w) v /= total;
    a.first.push_back(lo);
    a.weights.push_back(std::move(w));
  }
  return a;
}

std::vector<unsigned char> resize(const std::vector<unsigned char>& pixels, int h, int w, int c, int size) {
  const AxisWeights ax = axis_weights(w, size), ay = axis_weights(h, size);
  std::vector<double> rows(static_cast<std::size_t>(h) * size * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < size; ++x)
      for (int ch = 0; ch < c; ++ch) {
        double v = 0;
        for (std::size_t k = 0; k < ax.weights[x].size(); ++k)
          v += ax.weights[x][k] * pixels[(static_cast<std::size_t>(y) * w + ax.first[x] + k) * c + ch];
        rows[(static_cast<std::size_t>(y) * size + x) * c + ch] = v;
      }
  std::vector<unsigned char> out(static_cast<std::size_t>(size) * size * c);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x)
      for (int ch = 0; ch < c; ++ch) {
        double v = 0;
        for (std::size_t k = 0; k < ay.weights[y].size(); ++k)
          v += ay.weights[y][k] * rows[((ay.first[y] + k) * size + x) * c + ch];
        out[(static_cast<std::size_t>(y) * size + x) * c + ch] =
            static_cast<unsigned char>(std::clamp(std::round(v), 0.0, 255.0));
      }
  return out;
}

// One split of an imagefolder: its files and labels, every image decoded once (its size and
// channels checked) before anything is written; decoded again, one at a time, as the writer asks.
class ImageFolderSource final : public Dataset {
 public:
  struct Item {
    fs::path path;
    std::int64_t label;
  };
  ImageFolderSource(std::string name, std::vector<Item> items, int channels, int size, int resize_to,
                    std::int64_t classes)
      : name_(std::move(name)),
        items_(std::move(items)),
        channels_(channels),
        size_(size),
        resize_(resize_to),
        classes_(classes) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(items_.size()); }
  Shape sample_shape() const override { return {channels_, size_, size_}; }
  std::int64_t num_classes() const override { return classes_; }
  std::string describe() const override { return name_; }
  std::int64_t get(std::int64_t index, float* out, double* /*work*/) const override {
    const Item& item = items_.at(static_cast<std::size_t>(index));
    const std::vector<unsigned char> hwc = load(item.path);
    const std::size_t plane = static_cast<std::size_t>(size_) * size_;
    for (std::size_t i = 0; i < plane; ++i)
      for (int c = 0; c < channels_; ++c)
        out[static_cast<std::size_t>(c) * plane + i] = static_cast<float>(hwc[i * channels_ + c]) / 255.0f;
    return item.label;
  }
  // The image at `path` as size x size x channels bytes; throws Error naming the file.
  std::vector<unsigned char> load(const fs::path& path) const {
    try {
      const std::vector<unsigned char> bytes = read_file(path.string(), kMaxImageFile);
      const DecodedImage image = decode_image_file(bytes.data(), bytes.size(), kMaxImagePixels);
      std::vector<unsigned char> pixels = convert_channels(image, channels_);
      if (resize_ > 0) {
        if (image.height != resize_ || image.width != resize_)
          pixels = resize(pixels, image.height, image.width, channels_, resize_);
      } else {
        TL_CHECK(image.height == size_ && image.width == size_,
                 "the image is " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                     " pixels, the data set's first " + std::to_string(size_) + "x" + std::to_string(size_) +
                     " (give --image-size to resize every image to one square size)");
      }
      return pixels;
    } catch (const Error& e) {
      throw Error("imagefolder: " + path.string() + ": " + e.what());
    }
  }

 private:
  std::string name_;
  std::vector<Item> items_;
  int channels_, size_, resize_;
  std::int64_t classes_;
};

// The class folders of one split directory, sorted by name (torchvision's find_classes).
std::vector<std::string> class_folders(const fs::path& split_dir) {
  std::error_code ec;
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(split_dir, ec))
    if (entry.is_directory(ec)) classes.push_back(entry.path().filename().string());
  TL_CHECK(!ec, "imagefolder: cannot list " + split_dir.string() + ": " + ec.message());
  std::sort(classes.begin(), classes.end());
  TL_CHECK(!classes.empty(), "imagefolder: " + split_dir.string() +
                                 " has no class folders (expected ROOT/train/<class>/*.png|jpg, as torchvision's "
                                 "ImageFolder reads)");
  TL_CHECK(static_cast<std::int64_t>(classes.size()) <= kMaxClasses,
           "imagefolder: " + split_dir.string() + " has " + std::to_string(classes.size()) +
               " class folders; a data set holds at most " + std::to_string(kMaxClasses));
  return classes;
}

struct FolderSplit {
  std::vector<ImageFolderSource::Item> items;
  std::int64_t skipped = 0;
};

FolderSplit list_split(const fs::path& split_dir, const std::vector<std::string>& classes, bool train) {
  FolderSplit split;
  std::error_code ec;
  std::int64_t ignored = 0;
  for (const auto& name : train ? classes : class_folders(split_dir)) {
    const auto found = std::find(classes.begin(), classes.end(), name);
    TL_CHECK(found != classes.end(), "imagefolder: " + (split_dir / name).string() +
                                         ": a class the training split does not have (" +
                                         std::to_string(classes.size()) + " classes in train/)");
    const std::int64_t label = found - classes.begin();
    std::set<fs::path> seen;
    std::vector<fs::path> files;
    walk_images(split_dir / name, seen, files, ignored);
    TL_CHECK(!files.empty(), "imagefolder: class folder " + (split_dir / name).string() +
                                 " holds no .png, .jpg or .jpeg file (every class needs at least one image)");
    for (auto& f : files) split.items.push_back({std::move(f), label});
  }
  return split;
}

ImportedDataset import_imagefolder(const fs::path& root, const ImportOptions& o) {
  std::error_code ec;
  TL_CHECK(fs::is_directory(root, ec), "imagefolder:" + root.string() + " is not a directory");
  const fs::path train_dir = root / "train";
  TL_CHECK(fs::is_directory(train_dir, ec), "imagefolder:" + root.string() +
                                                " has no train/ folder (expected ROOT/train/<class>/ and ROOT/test/ "
                                                "or ROOT/val/)");
  fs::path test_dir;
  for (const char* name : {"test", "val"})
    if (test_dir.empty() && fs::is_directory(root / name, ec)) test_dir = root / name;
  const std::vector<std::string> classes = class_folders(train_dir);
  TL_CHECK(classes.size() >= 2, "imagefolder: " + train_dir.string() + " has one class folder; a classifier needs two");
  FolderSplit train = list_split(train_dir, classes, true);
  FolderSplit test;
  if (!test_dir.empty()) test = list_split(test_dir, classes, false);

  // The first training image sets the size (unless resized) and the channel count (unless given).
  ImportedDataset result;
  const auto first = [&] {
    const auto bytes = read_file(train.items.front().path.string(), kMaxImageFile);
    try {
      return decode_image_file(bytes.data(), bytes.size(), kMaxImagePixels);
    } catch (const Error& e) {
      throw Error("imagefolder: " + train.items.front().path.string() + ": " + e.what());
    }
  }();
  const int channels = o.channels != 0 ? o.channels : first.channels <= 2 ? 1 : 3;
  const int size = o.image_size != 0 ? o.image_size : first.height;
  TL_CHECK(o.image_size != 0 || first.height == first.width,
           "imagefolder: " + train.items.front().path.string() + " is " + std::to_string(first.width) + "x" +
               std::to_string(first.height) + "; trainlab stores square images (give --image-size to resize)");
  TL_CHECK(size >= 4 && size <= kMaxImageSize, "imagefolder: images of " + std::to_string(size) +
                                                   " pixels; the data set takes 4..4096 (give --image-size)");
  // Every image decoded once, now: a bad one is refused (or skipped with skip_bad) before writing.
  const auto check_split = [&](FolderSplit& split, const std::string& name) {
    Progress progress(o.progress);
    const ImageFolderSource probe("", {}, channels, size, o.image_size, 1);
    std::vector<ImageFolderSource::Item> kept;
    for (std::size_t i = 0; i < split.items.size(); ++i) {
      try {
        (void)probe.load(split.items[i].path);
        kept.push_back(split.items[i]);
      } catch (const Error& e) {
        if (!o.skip_bad) throw Error(std::string(e.what()) + " (--skip-bad skips such files, counting them)");
        split.skipped += 1;
      }
      progress.tick("checking " + name + " images", static_cast<std::int64_t>(i + 1),
                    static_cast<std::int64_t>(split.items.size()));
    }
    TL_CHECK(!kept.empty(), "imagefolder: every image of " + name + " was skipped as unreadable");
    split.items = std::move(kept);
  };
  check_split(train, "train");
  if (!test_dir.empty()) check_split(test, test_dir.filename().string());
  const auto n_classes = static_cast<std::int64_t>(classes.size());
  result.train = std::make_shared<ImageFolderSource>("imagefolder:" + root.string() + " train", train.items, channels,
                                                     size, o.image_size, n_classes);
  if (!test_dir.empty())
    result.test =
        std::make_shared<ImageFolderSource>("imagefolder:" + root.string() + " " + test_dir.filename().string(),
                                            test.items, channels, size, o.image_size, n_classes);
  result.class_names = classes;
  result.skipped["train"] = train.skipped;
  if (!test_dir.empty()) result.skipped["held_out"] = test.skipped;
  result.source = "imagefolder:" + root.string() + " (train/" +
                  (test_dir.empty() ? std::string(", no test/ or val/") : ", " + test_dir.filename().string() + "/") +
                  ")";
  result.notes.push_back(std::string("channels: ") + std::to_string(channels) +
                         (channels == 3
                              ? " (grey images replicated, RGBA's alpha dropped, as PIL's convert(\"RGB\"))"
                              : " (colour images to ITU-R 601 luma, as PIL's convert(\"L\"); alpha dropped)") +
                         (o.channels == 0 ? ", from the first training image" : ""));
  if (o.image_size != 0)
    result.notes.push_back("size: every image resized to " + std::to_string(size) + "x" + std::to_string(size) +
                           " (bilinear, antialiased when shrinking, as torchvision's Resize on PIL images)");
  if (train.skipped + test.skipped > 0)
    result.notes.push_back("skipped: " + std::to_string(train.skipped + test.skipped) +
                           " unreadable image file(s) (--skip-bad), counted in the manifest");
  return result;
}

// The class count of byte-labelled splits: the largest label + 1 (at least 2).
std::int64_t count_classes(const ByteImages& train, const ByteImages* test, const std::string& what) {
  std::int64_t top = 0;
  for (auto l : train.labels) top = std::max(top, l);
  if (test)
    for (auto l : test->labels) top = std::max(top, l);
  TL_CHECK(top >= 1, what + ": every label is 0; a classifier needs two classes");
  return top + 1;
}

bool inside(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

}  // namespace

std::vector<unsigned char> gunzip_if_gzipped(const std::vector<unsigned char>& bytes, const std::string& what) {
  if (bytes.size() < 2 || bytes[0] != 0x1f || bytes[1] != 0x8b) return bytes;
  z_stream z{};
  TL_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, what + ": cannot start gzip decompression");
  std::vector<unsigned char> out;
  z.next_in = const_cast<unsigned char*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  int status = Z_OK;
  while (status == Z_OK) {
    TL_CHECK(out.size() < kMaxSourceFile,
             what + ": more than " + std::to_string(kMaxSourceFile >> 30) + " GiB uncompressed");
    const std::size_t at = out.size();
    out.resize(at + (1 << 20));
    z.next_out = out.data() + at;
    z.avail_out = 1 << 20;
    status = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (status == Z_BUF_ERROR && z.avail_in == 0) break;  // input ended before the stream did
  }
  const std::string message = z.msg ? z.msg : "";
  inflateEnd(&z);
  TL_CHECK(status == Z_STREAM_END,
           what + ": " +
               (status == Z_BUF_ERROR || status == Z_OK ? std::string("truncated gzip (the stream ends early)")
                                                        : "corrupt gzip (" + message + ")"));
  return out;
}

ImportSource parse_import_source(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = colon == std::string::npos ? "" : text.substr(0, colon);
  const std::string path = colon == std::string::npos ? "" : text.substr(colon + 1);
  ImportSource s;
  s.path = path;
  if (kind == "imagefolder")
    s.kind = ImportKind::imagefolder;
  else if (kind == "idx")
    s.kind = ImportKind::idx;
  else if (kind == "cifar10")
    s.kind = ImportKind::cifar10;
  else
    throw Error("--from " + quote_value(text) + " is not one of imagefolder:ROOT | idx:DIR | cifar10:DIR");
  TL_CHECK(!path.empty(), "--from " + quote_value(text) + " names no directory after '" + kind + ":'");
  return s;
}

ImportedDataset open_import(const ImportSource& source, const ImportOptions& o, const std::string& out) {
  TL_CHECK(o.channels == 0 || o.channels == 1 || o.channels == 3,
           "--channels " + std::to_string(o.channels) + " is not 1 or 3");
  TL_CHECK(o.image_size == 0 || (o.image_size >= 4 && o.image_size <= kMaxImageSize),
           "--image-size " + std::to_string(o.image_size) + " is outside 4..4096");
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::absolute(source.path), ec);
  TL_CHECK(!ec && fs::is_directory(dir, ec), "--from: " + source.path + " is not a directory");
  const fs::path target = fs::weakly_canonical(fs::absolute(out), ec);
  TL_CHECK(!inside(target, dir) && target != dir,
           "--out " + out + " lies inside the source " + dir.string() + " (the import would read what it writes)");
  ImportedDataset result;
  if (source.kind == ImportKind::imagefolder) {
    result = import_imagefolder(dir, o);
  } else {
    TL_CHECK(o.image_size == 0, "--image-size resizes imagefolder images; IDX and CIFAR-10 keep their size");
    TL_CHECK(!o.skip_bad, "--skip-bad is for imagefolder sources; IDX and CIFAR-10 files are refused whole");
    const bool idx = source.kind == ImportKind::idx;
    const int channels = o.channels != 0 ? o.channels : idx ? 1 : 3;
    auto train = idx ? idx_split(dir, "train", channels) : cifar_split(dir, true, channels);
    auto test = idx ? idx_split(dir, "t10k", channels) : cifar_split(dir, false, channels);
    TL_CHECK(train->sample_shape() == test->sample_shape(), "idx:" + dir.string() + ": train images are " +
                                                                shape_str(train->sample_shape()) + ", t10k images " +
                                                                shape_str(test->sample_shape()));
    const std::int64_t classes = idx ? count_classes(*train, test.get(), "idx:" + dir.string()) : 10;
    train->set_classes(classes);
    test->set_classes(classes);
    const bool fashion = dir.string().find("fashion") != std::string::npos;
    result.class_names = !idx                       ? kCifar10Classes
                         : fashion && classes == 10 ? kFashionClasses
                                                    : numbered_classes(classes);
    result.source = (idx ? "idx:" : "cifar10:") + dir.string() + " (" + std::to_string(train->size()) + " train, " +
                    std::to_string(test->size()) + " test)";
    if (idx && fashion) result.notes.push_back("classes: Fashion-MNIST's names (the directory's name says fashion)");
    if (channels != (idx ? 1 : 3))
      result.notes.push_back(idx ? "channels: 3 (grey replicated)" : "channels: 1 (ITU-R 601 luma)");
    result.train = train;
    result.test = test;
  }
  if (!o.class_names.empty()) {
    TL_CHECK(o.class_names.size() == result.class_names.size(),
             "--class-names gives " + std::to_string(o.class_names.size()) + " names; the source has " +
                 std::to_string(result.class_names.size()) + " classes");
    result.class_names = o.class_names;
  }
  return result;
}

}  // namespace trainlab
