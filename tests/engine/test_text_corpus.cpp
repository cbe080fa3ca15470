// Text corpora (engine/data/text_corpus.h): UTF-8 checked with the byte offset of the first bad
// sequence, the character vocabulary sorted by code point (nanoGPT's sorted(set(text))), the byte
// vocabulary, a directory read in path order without its non-text files, prompts encoded or refused
// by the character they lack, and an empty corpus refused.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/text_corpus.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::int64_t bad_at(const std::string& bytes) {
  return invalid_utf8_offset(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

}  // namespace

TEST_CASE("text corpus: UTF-8 is checked to RFC 3629, the first bad byte named", "[data]") {
  CHECK(bad_at("plain ascii\n") == -1);
  CHECK(bad_at("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == -1);  // é, €, an emoji
  CHECK(bad_at("ab\xC3") == 2);                                      // truncated
  CHECK(bad_at("ab\x80") == 2);                                      // a continuation byte alone
  CHECK(bad_at("a\xC0\xAF") == 1);                                   // overlong '/'
  CHECK(bad_at("a\xED\xA0\x80") == 1);                               // a surrogate, U+D800
  CHECK(bad_at("a\xF4\x90\x80\x80") == 1);                           // past U+10FFFF
  CHECK(bad_at("\xFF") == 0);
}

TEST_CASE("text corpus: characters sorted by code point, tokens in file order, prompts encoded", "[data]") {
  TempDir dir("text-corpus");
  write(dir.path / "a.txt", "hello\n");
  write(dir.path / "b" / "more", "h\xC3\xA9llo!\n");
  write(dir.path / "b" / "more.dat", std::string("\xFF\xFE\x00\x01", 4));  // an strfile index: not read
  const TextCorpus corpus = read_text_corpus(dir.path.string(), TextVocabulary::chars);
  REQUIRE(corpus.files.size() == 2);
  CHECK(corpus.files[0] == (dir.path / "a.txt").string());
  // "\n!ehlo" and é (U+00E9) after them.
  const std::vector<std::uint32_t> want = {'\n', '!', 'e', 'h', 'l', 'o', 0xE9};
  CHECK(corpus.symbols == want);
  CHECK(corpus.tokens.size() == 6 + 7);
  CHECK(corpus.tokens[0] == 3);  // 'h'
  CHECK(corpus.text_of(6) == "\xC3\xA9");
  CHECK(corpus.encode("hol\xC3\xA9") == std::vector<std::int32_t>{3, 5, 4, 6});
  CHECK(error_of([&] { corpus.encode("hex"); }) ==
        "text: 'x' (U+0078) at character 2 is not in the vocabulary (7 symbols)");
  const TextCorpus bytes = read_text_corpus((dir.path / "b" / "more").string(), TextVocabulary::bytes);
  CHECK(bytes.symbols.size() == 256);
  CHECK(bytes.tokens.size() == 8);  // é is two bytes
  CHECK(bytes.tokens[1] == 0xC3);
}

TEST_CASE("text corpus: a file that is not UTF-8, an empty corpus, a missing path: one line each", "[data]") {
  TempDir dir("text-corpus-bad");
  write(dir.path / "latin1.txt", "ok caf\xE9\n");
  CHECK(error_of([&] { read_text_corpus((dir.path / "latin1.txt").string(), TextVocabulary::chars); }) ==
        "text corpus: " + (dir.path / "latin1.txt").string() +
            " is not UTF-8: byte 6 (0xE9) does not start a well-formed sequence");
  write(dir.path / "empty" / "nothing.txt", "");
  CHECK_THAT(error_of([&] { read_text_corpus((dir.path / "empty").string(), TextVocabulary::chars); }),
             Catch::Contains("is empty (1 file(s), no text)"));
  CHECK_THAT(error_of([&] { read_text_corpus((dir.path / "nope").string(), TextVocabulary::chars); }),
             Catch::Contains("does not exist"));
  CHECK_THAT(error_of([] { parse_text_vocabulary("words"); }), Catch::Contains("allowed chars | bytes"));
}
