#include "bench/ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backends/error.h"
#include "engine/fileio.h"
#include "engine/version.h"

namespace trainlab::bench {

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown CPU";
}

std::string hostname() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof buffer - 1) != 0) return "unknown";
  return buffer;
}
}  // namespace

json Environment::to_json() const {
  return {{"device", {{"type", device_type}, {"name", device_name}}},
          {"host", host},
          {"cores", cores},
          {"threads", threads},
          {"backend", backend},
          {"backend_describe", backend_describe},
          {"timer", timer},
          {"versions", versions}};
}

Environment current_environment(Backend& backend) {
  Environment env;
  env.device_type = device_type_name(backend.device_type());
  env.device_name = backend.device_type() == DeviceType::cpu ? cpu_model() : backend.describe();
  env.host = hostname();
  env.cores = static_cast<int>(std::thread::hardware_concurrency());
  env.threads = backend.num_threads();
  env.backend = backend.name();
  env.backend_describe = backend.describe();
  env.timer = backend.make_timer()->kind();
  env.versions = {{"engine", git_describe()}, {"trainlab", version()}, {"compiler", compiler_version()}};
  return env;
}

std::string default_ledger_path(const std::string& device_type) { return "results/ledger_" + device_type + ".jsonl"; }

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string new_run_id() {
  std::string id = utc_now();
  id.erase(std::remove(id.begin(), id.end(), '-'), id.end());
  id.erase(std::remove(id.begin(), id.end(), ':'), id.end());
  return id + "-" + std::to_string(::getpid());
}

void Ledger::append(json row) const {
  TL_CHECK(row.is_object() && row.contains("device") && row["device"].contains("name"),
           "ledger: a row must record its device");
  // One device per ledger: its first row decides.
  const Loaded existing = load();
  if (!existing.rows.empty()) {
    const json& first = existing.rows.front()["device"];
    TL_CHECK(first == row["device"], "ledger '" + path_ + "' holds rows measured on " + first.dump() +
                                         "; this row was measured on " + row["device"].dump() +
                                         " (use that device's own ledger, e.g. results/ledger_<device>.jsonl)");
  }
  row["schema"] = kLedgerSchema;
  if (!row.contains("time")) row["time"] = utc_now();
  const std::string line = row.dump() + "\n";

  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    TL_CHECK(!ec, "ledger: cannot create '" + parent.string() + "': " + ec.message());
  }
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  TL_CHECK(fd >= 0, "ledger: cannot open '" + path_ + "': " + std::strerror(errno));
  // A run interrupted mid-write leaves a torn last line (no newline). It is the row that was in
  // flight: cut it off, so this row starts on a line of its own and the ledger stays readable.
  if (const off_t size = ::lseek(fd, 0, SEEK_END); size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, size - 1) == 1 && last != '\n') {
      const auto bytes = read_file(path_);
      const std::string text(bytes.begin(), bytes.end());
      const std::size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      const int cut = ::ftruncate(fd, static_cast<off_t>(keep));
      const int cut_errno = errno;
      if (cut != 0) ::close(fd);
      TL_CHECK(cut == 0, "ledger: cannot cut the torn last row of '" + path_ + "': " + std::strerror(cut_errno));
      std::fprintf(stderr, "ledger: %s ended in a torn row (an interrupted run); it was dropped\n", path_.c_str());
    }
  }
  // One write of the whole line (O_APPEND puts it at the end), then fsync: a crash tears at most
  // this line.
  const ssize_t written = ::write(fd, line.data(), line.size());
  const int write_errno = errno;
  const int synced = ::fsync(fd);
  ::close(fd);
  TL_CHECK(written == static_cast<ssize_t>(line.size()),
           "ledger: short write to '" + path_ + "': " + (written < 0 ? std::strerror(write_errno) : "disk full?"));
  TL_CHECK(synced == 0, "ledger: cannot sync '" + path_ + "'");
}

Ledger::Loaded Ledger::load() const {
  Loaded out;
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) return out;
  const auto bytes = read_file(path_);
  const std::string text(bytes.begin(), bytes.end());
  std::size_t start = 0, line_number = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    ++line_number;
    const bool last = end == std::string::npos;
    const std::string line = text.substr(start, last ? std::string::npos : end - start);
    start = last ? text.size() : end + 1;
    if (line.empty()) continue;
    json row;
    try {
      row = json::parse(line);
    } catch (const json::exception& e) {
      if (last) {  // the row in flight when a run was interrupted
        out.warnings.push_back("ledger '" + path_ + "': dropped an incomplete last line (" +
                               std::to_string(line.size()) + " bytes; an interrupted run)");
        break;
      }
      throw Error("ledger '" + path_ + "' line " + std::to_string(line_number) + " is damaged: " + e.what());
    }
    if (last) {  // a complete object without its newline is still a torn write
      out.warnings.push_back("ledger '" + path_ + "': dropped a last line without its newline (an interrupted run)");
      break;
    }
    TL_CHECK(row.is_object() && row.value("schema", 0) == kLedgerSchema,
             "ledger '" + path_ + "' line " + std::to_string(line_number) + " has schema " +
                 (row.is_object() && row.contains("schema") ? row["schema"].dump() : "none") + "; this build reads " +
                 std::to_string(kLedgerSchema));
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace trainlab::bench
