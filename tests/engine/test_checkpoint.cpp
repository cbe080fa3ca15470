// Checkpoints and safetensors: round trips, and refusal of truncated, corrupted, incomplete and
// mismatched checkpoints, each with a message naming the file and the problem; nothing crashes.
#include <filesystem>
#include <fstream>

#include "engine/io/fileio.h"
#include "engine/io/safetensors.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "test_util.h"

using namespace trainlab;
using namespace trainlab::test;
namespace fs = std::filesystem;

namespace {

TrainConfig tiny_config() {
  TrainConfig c;
  c.steps = 3;
  c.batch = 8;
  c.data.train_samples = 64;
  c.data.eval_samples = 20;
  c.data.eval_batch = 20;
  c.reporting.log_every = 1000;
  c.seed = 4;
  return c;
}

void flip_byte(const std::string& path, std::size_t offset) {
  auto bytes = read_file(path);
  REQUIRE(offset < bytes.size());
  bytes[offset] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void truncate_file(const std::string& path, std::size_t keep) { fs::resize_file(path, keep); }

}  // namespace

TEST_CASE("safetensors: round trip and the exact byte layout", "[checkpoint][safetensors]") {
  TempDir dir("st");
  Generator gen(1);
  const NamedTensors tensors = {{"a.weight", random_tensor({2, 3}, gen, DType::f32)},
                                {"b", random_tensor({4}, gen, DType::f64)},
                                {"scalar", Tensor::full({}, 2.0, DType::f32, ref())},
                                {"half", random_tensor({3}, gen, DType::f32).to(DType::bf16)},
                                {"labels", Tensor::from_vector(std::vector<std::int64_t>{1, -2}, {2}, ref())}};
  write_safetensors(dir / "t.safetensors", tensors, {{"format", "test"}});
  const auto bytes = read_file(dir / "t.safetensors");
  std::uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  CHECK(header_size % 8 == 0);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_size));
  CHECK(header.find("\"a.weight\":{\"data_offsets\":[0,24],\"dtype\":\"F32\",\"shape\":[2,3]}") != std::string::npos);
  CHECK(header.find("\"__metadata__\":{\"format\":\"test\"}") != std::string::npos);
  CHECK(bytes.size() == 8 + header_size + 24 + 32 + 4 + 6 + 16);
  const auto read = read_safetensors(dir / "t.safetensors", ref());
  REQUIRE(read.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CHECK(read.tensors[i].first == tensors[i].first);
    CHECK(bitwise_equal(read.tensors[i].second, tensors[i].second));
  }
  CHECK(read.metadata.at("format") == "test");
}

TEST_CASE("safetensors: every truncation and every flipped byte is an Error, never a crash",
          "[checkpoint][safetensors]") {
  Generator gen(2);
  const auto good =
      encode_safetensors({{"w", random_tensor({3, 2}, gen, DType::f32)}, {"b", random_tensor({2}, gen, DType::f32)}});
  int refused = 0, accepted = 0;
  for (std::size_t keep = 0; keep < good.size(); ++keep) {
    try {
      decode_safetensors(good.data(), keep, "x.safetensors", ref());
      ++accepted;
    } catch (const Error& e) {
      ++refused;
      CHECK(std::string(e.what()).find("x.safetensors") != std::string::npos);
    }
  }
  CHECK(accepted == 0);  // no prefix of a file is a valid file
  // Every flipped byte: in the length or the header, refused naming the file, or (where the header
  // still parses the same, e.g. its padding) decoded to exactly the original tensors; in the data,
  // decoded with exactly that one byte changed (the checkpoint marker's CRC is what catches those).
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, good.data(), 8);
  const std::size_t data_start = 8 + static_cast<std::size_t>(header_size);
  auto tensor_bytes = [](const SafetensorsContents& c) {
    std::vector<unsigned char> out;
    for (const auto& [name, t] : c.tensors) {
      std::vector<unsigned char> b(t.nbytes());
      t.copy_to_host(b.data());
      out.insert(out.end(), b.begin(), b.end());
    }
    return out;
  };
  const auto original = tensor_bytes(decode_safetensors(good.data(), good.size(), "x.safetensors", ref()));
  int header_refused = 0, data_decoded = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0xff;
    INFO("byte " << i << " of " << good.size() << " flipped (data from byte " << data_start << ")");
    if (i < data_start) {
      try {
        const auto decoded = tensor_bytes(decode_safetensors(bad.data(), bad.size(), "x.safetensors", ref()));
        CHECK(decoded == original);  // a flip the header survives changes nothing
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("x.safetensors") != std::string::npos);
        ++header_refused;
      }
    } else {
      const auto decoded = tensor_bytes(decode_safetensors(bad.data(), bad.size(), "x.safetensors", ref()));
      REQUIRE(decoded.size() == original.size());
      std::size_t differ = 0;
      for (std::size_t k = 0; k < decoded.size(); ++k) differ += decoded[k] != original[k] ? 1 : 0;
      CHECK(differ == 1);
      CHECK(decoded[i - data_start] == (original[i - data_start] ^ 0xff));
      ++data_decoded;
    }
  }
  CHECK(header_refused >= 8);  // every length byte at least
  CHECK(data_decoded == static_cast<int>(good.size() - data_start));
  REQUIRE_THROWS_CONTAINING(decode_safetensors(good.data(), 4, "x.safetensors", ref()), "truncated", "8-byte");
  auto huge = good;
  const std::uint64_t too_big = 1ull << 40;
  std::memcpy(huge.data(), &too_big, 8);
  REQUIRE_THROWS_CONTAINING(decode_safetensors(huge.data(), huge.size(), "x.safetensors", ref()), "truncated");
  CHECK(refused == static_cast<int>(good.size()));  // every proper prefix, each naming the file
  // A shape whose element count overflows 64 bits, with empty data, is refused rather than wrapped.
  const std::string header = R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})";
  std::vector<unsigned char> overflow(8 + header.size());
  const std::uint64_t length = header.size();
  std::memcpy(overflow.data(), &length, 8);
  std::memcpy(overflow.data() + 8, header.data(), header.size());
  REQUIRE_THROWS_CONTAINING(decode_safetensors(overflow.data(), overflow.size(), "x.safetensors", ref()),
                            "x.safetensors", "tensor 'w'", "64 bits");
}

TEST_CASE("checkpoint: save and load round-trip every piece of state", "[checkpoint]") {
  TempDir dir("ckpt");
  Trainer trainer(tiny_config());
  trainer.train(nullptr);
  trainer.save(dir / "c");
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json", "COMPLETE"})
    CHECK(fs::exists(dir / ("c/" + std::string(f))));
  const Checkpoint loaded = load_checkpoint(dir / "c", ref());
  const auto params = trainer.model().named_parameters();
  REQUIRE(loaded.model.size() == params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    CHECK(loaded.model[i].first == params[i].first);
    CHECK(bitwise_equal(loaded.model[i].second, params[i].second));
  }
  const StateDict opt = trainer.optimizer().state_dict();
  CHECK(loaded.optimizer.tensors.size() == opt.tensors.size());
  for (const auto& [key, t] : opt.tensors) CHECK(bitwise_equal(loaded.optimizer.tensors.at(key), t));
  CHECK(loaded.optimizer.numbers == opt.numbers);
  CHECK(loaded.trainer.integers.at("step") == 3);
  CHECK(loaded.trainer.strings.at("generator") == trainer.generator().state_string());
  CHECK(loaded.loader.integers.at("next_batch") == 3);
  // No temporary files are left behind.
  for (const auto& entry : fs::directory_iterator(dir / "c"))
    CHECK(entry.path().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("checkpoint: damaged checkpoints are refused with the file and the problem", "[checkpoint]") {
  TempDir dir("bad");
  Trainer trainer(tiny_config());
  trainer.train(nullptr);
  auto fresh = [&](const std::string& name) {
    trainer.save(dir / name);
    return dir / name;
  };

  SECTION("truncated weights") {
    const std::string c = fresh("t");
    truncate_file(c + "/model.safetensors", 1000);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "model.safetensors", "truncated", "1000 bytes");
  }
  SECTION("a flipped byte in the weights") {
    const std::string c = fresh("f");
    flip_byte(c + "/model.safetensors", 5000);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "model.safetensors", "corrupted", "CRC-32");
  }
  SECTION("a flipped byte in the optimizer state") {
    const std::string c = fresh("o");
    flip_byte(c + "/optimizer.safetensors", 300);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "optimizer.safetensors", "CRC-32");
  }
  SECTION("a flipped byte in state.json") {
    const std::string c = fresh("s");
    flip_byte(c + "/state.json", 10);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "state.json", "corrupted");
  }
  SECTION("no completion marker (an interrupted save)") {
    const std::string c = fresh("m");
    fs::remove(c + "/COMPLETE");
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "incomplete", "COMPLETE");
  }
  SECTION("a corrupted marker") {
    const std::string c = fresh("cm");
    truncate_file(c + "/COMPLETE", 20);
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "COMPLETE", "corrupted");
  }
  SECTION("a marker with a field of the wrong type") {
    const std::string c = fresh("mt");
    write_file_atomic(c + "/COMPLETE", std::string(R"({"format":"trainlab-checkpoint","version":"1","files":{}})"));
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "format version \"1\"");
  }
  SECTION("optimizer state that the constructor would refuse") {
    Checkpoint bad = load_checkpoint(fresh("os"), ref());
    bad.optimizer.numbers["momentum"] = -1;
    save_checkpoint(dir / "os2", bad);
    TrainConfig config = tiny_config();
    config.steps = 10;
    Trainer other(config);
    REQUIRE_THROWS_CONTAINING(other.resume(dir / "os2"), "momentum must be >= 0");
  }
  SECTION("counters that disagree") {
    Checkpoint bad = load_checkpoint(fresh("cd"), ref());
    bad.trainer.integers["step"] = 2;
    save_checkpoint(dir / "cd2", bad);
    TrainConfig config = tiny_config();
    config.steps = 10;
    Trainer other(config);
    REQUIRE_THROWS_CONTAINING(other.resume(dir / "cd2"), "inconsistent", "step 2", "applied 3 updates");
  }
  SECTION("a checkpoint beyond --stop-at") {
    const std::string c = fresh("sa");
    TrainConfig config = tiny_config();
    config.steps = 10;
    config.stop_at = 2;
    Trainer other(config);
    REQUIRE_THROWS_CONTAINING(other.resume(c), "at step 3", "beyond --stop-at 2");
  }
  SECTION("a missing file") {
    const std::string c = fresh("mf");
    fs::remove(c + "/optimizer.safetensors");
    REQUIRE_THROWS_CONTAINING(load_checkpoint(c, ref()), "optimizer.safetensors", "missing");
  }
  SECTION("no such directory") { REQUIRE_THROWS_CONTAINING(load_checkpoint(dir / "nope", ref()), "does not exist"); }
  SECTION("weights of the wrong shape (a valid file for another model)") {
    Checkpoint c = load_checkpoint(fresh("w"), ref());
    c.model[0].second = Tensor::zeros({16, 3, 3, 3}, DType::f32, ref());
    save_checkpoint(dir / "w2", c);
    TrainConfig config = tiny_config();
    config.steps = 10;
    Trainer other(config);
    REQUIRE_THROWS_CONTAINING(other.resume(dir / "w2"), "conv1.weight", "[16, 3, 3, 3]", "[32, 3, 3, 3]");
  }
  SECTION("a run that differs in a key that shapes training") {
    const std::string c = fresh("k");
    TrainConfig config = tiny_config();
    config.steps = 10;
    config.optimizer.lr = 0.05;
    Trainer other(config);
    REQUIRE_THROWS_CONTAINING(other.resume(c), "trained with lr 0.01", "asks for 0.05");
  }
}

TEST_CASE("checkpoint: re-saving replaces the old checkpoint whole, and only a checkpoint", "[checkpoint]") {
  TempDir dir("resave");
  TrainConfig config = tiny_config();
  config.steps = 5;
  config.stop_at = 3;
  Trainer trainer(config);
  trainer.train(nullptr);
  trainer.save(dir / "c");
  CHECK(load_checkpoint(dir / "c", ref()).trainer.integers.at("step") == 3);
  config.stop_at = 0;
  config.checkpoint.resume = dir / "c";
  Trainer more(config);
  more.train(nullptr);
  more.save(dir / "c/");  // the same directory, spelled with a trailing slash
  CHECK(load_checkpoint(dir / "c", ref()).trainer.integers.at("step") == 5);
  // Nothing but the checkpoint is left: no staging or old copies beside it, no temp files in it.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path)) names.push_back(entry.path().filename().string());
  CHECK(names == std::vector<std::string>{"c"});
  CHECK(std::distance(fs::directory_iterator(dir / "c"), fs::directory_iterator()) == 4);

  // A directory holding anything else is never replaced.
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine/notes.txt") << "keep me";
  REQUIRE_THROWS_CONTAINING(more.save(dir / "mine"), "holds 'notes.txt'", "not part of a trainlab checkpoint");
  CHECK(fs::exists(dir / "mine/notes.txt"));
  std::ofstream(dir / "afile") << "x";
  REQUIRE_THROWS_CONTAINING(more.save(dir / "afile"), "not a directory");
}
