#include "engine/data/record_import.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "backends/error.h"
#include "engine/data/disk_dataset.h"
#include "engine/io/text.h"

namespace trainlab {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kChunk = 1 << 20;  // what a check reads at a time

std::string hex(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", v);
  return text;
}

std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// One file read front to back through zlib, which reads a gzip stream decompressed and any other
// file as it is. A corrupt or truncated gzip stream is an Error naming the file.
class ByteStream {
 public:
  explicit ByteStream(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    TL_CHECK(fs::is_regular_file(path_, ec), "'" + path_ + "' is not a regular file");  // a FIFO would block
    file_ = gzopen(path_.c_str(), "rb");
    TL_CHECK(file_ != nullptr, "cannot open '" + path_ + "': " + std::strerror(errno ? errno : ENOMEM));
    gzbuffer(file_, 1 << 16);
  }
  ~ByteStream() { gzclose(file_); }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Up to `n` bytes into `out`; fewer only where the file ends.
  std::size_t read(unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      const int got = gzread(file_, out + done, static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30)));
      if (got < 0) fail();
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    if (done < n) fail_if_error();  // a gzip stream that ends early says so here
    return done;
  }
  // Past `n` bytes (decompressed and dropped for a gzip stream).
  void skip(std::uint64_t n) {
    if (n > 0 && gzseek(file_, static_cast<z_off_t>(n), SEEK_CUR) < 0) fail();
  }
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail() {
    int err = Z_OK;
    const char* message = gzerror(file_, &err);
    throw Error(path_ + ": " +
                (err == Z_BUF_ERROR ? std::string("truncated gzip (the stream ends early)")
                 : err == Z_ERRNO   ? std::string("cannot read: ") + std::strerror(errno)
                                    : "corrupt gzip (" + std::string(message) + ")"));
  }
  void fail_if_error() {
    int err = Z_OK;
    gzerror(file_, &err);
    if (err != Z_OK) fail();
  }
  std::string path_;
  gzFile file_ = nullptr;
};

// Reads what is left of `in`, `kChunk` bytes at a time, handing each chunk to `visit`, and returns
// how many bytes there were (stopping, and returning `limit` + 1, once past `limit`).
template <class Visit>
std::uint64_t stream_rest(ByteStream& in, std::uint64_t limit, Visit&& visit) {
  std::vector<unsigned char> chunk(kChunk);
  std::uint64_t total = 0;
  while (true) {
    const std::size_t got = in.read(chunk.data(), chunk.size());
    if (got == 0) return total;
    if (total + got > limit) return limit + 1;
    visit(chunk.data(), got, total);
    total += got;
  }
}

// ---- checks: each file streamed whole, once ----------------------------------------------------

struct IdxHeader {
  std::vector<std::uint32_t> dims;
  std::uint64_t header_bytes = 0;
  unsigned max_byte = 0;  // the largest data byte (the labels file's largest label)
};

IdxHeader check_idx(const std::string& path, int dims) {
  ByteStream in(path);
  unsigned char head[16];
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(dims);
  const std::size_t got = in.read(head, header);
  TL_CHECK(got >= 4, path + ": " + std::to_string(got) + " bytes, too short for an IDX header");
  const std::uint32_t magic = big_endian(head);
  const std::uint32_t expected = 0x0800u + static_cast<std::uint32_t>(dims);  // unsigned bytes, `dims` dimensions
  TL_CHECK(magic == expected, path + ": magic number 0x" + hex(magic) + ", expected 0x" + hex(expected) +
                                  " (IDX, unsigned bytes, " + std::to_string(dims) + " dimension(s))");
  TL_CHECK(got == header, path + ": truncated IDX header");
  IdxHeader h;
  h.header_bytes = header;
  std::uint64_t count = 1;
  for (int i = 0; i < dims; ++i) {
    h.dims.push_back(big_endian(head + 4 + 4 * i));
    count *= h.dims.back();
    TL_CHECK(count <= kMaxSourceFile,
             path + ": dimensions too large (more than " + std::to_string(kMaxSourceFile >> 30) + " GiB of data)");
  }
  const bool labels = dims == 1;
  const std::uint64_t data = stream_rest(in, count, [&](const unsigned char* p, std::size_t n, std::uint64_t) {
    if (labels) h.max_byte = std::max<unsigned>(h.max_byte, *std::max_element(p, p + n));
  });
  TL_CHECK(data == count, path + ": " + (data > count ? "more than " + std::to_string(count) : std::to_string(data)) +
                              " bytes of data, its header says " + std::to_string(count) + " (truncated or extended)");
  return h;
}

constexpr std::size_t kCifarRecord = 1 + 3 * 32 * 32;  // a label, then 1024 red, green and blue bytes

// The record count of one CIFAR-10 batch file, every label checked.
std::uint64_t check_cifar(const std::string& path) {
  ByteStream in(path);
  std::uint64_t bad_record = ~std::uint64_t{0};
  unsigned bad_label = 0;
  const std::uint64_t bytes =
      stream_rest(in, kMaxSourceFile, [&](const unsigned char* p, std::size_t n, std::uint64_t at) {
        // The label bytes inside this chunk: offsets 0, 3073, ... of the file.
        for (std::uint64_t r = (at + kCifarRecord - 1) / kCifarRecord; r * kCifarRecord < at + n; ++r)
          if (p[r * kCifarRecord - at] >= 10 && bad_record == ~std::uint64_t{0}) {
            bad_record = r;
            bad_label = p[r * kCifarRecord - at];
          }
      });
  TL_CHECK(bytes <= kMaxSourceFile, path + ": more than " + std::to_string(kMaxSourceFile >> 30) +
                                        " GiB (a CIFAR-10 batch file holds 10,000 records of 3073 bytes)");
  TL_CHECK(bytes > 0 && bytes % kCifarRecord == 0,
           path + ": " + std::to_string(bytes) + " bytes is not a whole number of CIFAR-10 records (" +
               std::to_string(kCifarRecord) + " bytes each: a label, then 1024 red, green and blue bytes)");
  TL_CHECK(bad_record == ~std::uint64_t{0}, path + ": record " + std::to_string(bad_record) + " has label " +
                                                std::to_string(bad_label) + "; CIFAR-10's labels are 0..9");
  return bytes / kCifarRecord;
}

// ---- reading: one record at a time ---------------------------------------------------------------

// Record i of files of fixed-size records, read in order: the writer asks for 0, 1, 2, ... (and
// the first samples again once); a later index skips forward, an earlier one reopens the file.
class RecordCursor {
 public:
  struct Part {
    std::string path;
    std::uint64_t header = 0, count = 0;
  };
  RecordCursor(std::vector<Part> parts, std::size_t record) : parts_(std::move(parts)), record_(record) {}
  std::uint64_t count() const {
    std::uint64_t n = 0;
    for (const auto& p : parts_) n += p.count;
    return n;
  }
  void read(std::uint64_t index, unsigned char* out) {
    std::size_t part = 0;
    while (index >= parts_[part].count) index -= parts_[part++].count;
    if (!file_ || part != part_ || index < next_) {
      file_ = std::make_unique<ByteStream>(parts_[part].path);
      file_->skip(parts_[part].header);
      part_ = part;
      next_ = 0;
    }
    file_->skip((index - next_) * record_);
    TL_CHECK(file_->read(out, record_) == record_, parts_[part].path + ": record " + std::to_string(index) +
                                                       " is missing (the file changed since it "
                                                       "was checked)");
    next_ = index + 1;
  }

 private:
  std::vector<Part> parts_;
  std::size_t record_;
  std::unique_ptr<ByteStream> file_;
  std::size_t part_ = 0;
  std::uint64_t next_ = 0;
};

// Samples as [C, H, W] values of byte / 255, read from their records as asked.
class RecordImages final : public Dataset {
 public:
  enum class Form { idx, cifar };  // idx: a grey H x W record and a label file; cifar: label + RGB planes
  RecordImages(std::string name, Form form, RecordCursor images, std::unique_ptr<RecordCursor> labels,
               std::int64_t channels, std::int64_t size)
      : name_(std::move(name)),
        form_(form),
        images_(std::move(images)),
        labels_(std::move(labels)),
        channels_(channels),
        size_(size),
        count_(static_cast<std::int64_t>(images_.count())),
        record_(static_cast<std::size_t>(form == Form::idx ? size * size : kCifarRecord)) {}

  std::int64_t size() const override { return count_; }
  Shape sample_shape() const override { return {channels_, size_, size_}; }
  std::int64_t num_classes() const override { return classes_; }
  std::string describe() const override { return name_; }
  void set_classes(std::int64_t classes) { classes_ = classes; }

  std::int64_t get(std::int64_t index, float* out, double* /*work*/) const override {
    TL_CHECK(index >= 0 && index < count_,
             name_ + ": index " + std::to_string(index) + " is outside [0, " + std::to_string(count_) + ")");
    const std::lock_guard<std::mutex> lock(mutex_);
    record_bytes_.resize(record_);
    images_.read(static_cast<std::uint64_t>(index), record_bytes_.data());
    const std::size_t plane = static_cast<std::size_t>(size_ * size_);
    std::int64_t label = 0;
    if (form_ == Form::idx) {
      unsigned char byte = 0;
      labels_->read(static_cast<std::uint64_t>(index), &byte);
      label = byte;
      for (std::int64_t c = 0; c < channels_; ++c)  // grey replicated into each channel asked for
        for (std::size_t i = 0; i < plane; ++i) out[c * plane + i] = static_cast<float>(record_bytes_[i]) / 255.0f;
    } else {
      label = record_bytes_[0];
      const unsigned char* rgb = record_bytes_.data() + 1;
      for (std::size_t i = 0; i < plane; ++i) {
        if (channels_ == 3) {
          for (std::size_t c = 0; c < 3; ++c) out[c * plane + i] = static_cast<float>(rgb[c * plane + i]) / 255.0f;
        } else {
          out[i] = static_cast<float>(luma(rgb[i], rgb[plane + i], rgb[2 * plane + i])) / 255.0f;
        }
      }
    }
    return label;
  }

 private:
  std::string name_;
  Form form_;
  mutable RecordCursor images_;
  mutable std::unique_ptr<RecordCursor> labels_;
  std::int64_t channels_, size_, count_, classes_ = 0;
  std::size_t record_;
  mutable std::vector<unsigned char> record_bytes_;
  mutable std::mutex mutex_;
};

// ---- IDX -----------------------------------------------------------------------------------------

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

std::shared_ptr<RecordImages> idx_split(const fs::path& dir, const std::string& split, int channels,
                                        unsigned& max_label) {
  const std::string images_path = find_file(dir, idx_names(split, "images", 3), split + " images");
  const std::string labels_path = find_file(dir, idx_names(split, "labels", 1), split + " labels");
  const IdxHeader images = check_idx(images_path, 3), labels = check_idx(labels_path, 1);
  const std::uint32_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  TL_CHECK(n == labels.dims[0], images_path + " holds " + std::to_string(n) + " images, " + labels_path + " " +
                                    std::to_string(labels.dims[0]) + " labels");
  TL_CHECK(n >= 1, images_path + ": no images");
  TL_CHECK(h == w && h >= 4 && h <= static_cast<std::uint32_t>(kMaxImageSize),
           images_path + ": images of " + std::to_string(h) + "x" + std::to_string(w) +
               " pixels; trainlab stores square images of 4..4096 pixels");
  max_label = std::max(max_label, labels.max_byte);
  RecordCursor pixels({{images_path, images.header_bytes, n}}, static_cast<std::size_t>(h) * w);
  auto label_file =
      std::make_unique<RecordCursor>(std::vector<RecordCursor::Part>{{labels_path, labels.header_bytes, n}}, 1);
  return std::make_shared<RecordImages>("idx:" + escape_invalid_utf8(dir.string()) + " " + split,
                                        RecordImages::Form::idx, std::move(pixels), std::move(label_file), channels, h);
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

// ---- CIFAR-10 ------------------------------------------------------------------------------------

std::shared_ptr<RecordImages> cifar_split(const fs::path& dir, bool train, int channels) {
  std::error_code ec;
  std::vector<RecordCursor::Part> parts;
  for (int b = 1; b <= (train ? 5 : 1); ++b) {
    const fs::path path = dir / (train ? "data_batch_" + std::to_string(b) + ".bin" : std::string("test_batch.bin"));
    TL_CHECK(fs::exists(path, ec), "cifar10:" + dir.string() + ": no " + path.filename().string() +
                                       " (the binary version's data_batch_1..5.bin and test_batch.bin)");
    parts.push_back({path.string(), 0, check_cifar(path.string())});
  }
  auto data = std::make_shared<RecordImages>(
      "cifar10:" + escape_invalid_utf8(dir.string()) + (train ? " train" : " test"), RecordImages::Form::cifar,
      RecordCursor(std::move(parts), kCifarRecord), nullptr, channels, 32);
  data->set_classes(10);
  return data;
}

std::string describe_source(const char* kind, const fs::path& dir, const Dataset& train, const Dataset& test) {
  return kind + escape_invalid_utf8(dir.string()) + " (" + std::to_string(train.size()) + " train, " +
         std::to_string(test.size()) + " test)";
}

}  // namespace

ImportedDataset import_idx(const fs::path& dir, int channels) {
  unsigned max_label = 0;
  auto train = idx_split(dir, "train", channels, max_label);
  auto test = idx_split(dir, "t10k", channels, max_label);
  TL_CHECK(train->sample_shape() == test->sample_shape(), "idx:" + dir.string() + ": train images are " +
                                                              shape_str(train->sample_shape()) + ", t10k images " +
                                                              shape_str(test->sample_shape()));
  TL_CHECK(max_label >= 1, "idx:" + dir.string() + ": every label is 0; a classifier needs two classes");
  const std::int64_t classes = std::int64_t{max_label} + 1;  // the largest label + 1
  train->set_classes(classes);
  test->set_classes(classes);
  ImportedDataset result;
  const bool fashion = dir.string().find("fashion") != std::string::npos;
  result.class_names = fashion && classes == 10 ? kFashionClasses : numbered_classes(classes);
  result.source = describe_source("idx:", dir, *train, *test);
  if (fashion) result.notes.push_back("classes: Fashion-MNIST's names (the directory's name says fashion)");
  if (channels != 1) result.notes.push_back("channels: 3 (grey replicated)");
  result.train = train;
  result.test = test;
  return result;
}

ImportedDataset import_cifar10(const fs::path& dir, int channels) {
  auto train = cifar_split(dir, true, channels);
  auto test = cifar_split(dir, false, channels);
  ImportedDataset result;
  result.class_names = kCifar10Classes;
  result.source = describe_source("cifar10:", dir, *train, *test);
  if (channels != 3) result.notes.push_back("channels: 1 (ITU-R 601 luma)");
  result.train = train;
  result.test = test;
  return result;
}

}  // namespace trainlab
