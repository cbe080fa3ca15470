#include "bench/measure/ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "backends/cpu/isa.h"
#include "backends/device_selection.h"
#include "backends/error.h"
#include "engine/io/fileio.h"
#include "engine/io/version.h"

namespace trainlab::bench {

namespace {
// A row is a few levels deep (config, stats, breakdown/phase/field); generous bounds.
constexpr int kMaxRowDepth = 16;
constexpr std::size_t kMaxRowBytes = 16 << 20;
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

std::string Environment::engine() const {
  const auto it = versions.find("engine");
  return it == versions.end() ? "?" : it->second;
}

namespace ledger_detail {
bool kind_matches(const json& row, const char* kind) {
  const auto it = row.find("kind");
  return it != row.end() && it->is_string() && it->get_ref<const std::string&>() == kind;
}
}  // namespace ledger_detail

Environment current_environment(Backend& backend) {
  Environment env;
  env.device.type = device_type_name(backend.device_type());
  env.device.name = backend.device_type() == DeviceType::cpu ? cpu_model() : backend.device_model();
  env.host = hostname();
  env.cores = static_cast<int>(std::thread::hardware_concurrency());
  env.threads = backend.num_threads();
  env.backend = backend.name();
  env.backend_describe = backend.describe();
  env.isa = backend.isa();
  env.cpu_isa = cpu::describe_cpu_isa();
  env.timer = backend.make_timer()->kind();
  env.versions = {{"engine", git_describe()}, {"trainlab", version()}, {"compiler", compiler_version()}};
  env.placement = describe_process_placement();
  return env;
}

Ledger::Ledger(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (!path_.empty() && (std::filesystem::exists(path_, ec) || std::filesystem::is_symlink(path_, ec)))
    check_ledger_path();
}

void Ledger::check_ledger_path() const {
  // Appended to and read back: a regular file (a link to one is followed) or nothing yet.
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec) && !std::filesystem::is_symlink(path_, ec)) {
    check_output_file(path_, "ledger");
    return;
  }
  std::uint64_t size = 0;
  try {
    size = regular_file_size(path_);
  } catch (const Error& e) {
    throw Error("ledger " + std::string(e.what()) + " (a ledger is a regular file, appended to and read back)");
  }
  if (size == 0) return;
  // Something else under a ledger's name (a user's notes, a report) is never appended to: its first
  // line must be a row (a JSON object with "schema"), or the start of one an interrupted first write
  // left.
  std::ifstream in(path_, std::ios::binary);
  std::string first(std::min<std::uint64_t>(size, 1 << 16), '\0');
  in.read(first.data(), static_cast<std::streamsize>(first.size()));
  first.resize(static_cast<std::size_t>(in.gcount()));
  const std::size_t newline = first.find('\n');
  bool row = false;
  if (newline == std::string::npos) {
    row = size <= first.size() && !first.empty() && first[0] == '{';  // a torn first row
  } else {
    const json parsed = json::parse(first.substr(0, newline), nullptr, false);
    row = parsed.is_object() && parsed.contains("schema");
  }
  if (!row) {
    std::string shown = first.substr(0, std::min<std::size_t>({newline, first.size(), 60}));
    for (char& c : shown) c = std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    throw Error("ledger '" + path_ + "' is not a ledger: its first line is not a ledger row (a JSON object with " +
                "\"schema\"): '" + shown + "'; name a new file or an existing ledger (a ledger whose first row " +
                "was damaged: remove that line)");
  }
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

void Ledger::append_json(json row) const {
  TL_CHECK(row.is_object() && row.contains("device") && row["device"].contains("name"),
           "ledger: a row must record its device");
  check_ledger_path();
  // One device per ledger: its first row decides.
  const Loaded existing = load();
  if (!existing.rows.empty()) {
    const json& first = existing.rows.front()["device"];
    TL_CHECK(first == row["device"], "ledger '" + path_ + "' holds rows measured on " + first.dump() +
                                         "; this row was measured on " + row["device"].dump() +
                                         " (use that device's own ledger, e.g. results/ledger_<device>.jsonl)");
  }
  row["schema"] = kLedgerSchema;
  if (!row.contains("time") || row["time"] == "") row["time"] = utc_now();
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

std::string Ledger::Loaded::latest_run(std::initializer_list<const char*> kinds) const {
  std::string run_id;
  for (const json& row : rows) {
    const auto id = row.find("run_id");
    if (id == row.end() || !id->is_string()) continue;
    for (const char* kind : kinds)
      if (ledger_detail::kind_matches(row, kind)) run_id = id->get<std::string>();
  }
  return run_id;
}

std::string row_problem(const json& row) {
  if (!row.is_object()) return "not a JSON object";
  if (!row.contains("schema") || !row["schema"].is_number_integer()) {
    return "schema is " + (row.contains("schema") ? row_detail::preview(row["schema"]) : std::string("missing")) +
           ", not the integer " + std::to_string(kLedgerSchema);
  }
  if (row["schema"].get<std::int64_t>() != kLedgerSchema)
    return "schema " + row["schema"].dump() + " (this build reads schema " + std::to_string(kLedgerSchema) + ")";
  // Every row says where it was measured; the rest is its kind's, checked when it is read.
  try {
    (void)from_json<RowHeader>(row);
  } catch (const RowError& e) {
    return e.what();
  }
  return "";
}

Ledger::Loaded Ledger::load() const {
  Loaded out;
  out.path = path_;
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) return out;
  check_ledger_path();
  const auto bytes = read_file(path_);
  const std::string text(bytes.begin(), bytes.end());
  std::size_t start = 0, line_number = 0;
  // Every row is written once (its run, kind, repeat and time in it), so a line seen before is a
  // copy (a ledger concatenated with itself): skipped with a warning, or every figure counts twice.
  std::unordered_map<std::string, std::size_t> seen;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    ++line_number;
    const bool last = end == std::string::npos;
    const std::string line = text.substr(start, last ? std::string::npos : end - start);
    start = last ? text.size() : end + 1;
    if (line.empty()) continue;
    if (const auto [it, fresh] = seen.emplace(line, line_number); !fresh) {
      out.warnings.push_back("ledger '" + path_ + "' line " + std::to_string(line_number) +
                             " skipped: it repeats line " + std::to_string(it->second) +
                             " (a ledger appended to itself?)");
      continue;
    }
    json row;
    try {
      check_json_bounds(line.data(), line.size(), kMaxRowDepth, kMaxRowBytes, "row");
      row = json::parse(line);
    } catch (const Error& e) {
      out.warnings.push_back("ledger '" + path_ + "' line " + std::to_string(line_number) + " skipped: " + e.what());
      continue;
    } catch (const json::exception& e) {
      if (last) {  // the row in flight when a run was interrupted
        out.warnings.push_back("ledger '" + path_ + "': dropped an incomplete last line (" +
                               std::to_string(line.size()) + " bytes; an interrupted run)");
        break;
      }
      out.warnings.push_back("ledger '" + path_ + "' line " + std::to_string(line_number) + " skipped: damaged (" +
                             e.what() + ")");
      continue;
    }
    if (last) {  // a complete object without its newline is still a torn write
      out.warnings.push_back("ledger '" + path_ + "': dropped a last line without its newline (an interrupted run)");
      break;
    }
    if (const std::string problem = row_problem(row); !problem.empty()) {
      out.warnings.push_back("ledger '" + path_ + "' line " + std::to_string(line_number) + " skipped: " + problem);
      continue;
    }
    out.rows.push_back(std::move(row));
    out.lines.push_back(line_number);
  }
  return out;
}

}  // namespace trainlab::bench
