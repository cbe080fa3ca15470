#include "engine/checkpoint.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/fileio.h"
#include "engine/safetensors.h"

namespace trainlab {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

const char* const kModelFile = "model.safetensors";
const char* const kOptimizerFile = "optimizer.safetensors";
const char* const kStateFile = "state.json";
const char* const kMarkerFile = "COMPLETE";
const char* const kFormat = "trainlab-checkpoint";

json scalars_to_json(const StateDict& state, const char* owner) {
  TL_CHECK(std::string(owner) == "optimizer" || state.tensors.empty(),
           std::string("checkpoint: ") + owner + " state must not hold tensors");
  json out = {{"integers", json::object()}, {"numbers", json::object()}, {"strings", json::object()}};
  for (const auto& [k, v] : state.integers) out["integers"][k] = v;
  for (const auto& [k, v] : state.numbers) {
    TL_CHECK(std::isfinite(v), std::string("checkpoint: ") + owner + " value '" + k + "' is not finite");
    out["numbers"][k] = v;
  }
  for (const auto& [k, v] : state.strings) out["strings"][k] = v;
  return out;
}

StateDict scalars_from_json(const json& j, const std::string& where) {
  TL_CHECK(j.is_object() && j.contains("integers") && j.contains("numbers") && j.contains("strings"),
           where + " lacks integers, numbers or strings");
  StateDict state;
  for (auto it = j["integers"].begin(); it != j["integers"].end(); ++it) {
    TL_CHECK(it->is_number_integer(), where + ": '" + it.key() + "' is not an integer");
    state.integers[it.key()] = it->get<std::int64_t>();
  }
  for (auto it = j["numbers"].begin(); it != j["numbers"].end(); ++it) {
    TL_CHECK(it->is_number(), where + ": '" + it.key() + "' is not a number");
    state.numbers[it.key()] = it->get<double>();
  }
  for (auto it = j["strings"].begin(); it != j["strings"].end(); ++it) {
    TL_CHECK(it->is_string(), where + ": '" + it.key() + "' is not a string");
    state.strings[it.key()] = it->get<std::string>();
  }
  return state;
}

std::string join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }
}  // namespace

void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TL_CHECK(!ec && fs::is_directory(dir), "cannot create checkpoint directory '" + dir + "': " + ec.message());
  // From here until the new marker lands, the directory is refused by load_checkpoint.
  remove_file_durably(join(dir, kMarkerFile));

  json marker = {{"format", kFormat}, {"version", kCheckpointFormatVersion}, {"files", json::object()}};
  auto write = [&](const char* file, const std::vector<unsigned char>& bytes) {
    write_file_atomic(join(dir, file), bytes.data(), bytes.size());
    marker["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc32_hex(crc32(bytes.data(), bytes.size()))}};
  };

  write(kModelFile, encode_safetensors(checkpoint.model, {{"format", kFormat}}));
  NamedTensors optimizer_tensors(checkpoint.optimizer.tensors.begin(), checkpoint.optimizer.tensors.end());
  write(kOptimizerFile, encode_safetensors(optimizer_tensors, {{"format", kFormat}}));
  const json state = {{"format", kFormat},
                      {"version", kCheckpointFormatVersion},
                      {"optimizer", scalars_to_json(checkpoint.optimizer, "optimizer")},
                      {"scheduler", scalars_to_json(checkpoint.scheduler, "scheduler")},
                      {"loader", scalars_to_json(checkpoint.loader, "loader")},
                      {"trainer", scalars_to_json(checkpoint.trainer, "trainer")}};
  const std::string state_text = state.dump(2) + "\n";
  write(kStateFile, std::vector<unsigned char>(state_text.begin(), state_text.end()));
  write_file_atomic(join(dir, kMarkerFile), marker.dump(2) + "\n");
}

Checkpoint load_checkpoint(const std::string& dir, Backend& backend) {
  TL_CHECK(fs::is_directory(dir), "checkpoint directory '" + dir + "' does not exist");
  const std::string marker_path = join(dir, kMarkerFile);
  TL_CHECK(fs::exists(marker_path), "checkpoint '" + dir + "' is incomplete: no " + kMarkerFile +
                                        " marker (the save was interrupted, or this is not a checkpoint)");
  json marker;
  try {
    const auto bytes = read_file(marker_path);
    marker = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw Error("checkpoint marker '" + marker_path + "' is corrupted (invalid JSON: " + e.what() + ")");
  }
  TL_CHECK(marker.is_object() && marker.value("format", "") == kFormat && marker.contains("files") &&
               marker["files"].is_object(),
           "checkpoint marker '" + marker_path + "' is not a trainlab checkpoint marker");
  TL_CHECK(marker.value("version", -1) == kCheckpointFormatVersion,
           "checkpoint '" + dir + "' has format version " + marker["version"].dump() + ", this build reads version " +
               std::to_string(kCheckpointFormatVersion));

  // Every file: present, the recorded size, the recorded CRC.
  std::map<std::string, std::vector<unsigned char>> files;
  for (const char* file : {kModelFile, kOptimizerFile, kStateFile}) {
    const std::string path = join(dir, file);
    TL_CHECK(marker["files"].contains(file), "checkpoint marker '" + marker_path + "' does not list " + file);
    const json& entry = marker["files"][file];
    TL_CHECK(entry.is_object() && entry.contains("bytes") && entry["bytes"].is_number_unsigned() &&
                 entry.contains("crc32") && entry["crc32"].is_string(),
             "checkpoint marker '" + marker_path + "' has a malformed entry for " + file);
    TL_CHECK(fs::exists(path), "checkpoint file '" + path + "' is missing");
    auto bytes = read_file(path);
    const auto expected_bytes = entry["bytes"].get<std::uint64_t>();
    TL_CHECK(bytes.size() == expected_bytes,
             "checkpoint file '" + path + "' is " +
                 (bytes.size() < expected_bytes ? "truncated" : "longer than recorded") + ": " +
                 std::to_string(bytes.size()) + " bytes, the marker records " + std::to_string(expected_bytes));
    const std::string crc = crc32_hex(crc32(bytes.data(), bytes.size()));
    TL_CHECK(crc == entry["crc32"].get<std::string>(), "checkpoint file '" + path + "' is corrupted: CRC-32 " + crc +
                                                           " does not match the recorded " +
                                                           entry["crc32"].get<std::string>());
    files[file] = std::move(bytes);
  }

  Checkpoint checkpoint;
  const auto& model_bytes = files[kModelFile];
  checkpoint.model = decode_safetensors(model_bytes.data(), model_bytes.size(), join(dir, kModelFile), backend).tensors;
  const auto& opt_bytes = files[kOptimizerFile];
  for (auto& [name, tensor] :
       decode_safetensors(opt_bytes.data(), opt_bytes.size(), join(dir, kOptimizerFile), backend).tensors) {
    checkpoint.optimizer.tensors[name] = tensor;
  }
  const std::string state_path = join(dir, kStateFile);
  try {
    const auto& state_bytes = files[kStateFile];
    const json state = json::parse(state_bytes.begin(), state_bytes.end());
    TL_CHECK(state.is_object() && state.value("format", "") == kFormat, "'" + state_path + "' is not trainlab state");
    StateDict optimizer = scalars_from_json(state.at("optimizer"), state_path + " optimizer");
    optimizer.tensors = std::move(checkpoint.optimizer.tensors);
    checkpoint.optimizer = std::move(optimizer);
    checkpoint.scheduler = scalars_from_json(state.at("scheduler"), state_path + " scheduler");
    checkpoint.loader = scalars_from_json(state.at("loader"), state_path + " loader");
    checkpoint.trainer = scalars_from_json(state.at("trainer"), state_path + " trainer");
  } catch (const json::exception& e) {
    throw Error("checkpoint state '" + state_path + "' is malformed: " + e.what());
  }
  return checkpoint;
}

}  // namespace trainlab
