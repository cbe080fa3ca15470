// Text corpora as token ids (engine/data/text_corpus.h).
#include "engine/data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "backends/error.h"
#include "engine/io/fileio.h"

namespace trainlab {

namespace {

// The length of the well-formed UTF-8 sequence starting at data[i], with its code point; 0 when
// it is not one.
std::size_t utf8_sequence(const unsigned char* data, std::size_t n, std::size_t i, std::uint32_t& code) {
  const unsigned char lead = data[i];
  if (lead < 0x80) {
    code = lead;
    return 1;
  }
  std::size_t length = 0;
  std::uint32_t minimum = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code = lead & 0x07, minimum = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF where a sequence starts
  }
  if (i + length > n) return 0;  // truncated
  for (std::size_t k = 1; k < length; ++k) {
    if ((data[i + k] & 0xC0) != 0x80) return 0;
    code = (code << 6) | (data[i + k] & 0x3F);
  }
  if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;  // overlong, range, surrogate
  return length;
}

void append_utf8(std::uint32_t code, std::string& out) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// The symbols of data in order: code points (chars) or bytes. The data is well-formed UTF-8.
std::vector<std::uint32_t> symbols_of(const unsigned char* data, std::size_t n, TextVocabulary vocabulary) {
  std::vector<std::uint32_t> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n;) {
    std::uint32_t code = 0;
    const std::size_t length = vocabulary == TextVocabulary::bytes ? 1 : utf8_sequence(data, n, i, code);
    if (vocabulary == TextVocabulary::bytes) code = data[i];
    out.push_back(code);
    i += length;
  }
  return out;
}

// `value` in upper-case hexadecimal, at least `digits` wide.
std::string hex_digits(std::uint32_t value, int digits) {
  static const char* const kDigits = "0123456789ABCDEF";
  std::string out;
  while (value > 0 || static_cast<int>(out.size()) < digits) {
    out.insert(out.begin(), kDigits[value & 15]);
    value >>= 4;
  }
  return out;
}

bool is_text_file_name(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  if (name.empty() || name[0] == '.') return false;
  const std::string ext = path.extension().string();
  return ext.empty() || ext == ".txt";
}

std::vector<std::string> corpus_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  TL_CHECK(!ec && fs::exists(status), "text corpus: " + path + " does not exist");
  if (fs::is_regular_file(status)) return {path};
  TL_CHECK(fs::is_directory(status), "text corpus: " + path + " is neither a file nor a directory");
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied)) {
    if (entry.is_regular_file() && is_text_file_name(entry.path())) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  TL_CHECK(!files.empty(), "text corpus: " + path +
                               " holds no text files (regular files whose names end in .txt or have no extension)");
  return files;
}

}  // namespace

const char* text_vocabulary_name(TextVocabulary vocabulary) {
  return vocabulary == TextVocabulary::bytes ? "bytes" : "chars";
}

TextVocabulary parse_text_vocabulary(const std::string& name) {
  if (name == "chars") return TextVocabulary::chars;
  if (name == "bytes") return TextVocabulary::bytes;
  throw Error("text vocabulary '" + name + "': allowed chars | bytes");
}

std::int64_t invalid_utf8_offset(const unsigned char* data, std::size_t n) {
  for (std::size_t i = 0; i < n;) {
    std::uint32_t code = 0;
    const std::size_t length = utf8_sequence(data, n, i, code);
    if (length == 0) return static_cast<std::int64_t>(i);
    i += length;
  }
  return -1;
}

std::string TextCorpus::text_of(std::int32_t token) const {
  TL_CHECK(token >= 0 && static_cast<std::size_t>(token) < symbols.size(),
           "text corpus: token " + std::to_string(token) + " is outside [0, " + std::to_string(symbols.size()) + ")");
  std::string out;
  const std::uint32_t symbol = symbols[static_cast<std::size_t>(token)];
  if (vocabulary == TextVocabulary::bytes)
    out += static_cast<char>(symbol);
  else
    append_utf8(symbol, out);
  return out;
}

std::vector<std::int32_t> TextCorpus::encode(const std::string& text) const {
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  const std::int64_t bad = invalid_utf8_offset(data, text.size());
  TL_CHECK(bad < 0, "text: not UTF-8 at byte " + std::to_string(bad));
  std::vector<std::int32_t> out;
  std::size_t position = 0;
  for (std::uint32_t symbol : symbols_of(data, text.size(), vocabulary)) {
    const auto it = std::lower_bound(symbols.begin(), symbols.end(), symbol);
    if (it == symbols.end() || *it != symbol) {
      std::string shown;
      if (vocabulary == TextVocabulary::bytes)
        shown = "byte " + std::to_string(symbol);
      else
        append_utf8(symbol, shown);
      throw Error("text: '" + shown + "' (U+" + hex_digits(symbol, 4) + ") at character " + std::to_string(position) +
                  " is not in the vocabulary (" + std::to_string(symbols.size()) + " symbols)");
    }
    out.push_back(static_cast<std::int32_t>(it - symbols.begin()));
    ++position;
  }
  return out;
}

TextCorpus read_text_corpus(const std::string& path, TextVocabulary vocabulary) {
  TextCorpus corpus;
  corpus.vocabulary = vocabulary;
  corpus.files = corpus_files(path);
  std::vector<std::uint32_t> all;
  for (const std::string& file : corpus.files) {
    const std::vector<unsigned char> bytes = read_file(file);
    const std::int64_t bad = invalid_utf8_offset(bytes.data(), bytes.size());
    TL_CHECK(bad < 0, "text corpus: " + file + " is not UTF-8: byte " + std::to_string(bad) + " (0x" +
                          hex_digits(bytes[static_cast<std::size_t>(bad)], 2) +
                          ") does not start a well-formed sequence");
    corpus.bytes += bytes.size();
    const std::vector<std::uint32_t> symbols = symbols_of(bytes.data(), bytes.size(), vocabulary);
    all.insert(all.end(), symbols.begin(), symbols.end());
  }
  TL_CHECK(!all.empty(), "text corpus: " + path + " is empty (" + std::to_string(corpus.files.size()) +
                             " file(s), no text): a GPT needs text to train on");
  if (vocabulary == TextVocabulary::bytes) {
    for (std::uint32_t b = 0; b < 256; ++b) corpus.symbols.push_back(b);
  } else {
    const std::set<std::uint32_t> distinct(all.begin(), all.end());
    corpus.symbols.assign(distinct.begin(), distinct.end());
  }
  corpus.tokens.reserve(all.size());
  for (std::uint32_t symbol : all)
    corpus.tokens.push_back(static_cast<std::int32_t>(
        std::lower_bound(corpus.symbols.begin(), corpus.symbols.end(), symbol) - corpus.symbols.begin()));
  return corpus;
}

}  // namespace trainlab
