// Token data sets on disk (engine/data/token_dataset.h).
#include "engine/data/token_dataset.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "engine/data/dataset_dir.h"
#include "engine/io/fields.h"
#include "engine/io/fileio.h"
#include "engine/io/text.h"
#include "engine/io/version.h"

namespace trainlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kTokenFormatVersion = 1;
constexpr std::int64_t kMaxSymbols = std::int64_t{1} << 24;

struct TokenSplitEntry {
  std::int64_t tokens = 0;
  dataset_dir::ManifestFileRef file;
  template <class F>
  void fields(F& f) {
    f("tokens", tokens);
    f("file", file);
  }
};
struct TokenManifest {
  std::string format;
  int version = 0;
  std::string writer, source, vocabulary;
  std::vector<std::uint32_t> symbols;
  int token_bytes = 0;
  std::map<std::string, TokenSplitEntry> splits;
  std::string crc32;
  template <class F>
  void fields(F& f) {
    f("format", format);
    f("version", version);
    f.optional("writer", writer);
    f.optional("source", source);
    f("vocabulary", vocabulary);
    f("symbols", symbols);
    f("token_bytes", token_bytes);
    f("splits", splits);
    f.optional("crc32", crc32);
  }
};

std::string split_file_name(const std::string& split) { return split + ".bin"; }

// The stream `tokens` as token_bytes-wide little-endian ids.
std::vector<unsigned char> encode_stream(const std::int32_t* tokens, std::size_t n, int token_bytes) {
  std::vector<unsigned char> bytes(n * static_cast<std::size_t>(token_bytes));
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<std::uint32_t>(tokens[i]);
    for (int b = 0; b < token_bytes; ++b)
      bytes[i * static_cast<std::size_t>(token_bytes) + static_cast<std::size_t>(b)] =
          static_cast<unsigned char>((v >> (8 * b)) & 0xFF);
  }
  return bytes;
}

// A token stream's file read back, its size and CRC-32 checked against the manifest, every id
// against the vocabulary.
std::shared_ptr<std::vector<std::int32_t>> read_stream(const TokenDatasetInfo& info, const std::string& split) {
  const auto tokens = info.split_tokens.at(split);
  const std::string name = split_file_name(split);
  const DatasetFile* entry = nullptr;
  for (const auto& f : info.files)
    if (f.path == name) entry = &f;
  TL_CHECK(entry != nullptr, "data set " + info.dir + ": the manifest lists no " + name);
  const std::string path = (fs::path(info.dir) / name).string();
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  TL_CHECK(!ec, "data set " + info.dir + ": cannot read " + path + ": " + ec.message());
  TL_CHECK(size == entry->bytes, path + " holds " + std::to_string(size) + " bytes, the manifest says " +
                                     std::to_string(entry->bytes) +
                                     " (truncated or replaced: write the data set again)");
  const std::vector<unsigned char> bytes = read_file(path, entry->bytes);
  const std::uint32_t crc = crc32(bytes.data(), bytes.size());
  TL_CHECK(crc == entry->crc32, path + ": its CRC-32 is " + crc32_hex(crc) + ", the manifest says " +
                                    crc32_hex(entry->crc32) + " (corrupted: write the data set again)");
  auto stream = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(tokens));
  const auto width = static_cast<std::size_t>(info.token_bytes);
  for (std::size_t i = 0; i < stream->size(); ++i) {
    std::uint32_t v = 0;
    for (std::size_t b = 0; b < width; ++b) v |= static_cast<std::uint32_t>(bytes[i * width + b]) << (8 * b);
    TL_CHECK(v < info.symbols.size(), path + ": token " + std::to_string(v) + " at " + std::to_string(i) +
                                          " is outside the vocabulary [0, " + std::to_string(info.symbols.size()) +
                                          ")");
    (*stream)[i] = static_cast<std::int32_t>(v);
  }
  return stream;
}

void check_token_manifest(const TokenManifest& m, const std::string& path) {
  const auto symbols = static_cast<std::int64_t>(m.symbols.size());
  TL_CHECK(symbols >= 1 && symbols <= kMaxSymbols,
           path + ": " + std::to_string(symbols) + " symbols (1..16777216 allowed)");
  for (std::size_t i = 1; i < m.symbols.size(); ++i)
    TL_CHECK(m.symbols[i - 1] < m.symbols[i],
             path + ": the symbols are not sorted and distinct at " + std::to_string(i));
  const bool bytes = m.vocabulary == "bytes";
  TL_CHECK(!bytes || m.symbols.back() <= 0xFF,
           path + ": a byte vocabulary with symbol " + std::to_string(m.symbols.back()) + " (bytes are 0..255)");
  TL_CHECK(bytes || m.symbols.back() <= 0x10FFFF,
           path + ": symbol " + std::to_string(m.symbols.back()) + " is past U+10FFFF");
  const int needed = symbols <= 65536 ? 2 : 4;
  TL_CHECK(m.token_bytes == needed, path + ": token_bytes " + std::to_string(m.token_bytes) + " for " +
                                        std::to_string(symbols) + " symbols (it must be " + std::to_string(needed) +
                                        ")");
  TL_CHECK(!m.splits.empty() && m.splits.count("train") == 1, path + ": no train split");
  for (const auto& [name, split] : m.splits) {
    TL_CHECK(name == "train" || name == "held_out", path + ": split " + quote_value(name) + " (train | held_out)");
    TL_CHECK(
        split.file.path == split_file_name(name),
        path + ": split " + name + "'s file is " + quote_value(split.file.path) + ", not " + split_file_name(name));
    TL_CHECK(split.tokens >= 1 &&
                 static_cast<std::uint64_t>(split.tokens) * static_cast<std::uint64_t>(needed) == split.file.bytes,
             path + ": split " + name + " says " + std::to_string(split.tokens) + " tokens in " +
                 std::to_string(split.file.bytes) + " bytes (" + std::to_string(needed) + " bytes each)");
  }
}

}  // namespace

TextCorpus TokenDatasetInfo::codec() const {
  TextCorpus corpus;
  corpus.vocabulary = vocabulary;
  corpus.symbols = symbols;
  return corpus;
}

TokenDatasetInfo read_token_dataset_info(const std::string& dir) {
  const std::string path = (fs::path(dir) / dataset_dir::kManifest).string();
  const dataset_dir::ManifestRead read =
      dataset_dir::read_manifest(dir, kTokenDatasetFormat, kTokenFormatVersion, kTokenFormatVersion);
  TokenManifest m;
  try {
    m = fields::from_json<TokenManifest>(read.json);
  } catch (const fields::FieldError& e) {
    throw Error(path + ": " + e.what());
  }
  dataset_dir::check_manifest_crc(read.json, m.crc32, path);
  check_token_manifest(m, path);
  TokenDatasetInfo info;
  info.dir = dir;
  info.source = m.source;
  info.vocabulary = parse_text_vocabulary(m.vocabulary);
  info.symbols = m.symbols;
  info.token_bytes = m.token_bytes;
  for (const auto& [name, split] : m.splits) {
    info.split_tokens[name] = split.tokens;
    info.files.push_back(DatasetFile{split.file.path, split.file.bytes,
                                     dataset_dir::parse_crc(split.file.crc32, path + ": " + split.file.path)});
  }
  info.files.push_back(read.file);
  return info;
}

bool is_token_dataset(const std::string& dir) { return dataset_dir::manifest_format(dir) == kTokenDatasetFormat; }

std::shared_ptr<TokenWindows> open_token_dataset(const std::string& dir, Split split, std::int64_t context,
                                                 std::uint64_t seed, std::int64_t limit) {
  const TokenDatasetInfo info = read_token_dataset_info(dir);
  const std::string name = split == Split::train ? "train" : "held_out";
  TL_CHECK(info.split_tokens.count(name) == 1, "data set " + dir + " has no " + name + " split");
  auto windows =
      std::make_shared<TokenWindows>(read_stream(info, name), info.vocab(), context,
                                     "data set " + dir + ", " + name + " split", split == Split::train, seed, limit);
  windows->set_text(std::make_shared<const TextCorpus>(info.codec()));
  return windows;
}

DatasetVerifyResult verify_token_dataset(const std::string& dir) {
  const TokenDatasetInfo info = read_token_dataset_info(dir);
  DatasetVerifyResult result;
  for (const auto& f : info.files) {
    result.files += 1;
    result.bytes += f.bytes;
  }
  for (const auto& [name, tokens] : info.split_tokens) {
    try {
      (void)read_stream(info, name);
    } catch (const Error& e) {
      result.problems.push_back(e.what());
    }
  }
  return result;
}

DatasetWriteSummary write_token_dataset(const TextCorpus& corpus, const TokenDatasetWriteOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  TL_CHECK(std::isfinite(o.held_out_fraction) && o.held_out_fraction >= 0 && o.held_out_fraction <= 0.5,
           "make-dataset: --held-out-fraction " + std::to_string(o.held_out_fraction) + " is outside [0, 0.5]");
  const auto n = static_cast<std::int64_t>(corpus.tokens.size());
  const auto held = static_cast<std::int64_t>(std::llround(o.held_out_fraction * static_cast<double>(n)));
  TL_CHECK(n - held >= 2 && (o.held_out_fraction == 0 || held >= 2),
           "make-dataset: " + std::to_string(n) + " tokens are too few to split " +
               std::to_string(o.held_out_fraction) + " of them off (each split needs at least 2)");
  TL_CHECK(!corpus.symbols.empty() && static_cast<std::int64_t>(corpus.symbols.size()) <= kMaxSymbols,
           "make-dataset: a vocabulary of " + std::to_string(corpus.symbols.size()) + " symbols (1..16777216)");
  dataset_dir::StagedWrite write(o.out, o.overwrite);
  TokenManifest m;
  m.format = kTokenDatasetFormat;
  m.version = kTokenFormatVersion;
  m.writer = "trainlab " + version() + " (" + git_describe() + ")";
  m.source = escape_invalid_utf8(o.source);
  m.vocabulary = text_vocabulary_name(corpus.vocabulary);
  m.symbols = corpus.symbols;
  m.token_bytes = corpus.symbols.size() <= 65536 ? 2 : 4;
  DatasetWriteSummary summary;
  const auto put = [&](const std::string& name, std::int64_t begin, std::int64_t count) {
    const std::vector<unsigned char> bytes =
        encode_stream(corpus.tokens.data() + begin, static_cast<std::size_t>(count), m.token_bytes);
    const std::string file = split_file_name(name);
    write_file_atomic((write.staging() / file).string(), bytes.data(), bytes.size());
    m.splits[name] = {count, {file, bytes.size(), crc32_hex(crc32(bytes.data(), bytes.size()))}};
    summary.splits.push_back({name, count, 1, bytes.size()});
  };
  put("train", 0, n - held);
  if (held > 0) put("held_out", n - held, held);
  summary.kept = write.commit(dataset_dir::manifest_text(fields::to_json(m)));
  summary.out = write.out().string();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace trainlab
