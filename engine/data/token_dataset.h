// Token data sets on disk: `trainlab make-dataset --from text:FILE|DIR` writes a text corpus
// (engine/data/text_corpus.h) as two token streams, train and held_out (the corpus's last tenth by
// default, nanoGPT's split), with the vocabulary that decodes them. The directory is written as the
// image data sets are (engine/data/dataset_dir.h: staged, renamed into place, a manifest written
// last with its own CRC-32, a replace that removes only its own files):
//   manifest.json  format "trainlab-token-dataset", version, source, vocabulary (chars | bytes),
//                  symbols (token id -> code point or byte), token_bytes (2 when the vocabulary fits
//                  16 bits, else 4), per split its token count and its file with size and CRC-32;
//   train.bin, held_out.bin  the token ids, little-endian, token_bytes each.
// Opening a split reads its stream once and checks its size and CRC-32 (a truncated or corrupted
// file is an Error naming it) and every id against the vocabulary; the loader then cuts it into
// windows (engine/data/token_windows.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/disk_dataset.h"
#include "engine/data/text_corpus.h"
#include "engine/data/token_windows.h"

namespace trainlab {

constexpr const char* kTokenDatasetFormat = "trainlab-token-dataset";

struct TokenDatasetWriteOptions {
  std::string out;  // the data set's directory: created, or an earlier make-dataset's (with overwrite)
  bool overwrite = false;
  double held_out_fraction = 0.1;  // the corpus's last fraction held out, in [0, 0.5] (0: no held-out split)
  std::string source;              // recorded in the manifest ("text:/usr/share/games/fortunes")
};

struct TokenDatasetInfo {
  std::string dir, source;
  TextVocabulary vocabulary = TextVocabulary::chars;
  std::vector<std::uint32_t> symbols;
  int token_bytes = 2;
  std::map<std::string, std::int64_t> split_tokens;  // "train", "held_out" -> tokens
  std::vector<DatasetFile> files;                    // every file, the manifest last
  std::int64_t vocab() const { return static_cast<std::int64_t>(symbols.size()); }
  // The vocabulary as a corpus without tokens: encodes prompts and decodes samples (text_of, encode).
  TextCorpus codec() const;
};

// Writes `corpus` split into train and held_out. Throws Error naming the path when `out` holds
// anything but an earlier data set (or one without overwrite), or a fraction outside [0, 0.5].
DatasetWriteSummary write_token_dataset(const TextCorpus& corpus, const TokenDatasetWriteOptions& options);

// The manifest, read and checked (not the streams: open_token_dataset and verify do that).
TokenDatasetInfo read_token_dataset_info(const std::string& dir);
// Whether `dir`'s manifest names the token format (a directory to open with open_token_dataset).
bool is_token_dataset(const std::string& dir);
// One split's stream, read and checked, as windows of `context` tokens; the training split shifts
// its windows every epoch (seeded). limit: at most that many windows (0: all). Error names the
// file, or the split and the longest context it allows.
std::shared_ptr<TokenWindows> open_token_dataset(const std::string& dir, Split split, std::int64_t context,
                                                 std::uint64_t seed, std::int64_t limit = 0);
// Reads every file and compares its size and CRC-32 with the manifest's.
DatasetVerifyResult verify_token_dataset(const std::string& dir);

}  // namespace trainlab
