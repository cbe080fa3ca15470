#include "engine/data/dataset_import.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "backends/error.h"
#include "engine/data/disk_dataset.h"
#include "engine/data/image_codec.h"
#include "engine/data/record_import.h"
#include "engine/io/fileio.h"
#include "engine/io/progress.h"
#include "engine/io/text.h"

namespace trainlab {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kMaxImageFile = 256ull << 20;   // one image file of an imagefolder
constexpr std::uint64_t kMaxImagePixels = 64ull << 20;  // one decoded image (64 Mpx: 256 MiB as RGBA)
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 24;

// ---- imagefolder ----------------------------------------------------------------------------------

bool image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// What one class folder's walk found besides its image files.
struct WalkCounts {
  std::int64_t other = 0;           // files that are not .png/.jpg/.jpeg
  std::int64_t repeated_dirs = 0;   // directories reached again through another symlink: walked once
  std::int64_t repeated_files = 0;  // image files reached again (a symlink to one already listed)
};

// Every image file under `dir` (symlinks followed, as torchvision's os.walk(followlinks=True)),
// sorted, each real directory walked once and each real file listed once: a directory reached
// again through another link is skipped (a tree of 24 levels of two links each is 2^24 paths to
// one image, and one walk), and one that leads back to its own ancestor is a loop, refused.
void walk_images(const fs::path& dir, std::set<fs::path>& ancestors, std::set<fs::path>& walked,
                 std::set<fs::path>& listed, std::vector<fs::path>& files, WalkCounts& counts) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  TL_CHECK(!ec, "imagefolder: cannot resolve " + dir.string() + ": " + ec.message());
  TL_CHECK(!ancestors.count(canonical),
           "imagefolder: " + dir.string() + " leads back to " + canonical.string() + " (a symlink loop)");
  if (!walked.insert(canonical).second) {
    counts.repeated_dirs += 1;
    return;
  }
  ancestors.insert(canonical);
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
  TL_CHECK(!ec, "imagefolder: cannot list " + dir.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  for (const auto& path : entries) {
    if (fs::is_directory(path, ec)) {
      walk_images(path, ancestors, walked, listed, files, counts);
    } else if (fs::is_regular_file(path, ec) && image_extension(path)) {
      if (listed.insert(fs::canonical(path, ec)).second)
        files.push_back(path);
      else
        counts.repeated_files += 1;
    } else {
      counts.other += 1;
    }
  }
  ancestors.erase(canonical);
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
  std::int64_t unreadable = 0, size_differs = 0;  // skipped with skip_bad
  WalkCounts walk;
  std::int64_t skipped() const { return unreadable + size_differs; }
};

FolderSplit list_split(const fs::path& split_dir, const std::vector<std::string>& classes, bool train) {
  FolderSplit split;
  for (const auto& name : train ? classes : class_folders(split_dir)) {
    const auto found = std::find(classes.begin(), classes.end(), name);
    TL_CHECK(found != classes.end(), "imagefolder: " + (split_dir / name).string() +
                                         ": a class the training split does not have (" +
                                         std::to_string(classes.size()) + " classes in train/)");
    const std::int64_t label = found - classes.begin();
    std::set<fs::path> ancestors, walked, listed;
    std::vector<fs::path> files;
    walk_images(split_dir / name, ancestors, walked, listed, files, split.walk);
    TL_CHECK(!files.empty(), "imagefolder: class folder " + (split_dir / name).string() +
                                 " holds no .png, .jpg or .jpeg file (every class needs at least one image)");
    for (auto& f : files) split.items.push_back({std::move(f), label});
  }
  return split;
}

// The class names a data set stores for `folders`: a name that is not UTF-8 kept as its bytes,
// the ill-formed ones written \xHH (escape_invalid_utf8); checked as the reader will check them.
std::vector<std::string> class_names_of(const std::vector<std::string>& folders, const fs::path& train_dir,
                                        std::vector<std::string>& notes) {
  std::vector<std::string> names;
  std::int64_t escaped = 0;
  std::string example;
  for (const auto& folder : folders) {
    names.push_back(escape_invalid_utf8(folder));
    if (names.back() == folder) continue;
    if (escaped++ == 0) example = names.back();
  }
  if (escaped > 0)
    notes.push_back("class names: " + std::to_string(escaped) +
                    " folder name(s) not UTF-8, stored with each ill-formed byte as \\xHH (e.g. " +
                    quote_value(example) + ")");
  check_class_names(names, "imagefolder: " + train_dir.string() + ": class folder");
  return names;
}

// One image file decoded: its size and channels, or why it could not be.
struct ImageProbe {
  int height = 0, width = 0, channels = 0;
  std::string error;  // empty: decoded
};

std::vector<ImageProbe> probe_split(const FolderSplit& split, const std::string& name, const ImportOptions& o) {
  ThrottledProgress progress(o.progress);
  std::vector<ImageProbe> probes;
  for (const auto& item : split.items) {
    ImageProbe p;
    try {
      const auto bytes = read_file(item.path.string(), kMaxImageFile);
      const DecodedImage image = decode_image_file(bytes.data(), bytes.size(), kMaxImagePixels);
      p = {image.height, image.width, image.channels, ""};
    } catch (const Error& e) {
      p.error = e.what();
    }
    probes.push_back(std::move(p));
    const auto done = static_cast<std::int64_t>(probes.size()), total = static_cast<std::int64_t>(split.items.size());
    progress.tick(done, total, [&] {
      return "make-dataset: checking " + name + " images " + std::to_string(done) + "/" + std::to_string(total);
    });
  }
  return probes;
}

// What every image of the data set is held to: its channel count and (unless resized) its size.
struct Reference {
  int channels = 0, size = 0;
  std::string channels_from, size_from;  // where they came from, for the notes ("" : given)
};

// Without skip_bad, from the first training image (any problem with it is refused). With skip_bad,
// from the images that agree: channels from the first readable one, the size the most common among
// the readable square ones (the first such on a tie), so that one damaged file never sets it.
Reference choose_reference(const FolderSplit& train, const std::vector<ImageProbe>& probes, const ImportOptions& o) {
  Reference ref;
  std::size_t first = 0;
  if (!o.skip_bad) {
    TL_CHECK(probes[0].error.empty(), "imagefolder: " + train.items[0].path.string() + ": " + probes[0].error +
                                          " (--skip-bad skips such files, counting them)");
  } else {
    while (first < probes.size() && !probes[first].error.empty()) ++first;
    TL_CHECK(first < probes.size(), "imagefolder: every image of train was skipped: " + std::to_string(probes.size()) +
                                        " unreadable (the first, " + train.items[0].path.string() + ": " +
                                        probes[0].error + ")");
  }
  const ImageProbe& p = probes[first];
  ref.channels = o.channels != 0 ? o.channels : p.channels <= 2 ? 1 : 3;
  if (o.channels == 0)
    ref.channels_from = o.skip_bad ? "the first readable training image" : "the first training image";
  if (o.image_size != 0) {
    ref.size = o.image_size;
    return ref;
  }
  if (!o.skip_bad) {
    TL_CHECK(p.height == p.width, "imagefolder: " + train.items[0].path.string() + " is " + std::to_string(p.width) +
                                      "x" + std::to_string(p.height) +
                                      "; trainlab stores square images (give --image-size to resize)");
    ref.size = p.height;
  } else {
    std::map<int, std::int64_t> votes;
    std::vector<int> order;
    for (const auto& q : probes)
      if (q.error.empty() && q.height == q.width && q.height >= 4 && q.height <= kMaxImageSize &&
          votes[q.height]++ == 0)
        order.push_back(q.height);
    TL_CHECK(!order.empty(),
             "imagefolder: no readable training image is square with a side of 4..4096 pixels "
             "(give --image-size to resize every image to one square size)");
    ref.size = order[0];
    for (int side : order)
      if (votes[side] > votes[ref.size]) ref.size = side;
    ref.size_from = "the most common size among the readable training images (" + std::to_string(votes[ref.size]) +
                    " of " + std::to_string(probes.size()) + ")";
  }
  TL_CHECK(ref.size >= 4 && ref.size <= kMaxImageSize, "imagefolder: images of " + std::to_string(ref.size) +
                                                           " pixels; the data set takes 4..4096 (give --image-size)");
  return ref;
}

// The images of `split` that agree with `ref`: the others refused, or with skip_bad skipped and
// counted (unreadable, or of another size), every one named in the refusal.
void keep_agreeing(FolderSplit& split, const std::vector<ImageProbe>& probes, const Reference& ref,
                   const ImportOptions& o, const std::string& name) {
  std::vector<ImageFolderSource::Item> kept;
  for (std::size_t i = 0; i < split.items.size(); ++i) {
    const ImageProbe& p = probes[i];
    const std::string path = split.items[i].path.string();
    std::string why;
    if (!p.error.empty()) {
      why = "imagefolder: " + path + ": " + p.error;
      split.unreadable += o.skip_bad;
    } else if (o.image_size == 0 && (p.height != ref.size || p.width != ref.size)) {
      why = "imagefolder: " + path + ": size differs: " + std::to_string(p.width) + "x" + std::to_string(p.height) +
            " pixels, the data set's " + std::to_string(ref.size) + "x" + std::to_string(ref.size) +
            " (give --image-size to resize every image to one square size)";
      split.size_differs += o.skip_bad;
    }
    if (why.empty())
      kept.push_back(split.items[i]);
    else if (!o.skip_bad)
      throw Error(why + " (--skip-bad skips such files, counting them)");
  }
  TL_CHECK(!kept.empty(), "imagefolder: every image of " + name + " was skipped: " + std::to_string(split.unreadable) +
                              " unreadable, " + std::to_string(split.size_differs) + " not " +
                              std::to_string(ref.size) + "x" + std::to_string(ref.size));
  split.items = std::move(kept);
}

void note_imagefolder(const FolderSplit& train, const FolderSplit& test, const Reference& ref, const ImportOptions& o,
                      std::vector<std::string>& notes) {
  notes.push_back(std::string("channels: ") + std::to_string(ref.channels) +
                  (ref.channels == 3 ? " (grey images replicated, RGBA's alpha dropped, as PIL's convert(\"RGB\"))"
                                     : " (colour images to ITU-R 601 luma, as PIL's convert(\"L\"); alpha dropped)") +
                  (ref.channels_from.empty() ? "" : ", from " + ref.channels_from));
  if (o.image_size != 0)
    notes.push_back("size: every image resized to " + std::to_string(ref.size) + "x" + std::to_string(ref.size) +
                    " (bilinear, antialiased when shrinking, as torchvision's Resize on PIL images)");
  else if (!ref.size_from.empty())
    notes.push_back("size: " + std::to_string(ref.size) + "x" + std::to_string(ref.size) + ", " + ref.size_from);
  const std::int64_t unreadable = train.unreadable + test.unreadable, differs = train.size_differs + test.size_differs;
  if (unreadable + differs > 0)
    notes.push_back("skipped: " + std::to_string(unreadable + differs) +
                    " image file(s) (--skip-bad): " + std::to_string(unreadable) + " unreadable, " +
                    std::to_string(differs) + " of another size" + "; counted in the manifest");
  const std::int64_t dirs = train.walk.repeated_dirs + test.walk.repeated_dirs,
                     files = train.walk.repeated_files + test.walk.repeated_files;
  if (dirs + files > 0)
    notes.push_back("symlinks: " + std::to_string(dirs) + " directory path(s) and " + std::to_string(files) +
                    " file path(s) led to what another link already reached: each read once");
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
  ImportedDataset result;
  result.class_names = class_names_of(classes, train_dir, result.notes);  // refused here, before any image is read
  FolderSplit train = list_split(train_dir, classes, true);
  FolderSplit test;
  if (!test_dir.empty()) test = list_split(test_dir, classes, false);

  // Every image decoded once, now: one that does not agree is refused (or skipped with skip_bad)
  // before anything is written.
  const std::vector<ImageProbe> train_probes = probe_split(train, "train", o);
  const Reference ref = choose_reference(train, train_probes, o);
  keep_agreeing(train, train_probes, ref, o, "train");
  if (!test_dir.empty())
    keep_agreeing(test, probe_split(test, test_dir.filename().string(), o), ref, o, test_dir.filename().string());
  const auto n_classes = static_cast<std::int64_t>(classes.size());
  const std::string where = "imagefolder:" + escape_invalid_utf8(root.string());
  result.train = std::make_shared<ImageFolderSource>(where + " train", train.items, ref.channels, ref.size,
                                                     o.image_size, n_classes);
  if (!test_dir.empty())
    result.test = std::make_shared<ImageFolderSource>(where + " " + test_dir.filename().string(), test.items,
                                                      ref.channels, ref.size, o.image_size, n_classes);
  result.skipped["train"] = train.skipped();
  if (!test_dir.empty()) result.skipped["held_out"] = test.skipped();
  result.source = where + " (train/" +
                  (test_dir.empty() ? std::string(", no test/ or val/") : ", " + test_dir.filename().string() + "/") +
                  ")";
  note_imagefolder(train, test, ref, o, result.notes);
  return result;
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
  check_class_names(o.class_names, "--class-names: name ");  // the reader's rule, before any work
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
    result = idx ? import_idx(dir, channels) : import_cifar10(dir, channels);
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
