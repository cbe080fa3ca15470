#include "engine/data/dataset_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "engine/data/token_dataset.h"
#include "engine/io/fileio.h"
#include "engine/io/text.h"

namespace trainlab::dataset_dir {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::uint32_t manifest_crc(json j) {
  j.erase("crc32");
  const std::string text = j.dump();
  return crc32(text.data(), text.size());
}

std::uint32_t parse_crc(const std::string& text, const std::string& where) {
  TL_CHECK(text.size() == 8 && text.find_first_not_of("0123456789abcdef") == std::string::npos,
           where + ": CRC-32 " + quote_value(text) + " is not 8 hex digits");
  return static_cast<std::uint32_t>(std::stoul(text, nullptr, 16));
}

std::string manifest_text(json j) {
  j["crc32"] = crc32_hex(manifest_crc(j));
  return j.dump(1) + "\n";
}

namespace {

json parse_manifest(const std::string& dir, DatasetFile* file = nullptr) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::error_code ec;
  TL_CHECK(fs::is_directory(dir, ec), "data set " + quote_value(dir) + " is not a directory");
  TL_CHECK(fs::exists(path, ec), "data set " + dir + " has no " + kManifest +
                                     " (written last by trainlab make-dataset: an incomplete or foreign directory)");
  const auto bytes = read_file(path, kMaxManifestBytes);
  check_json_bounds(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 16, kMaxManifestBytes, path);
  if (file != nullptr) *file = {kManifest, bytes.size(), crc32(bytes.data(), bytes.size())};
  try {
    return json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw Error(path + " is not JSON: " + e.what());
  }
}

}  // namespace

ManifestRead read_manifest(const std::string& dir, const std::string& format, int oldest, int newest) {
  const std::string path = (fs::path(dir) / kManifest).string();
  ManifestRead read;
  read.json = parse_manifest(dir, &read.file);
  const json& j = read.json;
  // What it is, before what it says: another format, or a version this build does not read.
  const auto named = j.is_object() ? j.find("format") : j.end();
  TL_CHECK(j.is_object() && named != j.end() && *named == format,
           path + " is not a " + format + " manifest (its format is " +
               (j.is_object() && named != j.end() ? named->dump() : std::string("missing")) + ")");
  const auto version = j.find("version");
  TL_CHECK(version != j.end() && version->is_number_integer() && *version >= oldest && *version <= newest,
           path + ": manifest version " + (version != j.end() ? version->dump() : std::string("missing")) +
               " (this trainlab reads versions " + std::to_string(oldest) + " to " + std::to_string(newest) +
               "; write the data set again with trainlab make-dataset)");
  return read;
}

void check_manifest_crc(const json& j, const std::string& crc, const std::string& path) {
  TL_CHECK(manifest_crc(j) == parse_crc(crc, path),
           path + ": its CRC-32 is " + crc32_hex(manifest_crc(j)) + ", it says " + crc +
               " (edited or corrupted; write the data set again with trainlab make-dataset)");
}

std::string manifest_format(const std::string& dir) {
  try {
    const json j = parse_manifest(dir);
    const auto named = j.is_object() ? j.find("format") : j.end();
    return named != j.end() && named->is_string() ? named->get<std::string>() : std::string();
  } catch (const Error&) {
    return "";
  }
}

std::vector<DatasetFile> listed_files(const std::string& dir) {
  const std::string format = manifest_format(dir);
  if (format == kTokenDatasetFormat) return read_token_dataset_info(dir).files;
  return read_dataset_info(dir).files;  // an image data set, or the image reader's error
}

namespace {

// After a replace: the old data set's own files (its manifest's list) are removed from `old`; what
// else was in it (a user's files) moves into the new data set at `out` unless the new one has that
// name, in which case `old` is kept with it. Returns `old` when kept, "" when it is gone.
std::string retire_old_dataset(const fs::path& old, const fs::path& out, const std::vector<DatasetFile>& files) {
  std::error_code ec;
  for (const auto& f : files) fs::remove(old / f.path, ec);
  // Directories the data set made, emptied, deepest first.
  std::vector<fs::path> dirs;
  for (auto it = fs::recursive_directory_iterator(old, ec); it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path());
  std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) { return a.native() > b.native(); });
  for (const auto& d : dirs)
    if (fs::is_empty(d, ec)) fs::remove(d, ec);
  for (const auto& entry : fs::directory_iterator(old, ec)) {
    const fs::path target = out / entry.path().filename();
    if (!fs::exists(fs::symlink_status(target, ec))) fs::rename(entry.path(), target, ec);
  }
  if (fs::is_empty(old, ec)) {
    fs::remove(old, ec);
    return "";
  }
  return old.string();
}

// The file that marks a staging directory as make-dataset's own (removed just before the rename).
const char* const kStagingMark = ".trainlab-staging";

// What killed make-dataset runs left beside `name`: NAME.partial-PID (or -PID-N), marked as ours,
// whose process is gone. Anything else that looks like it is left alone.
void remove_stale_partials(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  const std::string prefix = name + ".partial-";
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string entry_name = entry.path().filename().string();
    if (entry_name.rfind(prefix, 0) != 0) continue;
    const std::string rest = entry_name.substr(prefix.size());
    const std::string pid = rest.substr(0, rest.find('-'));
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (process_alive(std::stol(pid))) continue;  // a run in progress
    std::error_code check;
    if (!fs::is_directory(fs::symlink_status(entry.path(), check)) || !fs::exists(entry.path() / kStagingMark, check))
      continue;  // not our staging
    fs::remove_all(entry.path(), check);
  }
}

// The data set's directory, absolute. The directory itself ("new/" and "." name it too: without the
// trailing separator, its staging would have been made inside it).
fs::path dataset_directory(const std::string& given) {
  TL_CHECK(!given.empty(), "make-dataset: --out is required (the data set's directory)");
  fs::path out = fs::absolute(given).lexically_normal();
  while (out.filename().empty() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  TL_CHECK(out != out.root_path(), "make-dataset: --out " + quote_value(given) + " is the root directory");
  return out;
}

// Never replace what is not ours: `out` must not exist, be an empty directory, or (with
// overwrite) hold a data set an earlier make-dataset wrote, whose files are returned (nullopt: none).
std::optional<std::vector<DatasetFile>> check_replaceable(const fs::path& out, bool overwrite) {
  std::error_code ec;
  const auto status = fs::symlink_status(out, ec);
  // With --overwrite, what is replaced is exactly the files a valid manifest lists (its own CRC-32
  // holds): a one-line manifest beside a user's photos is not a data set, and a user's own file
  // inside a real data set is kept.
  std::optional<std::vector<DatasetFile>> existing;
  if (fs::exists(status)) {
    TL_CHECK(fs::is_directory(status), "make-dataset: --out " + out.string() + " exists and is not a directory");
    if (!fs::is_empty(out)) {
      std::string why;
      try {
        existing = listed_files(out.string());
      } catch (const Error& e) {
        why = e.what();
      }
      TL_CHECK(existing.has_value(), "make-dataset: --out " + out.string() +
                                         " is a directory with files that are not a trainlab data set (" + why +
                                         "); choose a new or empty directory");
      TL_CHECK(overwrite,
               "make-dataset: --out " + out.string() + " already holds a data set; pass --overwrite to replace it");
    }
  }
  return existing;
}

// Our own staging directory beside `out`, marked as ours; one that exists already is not (another
// run's, or a stale one whose process had this number): it is left alone, and another name is taken.
fs::path make_staging_directory(const fs::path& parent, const fs::path& out) {
  std::error_code ec;
  const std::string stem = out.filename().string() + ".partial-" + std::to_string(::getpid());
  fs::path tmp = parent / stem;
  for (int n = 1; fs::exists(fs::symlink_status(tmp, ec)); ++n) tmp = parent / (stem + "-" + std::to_string(n));
  TL_CHECK(fs::create_directory(tmp, ec) && !ec,
           "make-dataset: cannot create the staging directory " + tmp.string() + ": " + ec.message());
  write_file_atomic((tmp / kStagingMark).string(), std::string("make-dataset staging\n"));
  return tmp;
}

}  // namespace

StagedWrite::StagedWrite(const std::string& out, bool overwrite) : out_(dataset_directory(out)) {
  existing_ = check_replaceable(out_, overwrite);
  const fs::path parent = out_.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  TL_CHECK(!ec, "make-dataset: --out " + out_.string() + ": cannot create " + parent.string() + ": " + ec.message());
  remove_stale_partials(parent, out_.filename().string());
  tmp_ = make_staging_directory(parent, out_);
}

StagedWrite::~StagedWrite() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

// The complete staging directory renamed to `out`: a data set there is moved aside and retired
// (retire_old_dataset), an empty directory removed.
std::string StagedWrite::commit(const std::string& manifest) {
  // Everything on storage before the manifest that says it is complete.
  const int dir_fd = ::open(tmp_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dir_fd >= 0 && ::syncfs(dir_fd) == 0;
  if (dir_fd >= 0) ::close(dir_fd);
  TL_CHECK(synced, "make-dataset: cannot sync " + tmp_.string());
  write_file_atomic((tmp_ / kManifest).string(), manifest);
  std::error_code ec;
  fs::remove(tmp_ / kStagingMark, ec);
  const fs::path parent = out_.parent_path();
  std::string kept;
  if (existing_) {
    const fs::path old = parent / (out_.filename().string() + ".old-" + std::to_string(::getpid()));
    fs::rename(out_, old);
    fs::rename(tmp_, out_);
    committed_ = true;
    kept = retire_old_dataset(old, out_, *existing_);
  } else {
    if (fs::exists(out_)) fs::remove(out_);  // an empty directory
    fs::rename(tmp_, out_);
    committed_ = true;
  }
  fsync_directory(parent.string());
  return kept;
}

}  // namespace trainlab::dataset_dir
