// A text corpus as token ids: what a GPT trains on (`trainlab make-dataset --from text:FILE|DIR`,
// issue 46). UTF-8 text only: a file that is not (an invalid or truncated sequence, an overlong
// form, a surrogate, a code point past U+10FFFF) is refused with its path and the byte offset of the
// first bad sequence. Two vocabularies: the corpus's characters, sorted by code point (nanoGPT's
// `sorted(set(text))`), or the 256 byte values (every file then encodes, whatever it holds, once
// it has passed the UTF-8 check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainlab {

enum class TextVocabulary { chars, bytes };
const char* text_vocabulary_name(TextVocabulary vocabulary);    // "chars", "bytes"
TextVocabulary parse_text_vocabulary(const std::string& name);  // throws Error listing chars | bytes

// The byte offset of the first sequence in data[0, n) that is not well-formed UTF-8 (RFC 3629),
// or -1 when there is none.
std::int64_t invalid_utf8_offset(const unsigned char* data, std::size_t n);

struct TextCorpus {
  TextVocabulary vocabulary = TextVocabulary::chars;
  std::vector<std::uint32_t> symbols;  // token id -> its code point (chars) or byte value (bytes)
  std::vector<std::int32_t> tokens;    // the corpus, file after file, in token ids
  std::vector<std::string> files;      // the files read, in order
  std::uint64_t bytes = 0;             // their total size
  // A token id's text, for samples and messages: its UTF-8 character, or the byte as is.
  std::string text_of(std::int32_t token) const;
  // Token ids of `text` in this vocabulary; a character (or byte) outside it is an Error naming it
  // and its position (a prompt with characters the corpus never had).
  std::vector<std::int32_t> encode(const std::string& text) const;
};

// Reads FILE, or every regular file of DIR (recursively, sorted by path; those whose names end in
// .txt or have no extension: a corpus directory's strfile indices, *.dat, are not text), checks each
// is UTF-8 and encodes the lot. Throws Error naming the path for a file that is not UTF-8 (with the
// byte offset), a path that does not exist, a directory without text files, or an empty corpus.
TextCorpus read_text_corpus(const std::string& path, TextVocabulary vocabulary);

}  // namespace trainlab
