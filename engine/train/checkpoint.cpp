#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/io/fileio.h"
#include "engine/io/safetensors.h"

namespace trainlab {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

const char* const kModelFile = "model.safetensors";
const char* const kOptimizerFile = "optimizer.safetensors";
const char* const kStateFile = "state.json";
const char* const kMarkerFile = "COMPLETE";
const char* const kCheckpointFormat = "trainlab-checkpoint";
// The marker and state.json are small and flat (three levels: {"trainer": {"integers": {...}}}).
constexpr std::uint64_t kMaxMarkerBytes = 1 << 20;
constexpr std::uint64_t kMaxStateBytes = 64 << 20;
constexpr int kMaxStateDepth = 4;

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

namespace {
// An absolute, normal path without a trailing separator, so "runs/a/" and "runs/a" are one place.
// A symlink is followed: the directory it points to is the checkpoint (the link stays).
fs::path normalized(const std::string& dir) {
  TL_CHECK(!dir.empty(), "checkpoint directory name is empty");
  fs::path path = fs::absolute(fs::path(dir)).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  const fs::path followed(follow_symlinks(path.string()));
  if (followed != path) {
    path = fs::absolute(followed).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();
  }
  return path;
}

// ".NAME.<suffix>": the hidden siblings a save stages in. Built with += because GCC 12 at -O3
// warns falsely (-Wrestrict, GCC bug 105329) on a literal + std::string chain.
std::string sibling_name(const fs::path& target, const std::string& suffix) {
  std::string name = ".";
  name += target.filename().string();
  name += ".";
  name += suffix;
  return name;
}

bool is_checkpoint_file(const std::string& name) {
  return name == kModelFile || name == kOptimizerFile || name == kStateFile || name == kMarkerFile ||
         name.find(".tmp.") != std::string::npos;
}

// The staging directories of saves whose process is gone (killed mid-save): ".NAME.saving-PID",
// and ".NAME.old-PID" once NAME itself is a complete checkpoint again.
void remove_stale_staging(const fs::path& target) {
  std::error_code ec;
  const std::string saving = sibling_name(target, "saving-"), old = sibling_name(target, "old-");
  const bool target_complete = fs::exists(target / kMarkerFile, ec);
  for (const auto& entry : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    const bool is_saving = name.rfind(saving, 0) == 0, is_old = name.rfind(old, 0) == 0;
    if (!is_saving && !is_old) continue;
    const std::string pid = name.substr((is_saving ? saving : old).size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (process_alive(std::stol(pid))) continue;  // a save in progress (ours, or another process's)
    if (is_old && !target_complete) continue;     // the only complete copy: load_checkpoint names it
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
  }
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw Error("cannot rename '" + from.string() + "' to '" + to.string() + "': " + std::strerror(errno));
  }
}
}  // namespace

void check_checkpoint_dir(const std::string& dir) {
  const fs::path target = normalized(dir);
  std::error_code ec;
  if (fs::exists(target, ec)) {
    // The old checkpoint is replaced as a whole directory: never take anything else with it.
    TL_CHECK(fs::is_directory(target, ec), "cannot save checkpoint to '" + dir + "': it exists and is not a directory");
    for (const auto& entry : fs::directory_iterator(target, ec)) {
      const std::string name = entry.path().filename().string();
      TL_CHECK(is_checkpoint_file(name), "cannot save checkpoint to '" + dir + "': it holds '" + name +
                                             "', which is not part of a trainlab checkpoint (use a new or empty "
                                             "directory)");
    }
    return;
  }
  TL_CHECK(!fs::is_symlink(target, ec), "cannot save checkpoint to '" + dir + "': it is a link to nothing");
  // A new checkpoint: the nearest existing ancestor must be a directory.
  for (fs::path p = target.parent_path(); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) {
      TL_CHECK(fs::is_directory(p, ec),
               "cannot save checkpoint to '" + dir + "': '" + p.string() + "' is not a directory");
      break;
    }
    if (p == p.parent_path()) break;
  }
}

void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint) {
  check_checkpoint_dir(dir);
  const fs::path target = normalized(dir);
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  TL_CHECK(!ec, "cannot create '" + parent.string() + "' for checkpoint '" + dir + "': " + ec.message());
  remove_stale_staging(target);

  // Write the complete new checkpoint beside the target, then swap it in with one rename.
  const std::string pid = std::to_string(::getpid());
  const fs::path staging = parent / sibling_name(target, "saving-" + pid);
  fs::remove_all(staging, ec);
  TL_CHECK(fs::create_directory(staging, ec) && !ec,
           "cannot create staging directory '" + staging.string() + "': " + ec.message());
  json marker = {{"format", kCheckpointFormat}, {"version", kCheckpointFormatVersion}, {"files", json::object()}};
  auto write = [&](const char* file, const std::vector<unsigned char>& bytes) {
    write_file_atomic((staging / file).string(), bytes.data(), bytes.size());
    marker["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc32_hex(crc32(bytes.data(), bytes.size()))}};
  };
  try {
    write(kModelFile, encode_safetensors(checkpoint.model, {{"format", kCheckpointFormat}}));
    NamedTensors optimizer_tensors(checkpoint.optimizer.tensors.begin(), checkpoint.optimizer.tensors.end());
    write(kOptimizerFile, encode_safetensors(optimizer_tensors, {{"format", kCheckpointFormat}}));
    const json state = {{"format", kCheckpointFormat},
                        {"version", kCheckpointFormatVersion},
                        {"optimizer", scalars_to_json(checkpoint.optimizer, "optimizer")},
                        {"scheduler", scalars_to_json(checkpoint.scheduler, "scheduler")},
                        {"loader", scalars_to_json(checkpoint.loader, "loader")},
                        {"trainer", scalars_to_json(checkpoint.trainer, "trainer")}};
    const std::string state_text = state.dump(2) + "\n";
    write(kStateFile, std::vector<unsigned char>(state_text.begin(), state_text.end()));
    // The marker carries its own checksum (over its other fields), so a damaged marker is refused
    // as damaged rather than read for sizes and CRCs it never recorded.
    marker["crc32"] = crc32_hex(crc32(marker.dump().data(), marker.dump().size()));
    write_file_atomic((staging / kMarkerFile).string(), marker.dump(2) + "\n");
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }

  if (!fs::exists(target, ec)) {
    rename_or_throw(staging, target);
  } else if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    // Atomic: at every instant `target` was the old complete checkpoint or the new one.
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    // No atomic exchange on this filesystem: move the old one aside first. A crash between the two
    // renames leaves no `target`; load_checkpoint then names the complete copies beside it.
    const fs::path old = parent / sibling_name(target, "old-" + pid);
    fs::remove_all(old, ec);
    rename_or_throw(target, old);
    rename_or_throw(staging, target);
    fsync_directory(parent.string());
    fs::remove_all(old, ec);
  } else {
    throw Error("cannot replace checkpoint '" + dir + "': " + std::strerror(errno));
  }
  fsync_directory(parent.string());
  fs::remove_all(staging, ec);  // after an exchange it holds the previous checkpoint
}

namespace {
// The error for a checkpoint directory that is not there. A save interrupted between its two
// renames (filesystems without an atomic exchange) leaves complete copies beside the target: name
// them rather than just "missing".
[[noreturn]] void throw_missing_checkpoint(const std::string& dir) {
  std::error_code ec;
  std::string beside;
  const fs::path target = normalized(dir);
  for (const auto& entry : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(sibling_name(target, ""), 0) == 0 && fs::exists(entry.path() / kMarkerFile, ec)) {
      beside += (beside.empty() ? "" : ", ") + entry.path().string();
    }
  }
  throw Error("checkpoint directory '" + dir + "' does not exist" +
              (beside.empty() ? std::string() : " (an interrupted save left complete checkpoints at: " + beside + ")"));
}

// The COMPLETE marker of checkpoint `dir`, read and checked: a trainlab marker of a version this
// build reads, its own checksum (version 2 on), and only the checkpoint's files listed.
json read_checkpoint_marker(const std::string& dir, const std::string& marker_path) {
  std::error_code ec;
  TL_CHECK(fs::exists(marker_path, ec), "checkpoint '" + dir + "' is incomplete: no " + kMarkerFile +
                                            " marker (the save was interrupted, or this is not a checkpoint)");
  json marker;
  {
    const auto bytes = read_file(marker_path, kMaxMarkerBytes);
    check_json_bounds(reinterpret_cast<const char*>(bytes.data()), bytes.size(), kMaxStateDepth, kMaxMarkerBytes,
                      "checkpoint marker '" + marker_path + "'");
    try {
      marker = json::parse(bytes.begin(), bytes.end());
    } catch (const json::exception& e) {
      throw Error("checkpoint marker '" + marker_path + "' is corrupted (invalid JSON: " + e.what() + ")");
    }
  }
  TL_CHECK(marker.is_object() && marker.contains("format") && marker["format"] == kCheckpointFormat &&
               marker.contains("files") && marker["files"].is_object() && marker.contains("version"),
           "checkpoint marker '" + marker_path + "' is not a trainlab checkpoint marker");
  const json& version = marker["version"];
  TL_CHECK(version.is_number_integer() && version.get<std::int64_t>() >= 1 &&
               version.get<std::int64_t>() <= kCheckpointFormatVersion,
           "checkpoint '" + dir + "' has format version " + version.dump() + ", this build reads versions 1 to " +
               std::to_string(kCheckpointFormatVersion));
  // Version 2 on: the marker's own checksum, over its other fields.
  if (version.get<std::int64_t>() >= 2) {
    TL_CHECK(marker.contains("crc32") && marker["crc32"].is_string(),
             "checkpoint marker '" + marker_path + "' lacks its own checksum (crc32)");
    json rest = marker;
    rest.erase("crc32");
    const std::string text = rest.dump();
    const std::string crc = crc32_hex(crc32(text.data(), text.size()));
    TL_CHECK(crc == marker["crc32"].get<std::string>(),
             "checkpoint marker '" + marker_path + "' is corrupted: its CRC-32 " + crc +
                 " does not match the recorded " + marker["crc32"].get<std::string>());
  }

  // The marker lists the three files and nothing else: an entry for a file a save never writes
  // (missing or not) is a forged or foreign marker.
  for (const auto& [name, entry] : marker["files"].items()) {
    TL_CHECK(name == kModelFile || name == kOptimizerFile || name == kStateFile,
             "checkpoint marker '" + marker_path + "' lists " + quote_value(name) + ", not a checkpoint file (" +
                 kModelFile + ", " + kOptimizerFile + ", " + kStateFile + ")");
  }
  return marker;
}

// One of the checkpoint's files, read and checked against its entry in the marker.
std::vector<unsigned char> read_checkpoint_file(const std::string& dir, const json& marker,
                                                const std::string& marker_path, const char* file) {
  std::error_code ec;
  const std::string path = join(dir, file);
  TL_CHECK(marker["files"].contains(file), "checkpoint marker '" + marker_path + "' does not list " + file);
  const json& entry = marker["files"][file];
  TL_CHECK(entry.is_object() && entry.contains("bytes") && entry["bytes"].is_number_unsigned() &&
               entry.contains("crc32") && entry["crc32"].is_string(),
           "checkpoint marker '" + marker_path + "' has a malformed entry for " + file);
  TL_CHECK(fs::exists(path, ec) || fs::is_symlink(path, ec), "checkpoint file '" + path + "' is missing");
  const auto expected_bytes = entry["bytes"].get<std::uint64_t>();
  std::uint64_t actual_bytes = 0;
  try {
    actual_bytes = regular_file_size(path);
  } catch (const Error& e) {
    throw Error("checkpoint file " + std::string(e.what()));
  }
  TL_CHECK(actual_bytes == expected_bytes, "checkpoint file '" + path + "' is " +
                                               (actual_bytes < expected_bytes ? "truncated" : "longer than recorded") +
                                               ": " + std::to_string(actual_bytes) + " bytes, the marker records " +
                                               std::to_string(expected_bytes));
  const std::uint64_t limit = std::string(file) == kStateFile ? kMaxStateBytes : host_memory_total_bytes();
  check_host_memory(actual_bytes, "checkpoint file '" + path + "'", "");
  auto bytes = read_file(path, limit > 0 ? limit : actual_bytes);
  TL_CHECK(bytes.size() == expected_bytes, "checkpoint file '" + path + "' changed while it was read");
  const std::string crc = crc32_hex(crc32(bytes.data(), bytes.size()));
  TL_CHECK(crc == entry["crc32"].get<std::string>(), "checkpoint file '" + path + "' is corrupted: CRC-32 " + crc +
                                                         " does not match the recorded " +
                                                         entry["crc32"].get<std::string>());
  return bytes;
}
}  // namespace

Checkpoint load_checkpoint(const std::string& dir, Backend& backend) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_missing_checkpoint(dir);
  const std::string marker_path = join(dir, kMarkerFile);
  const json marker = read_checkpoint_marker(dir, marker_path);
  // Every file: a regular file of the recorded size (checked before a byte is read), then the CRC.
  std::map<std::string, std::vector<unsigned char>> files;
  for (const char* file : {kModelFile, kOptimizerFile, kStateFile})
    files[file] = read_checkpoint_file(dir, marker, marker_path, file);

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
    check_json_bounds(reinterpret_cast<const char*>(state_bytes.data()), state_bytes.size(), kMaxStateDepth,
                      kMaxStateBytes, "checkpoint state '" + state_path + "'");
    const json state = json::parse(state_bytes.begin(), state_bytes.end());
    TL_CHECK(state.is_object() && state.contains("format") && state["format"] == kCheckpointFormat,
             "'" + state_path + "' is not trainlab state");
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
