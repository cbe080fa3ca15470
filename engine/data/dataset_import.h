// Real image data sets in, as a Dataset the data-set writer takes (`trainlab make-dataset --from`):
//   imagefolder:ROOT  class folders of PNG/JPEG files under ROOT/train and ROOT/test (or ROOT/val),
//                     classes named and ordered as torchvision's ImageFolder does (sorted folder
//                     names); grey, RGB and RGBA read (RGBA's alpha dropped and grey replicated to
//                     RGB, as PIL's convert("RGB") does; or to grey, ITU-R 601 luma, as its
//                     convert("L")), every image of one size unless image_size resizes them;
//   idx:DIR           MNIST-format IDX files, gzipped or not (train-images-idx3-ubyte[.gz],
//                     train-labels-idx1-ubyte[.gz], t10k-... ; MNIST's and Fashion-MNIST's names);
//   cifar10:DIR       the CIFAR-10 binary version's data_batch_1..5.bin and test_batch.bin.
// Every sample's values are its 8-bit pixels / 255 (torchvision's ToTensor), [C, H, W]; the writer
// stores them as exactly those bytes and records the training split's per-channel mean and
// standard deviation, which the reader standardises with (DatasetWriteOptions::unit_values,
// normalize). Everything is checked before anything is written: counts, magic numbers, record
// lengths, every image decoded once; a problem is an Error naming the file and what is allowed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace trainlab {

enum class ImportKind { imagefolder, idx, cifar10 };
struct ImportSource {
  ImportKind kind = ImportKind::idx;
  std::string path;
};
// "imagefolder:ROOT", "idx:DIR" or "cifar10:DIR"; throws Error naming the text and the three forms.
ImportSource parse_import_source(const std::string& text);

struct ImportOptions {
  int image_size = 0;     // imagefolder: resize every image to this square size (0: they must share one)
  int channels = 0;       // 1 or 3 (0: the source's: IDX 1, CIFAR-10 3, imagefolder 1 if its first image is grey)
  bool skip_bad = false;  // imagefolder: skip files that are not readable images (counted) instead of refusing
  std::vector<std::string> class_names;  // override the source's (as many as it has classes)
  // Called with one line now and then (every ~2 s) on long imports; null: quiet.
  std::function<void(const std::string& line)> progress;
};

struct ImportedDataset {
  std::shared_ptr<const Dataset> train, test;   // test: the source's test split (held out)
  std::vector<std::string> class_names;         // in label order
  std::string source;                           // for the manifest: "idx:/abs/dir" and what was read
  std::map<std::string, std::int64_t> skipped;  // per split ("train", "held_out"): files skipped
  std::vector<std::string> notes;               // conversions made, one line each
};

// Reads and checks the source (imagefolder: every image decoded once). `out`, the data set's
// directory to be, must not lie inside the source (refused: the import would read itself).
ImportedDataset open_import(const ImportSource& source, const ImportOptions& options, const std::string& out);

// The IDX and CIFAR-10 formats, for tests that write small files of their own.
std::vector<unsigned char> gunzip_if_gzipped(const std::vector<unsigned char>& bytes, const std::string& what);

}  // namespace trainlab
