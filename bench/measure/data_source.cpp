#include "bench/measure/data_source.h"

#include "engine/disk_dataset.h"
#include "engine/fileio.h"

namespace trainlab::bench {

std::string DataSource::label() const {
  if (synthetic()) return name;
  return name + " (" + (source.empty() ? dir : source) + ", manifest CRC-32 " + manifest + ")";
}

DataSource data_source_of_dir(const std::string& dir) {
  const DatasetInfo info = read_dataset_info(dir);
  DataSource d;
  d.dir = dir;
  d.source = info.source;
  // The source's last path component ("idx:/usr/share/datasets/fashion-mnist (60000 train, 10000
  // test)" -> "fashion-mnist"), else the directory's.
  std::string path = dir;
  if (!info.source.empty()) {
    path = info.source.substr(info.source.find(':') + 1);
    const auto note = path.rfind(" (");  // the import's note on the splits
    if (note != std::string::npos && path.back() == ')') path.resize(note);
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  d.name = path.substr(path.find_last_of('/') + 1);
  if (d.name.empty()) d.name = dir;
  d.manifest = crc32_hex(info.files.back().crc32);
  return d;
}

DataSource data_source_of(const DataConfig& data) {
  if (data.dir.empty()) return DataSource{"SyntheticImages", "", "", ""};
  return data_source_of_dir(data.dir);
}

void use_data_set(KnobMap& base, const std::string& dir) {
  if (dir.empty()) return;
  base["data"] = dir;
  base.erase("decode_cost");
}

}  // namespace trainlab::bench
