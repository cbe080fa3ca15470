// Fuzz target: the importers (`make-dataset --from`, engine/data/dataset_import.h). The first byte,
// mod 3, picks the source; the rest is
//   0  IDX: the training images file (bytes 1-2: where the labels file begins), gzipped when bit 4
//      of the first byte is set; t10k files fixed and valid;
//   1  CIFAR-10: data_batch_1.bin; the other batches and test_batch.bin one valid record each;
//   2  an imagefolder tree built by the bytes as a program of 3-byte steps (step, a path, another):
//      make a directory, write an 8x8 PNG, a 16x16 JPEG or a truncated one, or link one path to
//      another (symlink DAGs and loops), with names that are not UTF-8 among them; bit 4 of the
//      first byte sets --skip-bad, bit 5 --image-size 8.
// Then every sample of both splits is read, as the writer would: an import is an Error or a data
// set whose every sample reads.
#include <fstream>
#include <vector>

#include "engine/data/dataset_import.h"
#include "engine/data/image_codec.h"
#include "fuzz_util.h"

namespace {

using namespace trainlab;
namespace fs = std::filesystem;

void write(const fs::path& path, const void* data, std::size_t size) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}
void write(const fs::path& path, const std::vector<unsigned char>& bytes) { write(path, bytes.data(), bytes.size()); }

std::vector<unsigned char> idx(std::uint32_t magic, const std::vector<std::uint32_t>& dims, std::size_t data) {
  std::vector<unsigned char> out;
  const auto put = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
  };
  put(magic);
  for (auto d : dims) put(d);
  for (std::size_t i = 0; i < data; ++i) out.push_back(static_cast<unsigned char>(i % 2));
  return out;
}

void read_all(const ImportedDataset& d) {
  for (const auto* split : {d.train.get(), d.test.get()}) {
    if (split == nullptr) continue;
    std::vector<float> sample(static_cast<std::size_t>(split->sample_elements()));
    for (std::int64_t i = 0; i < split->size(); ++i) split->get(i, sample.data());
  }
}

// The names the imagefolder program uses: the split folders, class folders (one latin-1, not
// UTF-8), what lies in a class folder.
const char* const kSplits[] = {"train", "test"};
const char* const kClasses[] = {"a", "b", "caf\xe9", "x"};
const char* const kLeaves[] = {"1.png", "2.jpg", "3.jpeg", "n.txt", "x", "a", "caf\xe9", "y"};

void imagefolder(const fs::path& root, const std::uint8_t* p, std::size_t n) {
  static const std::vector<unsigned char> png8 = [] {
    const std::vector<unsigned char> px(8 * 8 * 3, 90);
    return encode_image(ImageCodec::png, px.data(), {8, 8, 3}, 0);
  }();
  static const std::vector<unsigned char> jpeg16 = [] {
    const std::vector<unsigned char> px(16 * 16, 40);
    return encode_image(ImageCodec::jpeg, px.data(), {16, 16, 1}, 80);
  }();
  // A path inside the tree from one byte: bit 0 the split, bits 1-2 the class, bits 3-5 what lies
  // in it; bit 7 stops at the class folder.
  const auto path = [&](std::uint8_t b) {
    const fs::path cls = root / kSplits[b & 1] / kClasses[(b >> 1) & 3];
    return (b & 128) ? cls : cls / kLeaves[(b >> 3) & 7];
  };
  std::error_code ec;
  for (std::size_t i = 0; i + 3 <= n && i < 3 * 64; i += 3) {
    const fs::path a = path(p[i + 1]), b = path(p[i + 2]);
    switch (p[i] % 6) {
      case 0:
        fs::create_directories(a, ec);
        break;
      case 1:
        write(a, png8);
        break;
      case 2:
        write(a, jpeg16);
        break;
      case 3:
        write(a, png8.data(), p[i + 2] % png8.size());
        break;  // truncated
      case 4:
        fs::create_directories(a.parent_path(), ec), fs::create_directory_symlink(b, a, ec);
        break;
      default:
        fs::create_directories(a.parent_path(), ec), fs::create_symlink(b, a, ec);
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const fs::path root = fuzz::scratch() / "source", out = fuzz::scratch() / "out";
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(root, ec);
  const std::uint8_t mode = data[0];
  ImportOptions o;
  std::string from;
  if (mode % 3 == 0) {
    const std::size_t split = size < 3 ? size : std::min<std::size_t>(size, 3 + (data[1] | data[2] << 8));
    const char* gz = (mode & 16) ? ".gz" : "";
    std::vector<unsigned char> images(data + std::min<std::size_t>(3, size), data + split),
        labels(data + split, data + size);
    write(root / (std::string("train-images-idx3-ubyte") + gz), images);
    write(root / (std::string("train-labels-idx1-ubyte") + gz), labels);
    write(root / "t10k-images-idx3-ubyte", idx(0x803, {2, 4, 4}, 32));
    write(root / "t10k-labels-idx1-ubyte", idx(0x801, {2}, 2));
    from = "idx:" + root.string();
  } else if (mode % 3 == 1) {
    std::vector<unsigned char> record(3073, 5);
    record[0] = 1;
    for (int b = 2; b <= 5; ++b) write(root / ("data_batch_" + std::to_string(b) + ".bin"), record);
    write(root / "test_batch.bin", record);
    write(root / "data_batch_1.bin", data + 1, size - 1);
    from = "cifar10:" + root.string();
  } else {
    imagefolder(root, data + 1, size - 1);
    o.skip_bad = (mode & 16) != 0;
    o.image_size = (mode & 32) ? 8 : 0;
    from = "imagefolder:" + root.string();
  }
  fuzz::expect_error_or_success([&] { read_all(open_import(parse_import_source(from), o, out.string())); });
  return 0;
}
