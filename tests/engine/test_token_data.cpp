// Token data (engine/data/token_windows.h, engine/data/token_dataset.h): windows and their targets,
// the per-epoch shift, SyntheticTokens, the loader's token batches ([B, T] ids, [B, T] targets, the
// same at any worker count), a text corpus written as token streams and read back, corruption and
// truncation named, --overwrite across formats, and the trainer's token task (a model that cannot
// take the data refused in one line).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/disk_dataset.h"
#include "engine/data/loader.h"
#include "engine/data/token_dataset.h"
#include "engine/data/token_windows.h"
#include "engine/train/task.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;

namespace {

std::shared_ptr<const std::vector<std::int32_t>> stream_of(std::int32_t n, std::int32_t vocab) {
  auto s = std::make_shared<std::vector<std::int32_t>>();
  for (std::int32_t i = 0; i < n; ++i) s->push_back(i % vocab);
  return s;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string corpus_text() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox " + std::to_string(i % 10) + " jumps over the lazy dog\n";
  return text;
}

}  // namespace

TEST_CASE("token windows: targets are the next tokens; epochs shift, held-out does not", "[data]") {
  const auto stream = stream_of(1000, 50);
  const TokenWindows held(stream, 50, 8, "held", false, 7);
  CHECK(held.size() == (1000 - 1) / 8);
  CHECK(held.sample_shape() == Shape{8});
  CHECK(held.sample_kind() == SampleKind::tokens);
  CHECK(held.labels_per_sample() == 8);
  std::vector<std::int64_t> x(8), y(8);
  held.get_tokens(3, 5, x.data(), y.data());
  for (int t = 0; t < 8; ++t) {
    CHECK(x[t] == (24 + t) % 50);  // window 3 at offset 0, whatever the epoch
    CHECK(y[t] == (25 + t) % 50);
  }
  const TokenWindows train(stream, 50, 8, "train", true, 7);
  CHECK(train.size() == (1000 - 8) / 8);
  std::set<std::int64_t> offsets;
  for (std::int64_t e = 0; e < 16; ++e) {
    const std::int64_t start = train.window_start(0, e);
    CHECK(start >= 0);
    CHECK(start < 8);
    offsets.insert(start);
    // The last window of every epoch still has its targets.
    CHECK(train.window_start(train.size() - 1, e) + 8 + 1 <= 1000);
  }
  CHECK(offsets.size() > 1);
  // The same (seed, epoch) draws the same windows.
  CHECK(TokenWindows(stream, 50, 8, "again", true, 7).window_start(4, 3) == train.window_start(4, 3));
  // limit: the first windows only.
  CHECK(TokenWindows(stream, 50, 8, "few", true, 7, 10).size() == 10);
}

TEST_CASE("token windows: a stream too short or a token outside the vocabulary is one line", "[data]") {
  CHECK(error_of([] { TokenWindows(stream_of(100, 10), 10, 64, "short split", true, 0); }) ==
        "short split holds 100 tokens: too few for one window of context 64 (128 needed; choose a block_size of "
        "at most 50)");
  auto bad = std::make_shared<std::vector<std::int32_t>>(std::vector<std::int32_t>{1, 2, 12, 3});
  CHECK(error_of([&] { TokenWindows(bad, 10, 2, "split", false, 0); }) ==
        "split: token 12 at 2 is outside the vocabulary [0, 10)");
  const TokenWindows ok(stream_of(100, 10), 10, 4, "split", false, 0);
  std::vector<float> values(4);
  CHECK_THROWS_WITH(ok.get(0, values.data()), Catch::Contains("holds token windows"));
}

TEST_CASE("SyntheticTokens: the same stream for the same seed, the splits differ, a learnable chain", "[data]") {
  const auto a = synthetic_tokens(3, Split::train, 40, 16, 65);
  const auto b = synthetic_tokens(3, Split::train, 40, 16, 65);
  const auto h = synthetic_tokens(3, Split::held_out, 40, 16, 65);
  CHECK(a->size() == 40);
  CHECK(h->size() == 40);
  std::vector<std::int64_t> xa(16), ya(16), xb(16), yb(16), xh(16), yh(16);
  a->get_tokens(5, 2, xa.data(), ya.data());
  b->get_tokens(5, 2, xb.data(), yb.data());
  h->get_tokens(5, 2, xh.data(), yh.data());
  CHECK(xa == xb);
  CHECK(ya == yb);
  CHECK(xa != xh);
  // Every token has at most 4 successors in the stream (the chain's).
  std::map<std::int64_t, std::set<std::int64_t>> next;
  for (std::int64_t i = 0; i < a->size(); ++i) {
    a->get_tokens(i, 0, xa.data(), ya.data());
    for (int t = 0; t < 16; ++t) next[xa[t]].insert(ya[t]);
  }
  for (const auto& [token, successors] : next) CHECK(successors.size() <= 4);
  CHECK(synthetic_tokens_entropy() == Approx(1.1097).margin(1e-3));
  CHECK_THROWS_WITH(synthetic_tokens(0, Split::train, 4, 4, 3), Catch::Contains("vocabulary 3 is outside 4..16777216"));
}

TEST_CASE("loader: token batches are [B, T] ids and [B, T] targets, the same at any worker count", "[data]") {
  Backend& cpu = get_backend("reference");
  const std::shared_ptr<const Dataset> data = synthetic_tokens(1, Split::train, 64, 12, 30);
  std::vector<Batch> expected;
  for (int workers : {0, 2}) {
    DataLoaderOptions o;
    o.batch_size = 8;
    o.num_workers = workers;
    o.seed = 4;
    DataLoader loader(data, o, cpu);
    for (int i = 0; i < 12; ++i) {  // past the first epoch (8 batches): another shift
      Batch b = loader.next();
      CHECK(b.inputs.shape() == Shape{8, 12});
      CHECK(b.inputs.dtype() == DType::i64);
      CHECK(b.labels.shape() == Shape{8, 12});
      if (workers == 0) {
        expected.push_back(std::move(b));
      } else {
        CHECK(bitwise_equal(b.inputs, expected[static_cast<std::size_t>(i)].inputs));
        CHECK(bitwise_equal(b.labels, expected[static_cast<std::size_t>(i)].labels));
      }
    }
  }
  // Targets are the inputs shifted by one within each window.
  const auto x = expected[0].inputs.to_vector<std::int64_t>(), y = expected[0].labels.to_vector<std::int64_t>();
  for (int r = 0; r < 8; ++r)
    for (int t = 0; t + 1 < 12; ++t)
      CHECK(y[static_cast<std::size_t>(r * 12 + t)] == x[static_cast<std::size_t>(r * 12 + t + 1)]);
}

TEST_CASE("token data set: a corpus written as streams and read back, windows exact", "[data][disk]") {
  TempDir tmp("tokens-roundtrip");
  write_text(tmp.path / "corpus" / "a.txt", corpus_text());
  const TextCorpus corpus = read_text_corpus((tmp.path / "corpus").string(), TextVocabulary::chars);
  TokenDatasetWriteOptions o;
  o.out = (tmp.path / "set").string();
  o.source = "text:corpus";
  const DatasetWriteSummary summary = write_token_dataset(corpus, o);
  REQUIRE(summary.splits.size() == 2);
  const auto n = static_cast<std::int64_t>(corpus.tokens.size());
  const std::int64_t held = std::llround(0.1 * static_cast<double>(n));
  CHECK(summary.splits[0].samples == n - held);
  CHECK(summary.splits[1].samples == held);
  CHECK(is_token_dataset(o.out));
  const TokenDatasetInfo info = read_token_dataset_info(o.out);
  CHECK(info.symbols == corpus.symbols);
  CHECK(info.token_bytes == 2);
  CHECK(info.codec().encode("lazy dog") == corpus.encode("lazy dog"));
  CHECK(verify_token_dataset(o.out).problems.empty());
  const auto train = open_token_dataset(o.out, Split::train, 16, 9);
  const auto eval = open_token_dataset(o.out, Split::held_out, 16, 9);
  CHECK(train->num_classes() == static_cast<std::int64_t>(corpus.symbols.size()));
  std::vector<std::int64_t> x(16), y(16);
  const std::int64_t start = train->window_start(7, 3);
  train->get_tokens(7, 3, x.data(), y.data());
  for (int t = 0; t < 16; ++t) {
    CHECK(x[t] == corpus.tokens[static_cast<std::size_t>(start + t)]);
    CHECK(y[t] == corpus.tokens[static_cast<std::size_t>(start + t + 1)]);
  }
  eval->get_tokens(0, 0, x.data(), y.data());
  CHECK(x[0] == corpus.tokens[static_cast<std::size_t>(n - held)]);
  // A context longer than the held-out split allows: named, with the longest that fits.
  CHECK_THROWS_WITH(open_token_dataset(o.out, Split::held_out, held, 0),
                    Catch::Contains("held_out split holds " + std::to_string(held) + " tokens: too few"));
}

TEST_CASE("token data set: truncation and corruption named; --overwrite across formats replaces only its own",
          "[data][disk]") {
  TempDir tmp("tokens-hostile");
  write_text(tmp.path / "corpus.txt", corpus_text());
  const TextCorpus corpus = read_text_corpus((tmp.path / "corpus.txt").string(), TextVocabulary::bytes);
  TokenDatasetWriteOptions o;
  o.out = (tmp.path / "set").string();
  write_token_dataset(corpus, o);
  CHECK(read_token_dataset_info(o.out).vocab() == 256);
  // Without --overwrite, a data set is not replaced; a user's file is kept through a replace.
  CHECK_THROWS_WITH(write_token_dataset(corpus, o), Catch::Contains("already holds a data set; pass --overwrite"));
  write_text(tmp.path / "set" / "notes.md", "mine");
  o.overwrite = true;
  write_token_dataset(corpus, o);
  CHECK(std::filesystem::exists(tmp.path / "set" / "notes.md"));
  // An image data set replaced by a token one, and back: each removes exactly its manifest's files.
  DatasetWriteOptions image;
  image.out = o.out;
  image.overwrite = true;
  image.codec = ImageCodec::raw;
  const SyntheticImages pictures(0, Split::train, 8);
  write_image_dataset(pictures, nullptr, image);
  CHECK_FALSE(is_token_dataset(o.out));
  CHECK_FALSE(std::filesystem::exists(tmp.path / "set" / "train.bin"));
  CHECK(std::filesystem::exists(tmp.path / "set" / "notes.md"));
  write_token_dataset(corpus, o);
  CHECK(is_token_dataset(o.out));
  CHECK(std::filesystem::exists(tmp.path / "set" / "notes.md"));
  // A directory of someone else's files is never replaced.
  write_text(tmp.path / "photos" / "cat.jpg", "meow");
  TokenDatasetWriteOptions other = o;
  other.out = (tmp.path / "photos").string();
  CHECK_THROWS_WITH(write_token_dataset(corpus, other), Catch::Contains("not a trainlab data set"));
  // Truncated: named before any window is read.
  const auto train_bin = tmp.path / "set" / "train.bin";
  const auto size = std::filesystem::file_size(train_bin);
  std::filesystem::resize_file(train_bin, size - 2);
  CHECK_THROWS_WITH(open_token_dataset(o.out, Split::train, 8, 0), Catch::Contains("truncated or replaced"));
  CHECK_FALSE(verify_token_dataset(o.out).problems.empty());
  // Corrupted (one byte flipped, the size kept): the CRC names the file.
  write_token_dataset(corpus, o);
  {
    std::fstream f(train_bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH(open_token_dataset(o.out, Split::train, 8, 0), Catch::Contains("train.bin: its CRC-32 is"));
  // A bad held-out fraction, a corpus too small to split.
  o.held_out_fraction = 0.7;
  CHECK_THROWS_WITH(write_token_dataset(corpus, o),
                    Catch::Contains("--held-out-fraction 0.700000 is outside [0, 0.5]"));
}

TEST_CASE("token task: gpt on SyntheticTokens or a token data set; models and data of the wrong kind refused",
          "[data]") {
  TrainConfig config;
  config.model.name = "gpt";
  config.model.options = {{"block_size", "16"}, {"n_layer", "1"}, {"n_embd", "16"}, {"n_head", "2"}};
  config.data.train_samples = 32;
  config.data.eval_samples = 8;
  const TrainTask synthetic = model_task(config);
  CHECK(synthetic.train_data->sample_shape() == Shape{16});
  CHECK(synthetic.train_data->num_classes() == 65);
  CHECK(synthetic.held_out_data->size() == 8);

  TempDir tmp("tokens-task");
  write_text(tmp.path / "corpus.txt", corpus_text());
  TokenDatasetWriteOptions o;
  o.out = (tmp.path / "set").string();
  write_token_dataset(read_text_corpus((tmp.path / "corpus.txt").string(), TextVocabulary::chars), o);
  config.data.dir = o.out;
  const TrainTask disk = model_task(config);
  CHECK(disk.train_data->num_classes() == read_token_dataset_info(o.out).vocab());
  CHECK(disk.train_data->size() == 32);
  // The context longer than the held-out split: one line naming it.
  config.model.options["block_size"] = "4096";
  CHECK_THROWS_WITH(model_task(config), Catch::Contains("too few for one window of context 4096"));
  // An image model on token data, a token model on images.
  config.model = {};
  CHECK_THROWS_WITH(model_task(config), Catch::Contains("holds token windows; model 'smallcnn' takes images"));
  DatasetWriteOptions image;
  image.out = (tmp.path / "images").string();
  image.codec = ImageCodec::raw;
  write_image_dataset(SyntheticImages(0, Split::train, 8), nullptr, image);
  config.model.name = "gpt";
  config.data.dir = image.out;
  CHECK_THROWS_WITH(model_task(config), Catch::Contains("is not a token data set"));
}
