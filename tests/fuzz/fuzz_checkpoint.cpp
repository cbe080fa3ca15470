// Fuzz target: the checkpoint loader, its validation and a trainer's resume. A real checkpoint (a small model
// after two steps) is made once; each input replaces one of its four files (the first byte picks
// which). With the second byte odd, the COMPLETE marker is rewritten to match (sizes, CRC-32s and
// its own CRC), as a careful forger would, so the input reaches the JSON and safetensors parsers
// and the trainer's checks of the state instead of stopping at a checksum.
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>

#include "backends/registry.h"
#include "engine/io/fileio.h"
#include "engine/train/checkpoint.h"
#include "engine/train/resume.h"
#include "engine/train/trainer.h"
#include "fuzz_util.h"

namespace {

using namespace trainlab;
namespace fs = std::filesystem;
const char* const kFiles[] = {"model.safetensors", "optimizer.safetensors", "state.json", "COMPLETE"};

class Tiny final : public Dataset {
 public:
  std::int64_t size() const override { return 64; }
  Shape sample_shape() const override { return {3}; }
  std::int64_t num_classes() const override { return 2; }
  std::string describe() const override { return "Tiny"; }
  std::int64_t get(std::int64_t index, float* out, double*) const override {
    for (int i = 0; i < 3; ++i) out[i] = static_cast<float>((index * (i + 1)) % 7) - 3;
    return index % 2;
  }
};

TrainConfig tiny_config() {
  TrainConfig c;
  c.steps = 4;
  c.batch = 8;
  c.data.eval_batch = 8;
  c.reporting.log_every = 1 << 30;
  c.reporting.eval_at_end = false;
  c.execution.backend = "reference";
  c.optimizer.kind = OptimizerKind::adamw;
  return c;
}

TrainTask tiny_task() {
  TrainTask task;
  task.model_name = "Tiny";
  task.make_model = [](const InitOptions& init) { return std::make_shared<Linear>(3, 2, init); };
  task.train_data = std::make_shared<Tiny>();
  task.held_out_data = task.train_data;
  return task;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// The marker a save would have written for the files as they are now.
void reseal(const fs::path& dir) {
  nlohmann::json marker = {{"format", "trainlab-checkpoint"}, {"version", kCheckpointFormatVersion}};
  marker["files"] = nlohmann::json::object();
  for (int i = 0; i < 3; ++i) {
    const std::string bytes = read_text(dir / kFiles[i]);
    marker["files"][kFiles[i]] = {{"bytes", bytes.size()}, {"crc32", crc32_hex(crc32(bytes.data(), bytes.size()))}};
  }
  const std::string text = marker.dump();
  marker["crc32"] = crc32_hex(crc32(text.data(), text.size()));
  write_text(dir / "COMPLETE", marker.dump(2) + "\n");
}

struct Fixture {
  fs::path good, work;
  std::map<std::string, std::string> files;
  std::unique_ptr<Trainer> trainer;
  Fixture() {
    good = fuzz::scratch() / "good";
    work = fuzz::scratch() / "work";
    TrainConfig c = tiny_config();
    c.stop_at = 2;
    c.checkpoint.save = good.string();
    Trainer(c, tiny_task()).train(nullptr);
    for (const char* f : kFiles) files[f] = read_text(good / f);
    trainer = std::make_unique<Trainer>(tiny_config(), tiny_task());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture fixture;
  if (size < 2) return 0;
  fs::create_directories(fixture.work);
  for (const auto& [name, bytes] : fixture.files) write_text(fixture.work / name, bytes);
  const char* replaced = kFiles[data[0] % 4];
  write_text(fixture.work / replaced, std::string(reinterpret_cast<const char*>(data) + 2, size - 2));
  if (data[1] % 2 == 1 && std::string(replaced) != "COMPLETE") reseal(fixture.work);
  static Backend& host = get_backend("reference");
  fuzz::expect_error_or_success([&] { load_checkpoint(fixture.work.string(), host); });
  // The one validation verify-checkpoint, inspect and diagnose share with resume (engine/train/resume.h).
  fuzz::expect_error_or_success(
      [&] { validate_checkpoint(load_checkpoint(fixture.work.string(), host), fixture.work.string()); });
  fuzz::expect_error_or_success([&] { fixture.trainer->resume(fixture.work.string()); });
  return 0;
}
