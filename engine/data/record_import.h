// The importers of files of fixed-size 8-bit records: IDX (MNIST's and Fashion-MNIST's format,
// gzipped or not) and CIFAR-10's binary batches. Each file is checked whole as a stream before
// anything is written (magic, dimensions, lengths, every label), and its samples are then read one
// record at a time as the writer asks: what an import holds is one record and zlib's window,
// whatever the files' size (a 4 GiB batch file imports under an address-space cap of a few MiB
// above the tool's own).
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/data/dataset_import.h"

namespace trainlab {

// The largest IDX or CIFAR-10 file an import reads (uncompressed), and so the largest a gzipped
// one may inflate to.
constexpr std::uint64_t kMaxSourceFile = 4ull << 30;

// idx:DIR: train-images-idx3-ubyte[.gz] and its labels, t10k-... the held-out split; `channels`
// 1 or 3 (grey replicated).
ImportedDataset import_idx(const std::filesystem::path& dir, int channels);
// cifar10:DIR: data_batch_1..5.bin the training split, test_batch.bin the held-out one; `channels`
// 3 or 1 (ITU-R 601 luma, as PIL's convert("L")).
ImportedDataset import_cifar10(const std::filesystem::path& dir, int channels);

// ITU-R 601 luma of one RGB pixel, as PIL's convert("L") computes it.
inline unsigned char luma(unsigned r, unsigned g, unsigned b) {
  return static_cast<unsigned char>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

}  // namespace trainlab
