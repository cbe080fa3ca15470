// A data set's directory as make-dataset writes it, whatever it holds (images:
// engine/data/disk_dataset.h; token streams: engine/data/token_dataset.h). Private to engine/data/.
//
// The manifest (manifest.json) is written last: its presence marks a complete data set. It names its
// format and version and carries its own CRC-32 (of its JSON without that key). The write happens in
// a staging directory beside `out`, marked as ours, renamed into place once complete: an interrupted
// write leaves no data set behind, and the next run removes the staging of a process that is gone.
// Replacing a data set (--overwrite) removes exactly the files its manifest lists; a user's own file
// in its directory is kept (moved into the new one).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/disk_dataset.h"

namespace trainlab::dataset_dir {

constexpr const char* kManifest = "manifest.json";
constexpr std::uint64_t kMaxManifestBytes = 1ull << 30;

// A file as a manifest lists it (typed for engine/io/fields.h): its path inside the data set, its
// size and its CRC-32 as 8 hex digits. A shard's index, a token stream.
struct ManifestFileRef {
  std::string path;
  std::uint64_t bytes = 0;
  std::string crc32;
  template <class F>
  void fields(F& f) {
    f("path", path);
    f("bytes", bytes);
    f("crc32", crc32);
  }
};

// The manifest's own CRC-32: of its JSON with the crc32 key removed.
std::uint32_t manifest_crc(nlohmann::json j);
// "1a2b3c4d" as a number; Error naming `where` unless 8 lowercase hex digits.
std::uint32_t parse_crc(const std::string& text, const std::string& where);
// The manifest's text as written: `j` with its crc32.
std::string manifest_text(nlohmann::json j);

// dir/manifest.json parsed, checked to be JSON of `format` at a version in [oldest, newest] (the
// caller reads its fields, then checks its CRC with check_manifest_crc), and the manifest's own
// entry (its size and CRC-32) for the data set's file list. Errors name the path.
struct ManifestRead {
  nlohmann::json json;
  DatasetFile file;
};
ManifestRead read_manifest(const std::string& dir, const std::string& format, int oldest, int newest);
void check_manifest_crc(const nlohmann::json& j, const std::string& crc, const std::string& path);
// The format a directory's manifest names ("" when there is none, or it is not JSON naming one).
std::string manifest_format(const std::string& dir);

// The files of the data set at `dir`, of any format, as its manifest lists them (the manifest last);
// Error when `dir` does not hold one whose manifest checks.
std::vector<DatasetFile> listed_files(const std::string& dir);

// One make-dataset write. The constructor checks `out` (not there, an empty directory, or with
// `overwrite` a data set of any format), removes dead runs' staging beside it and makes this one's;
// the writer fills staging(), then commit() writes the manifest and moves the lot into place. A
// write that is not committed leaves nothing behind.
class StagedWrite {
 public:
  StagedWrite(const std::string& out, bool overwrite);
  ~StagedWrite();
  StagedWrite(const StagedWrite&) = delete;
  StagedWrite& operator=(const StagedWrite&) = delete;
  const std::filesystem::path& out() const { return out_; }  // absolute
  const std::filesystem::path& staging() const { return tmp_; }
  // Syncs the staged files, writes the manifest, renames into place. Returns where the replaced data
  // set's other files were kept when the new one has files of their names ("" : moved into out()).
  std::string commit(const std::string& manifest);

 private:
  std::filesystem::path out_, tmp_;
  std::optional<std::vector<DatasetFile>> existing_;
  bool committed_ = false;
};

}  // namespace trainlab::dataset_dir
