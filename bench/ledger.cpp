#include "bench/ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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
#include "engine/fileio.h"
#include "engine/version.h"

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

json Environment::to_json() const {
  return {{"device", {{"type", device_type}, {"name", device_name}}},
          {"host", host},
          {"cores", cores},
          {"threads", threads},
          {"backend", backend},
          {"backend_describe", backend_describe},
          {"isa", isa},
          {"cpu_isa", cpu_isa},
          {"timer", timer},
          {"versions", versions},
          {"placement", placement}};
}

Environment current_environment(Backend& backend) {
  Environment env;
  env.device_type = device_type_name(backend.device_type());
  env.device_name = backend.device_type() == DeviceType::cpu ? cpu_model() : backend.device_model();
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

void Ledger::check_ledger_path() const {
  // Appended to and read back: a regular file (a link to one is followed) or nothing yet.
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec) && !std::filesystem::is_symlink(path_, ec)) {
    check_output_file(path_, "ledger");
    return;
  }
  try {
    regular_file_size(path_);
  } catch (const Error& e) {
    throw Error("ledger " + std::string(e.what()) + " (a ledger is a regular file, appended to and read back)");
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

void Ledger::append(json row) const {
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

namespace {
// What the readers (bench_report, bench_ladder, collective-cost --fit) rely on, per row kind: a
// row that lacks a field, or holds it with another type, is skipped with its line number rather
// than read into an abort.
enum class Type { string, number, integer, boolean, object, numbers, nullable_object };

struct Field {
  const char* pointer;  // JSON pointer
  Type type;
  bool required;
};

const char* type_name(Type type) {
  switch (type) {
    case Type::string:
      return "a string";
    case Type::number:
      return "a number";
    case Type::integer:
      return "an integer";
    case Type::boolean:
      return "true or false";
    case Type::object:
      return "an object";
    case Type::numbers:
      return "an array of numbers";
    case Type::nullable_object:
      return "an object or null";
  }
  return "?";
}

bool has_type(const json& value, Type type) {
  switch (type) {
    case Type::string:
      return value.is_string();
    case Type::number:
      return value.is_number();
    case Type::integer:
      return value.is_number_integer();
    case Type::boolean:
      return value.is_boolean();
    case Type::object:
      return value.is_object();
    case Type::numbers:
      return value.is_array() && std::all_of(value.begin(), value.end(), [](const json& v) { return v.is_number(); });
    case Type::nullable_object:
      return value.is_null() || value.is_object();
  }
  return false;
}

// Fields every row has, then each kind's own (some only when its status is "ok").
const std::vector<Field> kEveryRow = {{"/device", Type::object, true},
                                      {"/device/name", Type::string, true},
                                      {"/device/type", Type::string, false},
                                      {"/kind", Type::string, false},
                                      {"/run_id", Type::string, false},
                                      {"/status", Type::string, false},
                                      {"/host", Type::string, false},
                                      {"/cores", Type::integer, false},
                                      {"/threads", Type::integer, false},
                                      {"/backend", Type::string, false},
                                      {"/backend_describe", Type::string, false},
                                      {"/timer", Type::string, false},
                                      {"/versions", Type::object, false},
                                      {"/versions/engine", Type::string, false},
                                      {"/versions/compiler", Type::string, false},
                                      {"/time", Type::string, false}};
const std::vector<Field> kLadderRow = {{"/run_id", Type::string, true},
                                       {"/device/type", Type::string, true},
                                       {"/rung_index", Type::integer, true},
                                       {"/rung", Type::string, true},
                                       {"/status", Type::string, true},
                                       {"/versions", Type::object, true},
                                       {"/versions/engine", Type::string, true},
                                       {"/calibration", Type::boolean, false},
                                       {"/ladder", Type::string, false},
                                       {"/reason", Type::string, false},
                                       {"/error", Type::string, false},
                                       {"/note", Type::string, false},
                                       {"/incomplete", Type::boolean, false},
                                       {"/measured_steps", Type::integer, false},
                                       {"/warmup_steps_excluded", Type::integer, false},
                                       {"/held_out_accuracy", Type::number, false},
                                       {"/changed", Type::nullable_object, false},
                                       {"/repeats", Type::numbers, false}};
const std::vector<Field> kRungRow = {{"/rung_index", Type::integer, true}};
const std::vector<Field> kBreakdown = {
    {"/breakdown/data_wait/seconds_per_step", Type::number, true}, {"/breakdown/data_wait/share", Type::number, true},
    {"/breakdown/forward/seconds_per_step", Type::number, true},   {"/breakdown/forward/share", Type::number, true},
    {"/breakdown/backward/seconds_per_step", Type::number, true},  {"/breakdown/backward/share", Type::number, true},
    {"/breakdown/optimizer/seconds_per_step", Type::number, true}, {"/breakdown/optimizer/share", Type::number, true}};
const std::vector<Field> kRungOk = {{"/repeats", Type::numbers, true},   {"/stats/median", Type::number, true},
                                    {"/stats/mean", Type::number, true}, {"/stats/std", Type::number, true},
                                    {"/stats/min", Type::number, true},  {"/stats/max", Type::number, true},
                                    {"/stats/n", Type::integer, true}};
const std::vector<Field> kRepeatOk = {{"/value", Type::number, true}};
const std::vector<Field> kChanged = {
    {"/changed/knob", Type::string, true}, {"/changed/from", Type::string, true}, {"/changed/to", Type::string, true}};
const std::vector<Field> kAllreduceRow = {
    {"/run_id", Type::string, true},        {"/status", Type::string, true},
    {"/config", Type::object, true},        {"/config/algorithm", Type::string, true},
    {"/config/ranks", Type::integer, true}, {"/config/bytes", Type::number, true},
    {"/config/dtype", Type::string, false}};
const std::vector<Field> kAllreduceOk = {{"/stats/median", Type::number, true}};
// The studies' rows (studies/cost_to_accuracy, studies/pinning), as their report sections read them.
const std::vector<Field> kCostRepeatRow = {
    {"/run_id", Type::string, true},      {"/status", Type::string, true},    {"/config_name", Type::string, true},
    {"/batch", Type::integer, true},      {"/lr", Type::number, true},        {"/lr_follows_rule", Type::boolean, true},
    {"/dtype", Type::string, true},       {"/rate", Type::number, true},      {"/target", Type::number, true},
    {"/eval_every", Type::integer, true}, {"/step_cap", Type::integer, true}, {"/config_index", Type::integer, false},
    {"/error", Type::string, false}};
const std::vector<Field> kCostRepeatOk = {{"/samples_per_s", Type::number, true}, {"/reached", Type::boolean, true}};
const std::vector<Field> kCostReached = {{"/steps_to_target", Type::integer, true}};
const std::vector<Field> kBreakEvenRow = {{"/run_id", Type::string, true},
                                          {"/status", Type::string, true},
                                          {"/world", Type::integer, true},
                                          {"/global_batch", Type::integer, true},
                                          {"/samples_per_s", Type::number, true},
                                          {"/config_name", Type::string, true},
                                          {"/samples_to_target", Type::number, true},
                                          {"/hours", Type::number, true},
                                          {"/dollars", Type::number, true},
                                          {"/multiplier", Type::number, true},
                                          {"/dollars_per_hour_saved", Type::number, true},
                                          {"/note", Type::string, true}};
const std::vector<Field> kPinningRow = {{"/run_id", Type::string, true},    {"/status", Type::string, true},
                                        {"/condition", Type::string, true}, {"/arm", Type::string, true},
                                        {"/workers", Type::integer, true},  {"/threads", Type::integer, true}};
const std::vector<Field> kPinningOk = {{"/samples_per_s", Type::number, true},
                                       {"/applied/main", Type::string, true},
                                       {"/applied/workers", Type::string, true},
                                       {"/applied/as_set", Type::boolean, true}};

std::string check_fields(const json& row, const std::vector<Field>& fields) {
  for (const Field& f : fields) {
    const json::json_pointer pointer(f.pointer);
    const json* value = nullptr;
    try {
      if (row.contains(pointer)) value = &row.at(pointer);
    } catch (const json::exception&) {
      value = nullptr;  // a parent of the wrong type
    }
    if (value == nullptr) {
      if (f.required) return std::string("no ") + (f.pointer + 1);
      continue;
    }
    if (!has_type(*value, f.type))
      return std::string(f.pointer + 1) + " is " + value->dump().substr(0, 40) + ", not " + type_name(f.type);
  }
  return "";
}

bool one_of(const std::string& value, std::initializer_list<const char*> allowed) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return value == a; });
}
}  // namespace

std::string row_problem(const json& row) {
  if (!row.is_object()) return "not a JSON object";
  if (!row.contains("schema") || !row["schema"].is_number_integer()) {
    return "schema is " + (row.contains("schema") ? row["schema"].dump().substr(0, 40) : std::string("missing")) +
           ", not the integer " + std::to_string(kLedgerSchema);
  }
  if (row["schema"].get<std::int64_t>() != kLedgerSchema)
    return "schema " + row["schema"].dump() + " (this build reads schema " + std::to_string(kLedgerSchema) + ")";
  std::string problem = check_fields(row, kEveryRow);
  if (!problem.empty()) return problem;
  const std::string kind = row.value("kind", "");
  const std::string status = row.value("status", "");
  auto all = [&](std::initializer_list<const std::vector<Field>*> lists) {
    for (const auto* list : lists) {
      std::string p = check_fields(row, *list);
      if (!p.empty()) return p;
    }
    return std::string();
  };
  if (kind == "rung" || kind == "repeat") {
    problem = all({&kLadderRow});
    if (problem.empty() && !one_of(status, {"ok", "skipped", "failed"}))
      problem = "status '" + status + "' is not ok, skipped or failed";
    if (problem.empty() && kind == "rung") problem = all({&kRungRow});
    if (problem.empty() && row.contains("changed") && row["changed"].is_object()) problem = all({&kChanged});
    if (problem.empty() && status == "ok")
      problem = kind == "rung" ? all({&kRungOk, &kBreakdown}) : all({&kRepeatOk, &kBreakdown});
  } else if (kind == "cost_repeat") {
    problem = all({&kCostRepeatRow});
    if (problem.empty() && status == "ok") problem = all({&kCostRepeatOk});
    if (problem.empty() && status == "ok" && row["reached"].get<bool>()) problem = all({&kCostReached});
  } else if (kind == "cost_break_even") {
    problem = all({&kBreakEvenRow});
  } else if (kind == "pinning_repeat") {
    problem = all({&kPinningRow});
    if (problem.empty() && status == "ok") problem = all({&kPinningOk});
  } else if (kind == "allreduce") {
    problem = all({&kAllreduceRow});
    if (problem.empty() && status == "ok") problem = all({&kAllreduceOk});
  }
  return problem;
}

Ledger::Loaded Ledger::load() const {
  Loaded out;
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
  }
  return out;
}

// The (bytes, median seconds) points of one bench_allreduce run in a ledger; the latest run
// unless `run` names one.
LedgerPoints allreduce_points(const std::string& path, const std::string& run, const std::string& algorithm) {
  const Ledger ledger(path);
  std::error_code ec;
  TL_CHECK(std::filesystem::exists(path, ec), "collective-cost: --fit: ledger '" + path + "' does not exist");
  const auto loaded = ledger.load();
  LedgerPoints out;
  for (const auto& warning : loaded.warnings) out.warnings.push_back(warning);
  std::vector<std::string> runs;
  for (const auto& row : loaded.rows) {
    if (row.value("kind", "") != "allreduce" || row.value("status", "") != "ok") continue;
    const std::string id = row.value("run_id", "");
    if (std::find(runs.begin(), runs.end(), id) == runs.end()) runs.push_back(id);
  }
  TL_CHECK(!runs.empty(),
           "collective-cost: --fit: ledger '" + path +
               "' has no all-reduce rows (write some with scripts/mpirun -np 2 build/bin/bench_allreduce)");
  out.run_id = run.empty() ? runs.back() : run;
  TL_CHECK(
      std::find(runs.begin(), runs.end(), out.run_id) != runs.end(),
      "collective-cost: --run '" + run + "' has no all-reduce rows in '" + path + "' (latest: " + runs.back() + ")");
  for (const auto& row : loaded.rows) {
    if (row.value("kind", "") != "allreduce" || row.value("status", "") != "ok" ||
        row.value("run_id", "") != out.run_id)
      continue;
    const auto& config = row.at("config");
    if (config.value("algorithm", "") != algorithm) continue;
    out.ranks = config.at("ranks").get<int>();
    out.dtype = config.value("dtype", "");
    out.points.emplace_back(config.at("bytes").get<double>(), row.at("stats").at("median").get<double>());
  }
  TL_CHECK(out.points.size() >= 2, "collective-cost: --fit: run " + out.run_id + " has " +
                                       std::to_string(out.points.size()) + " '" + algorithm +
                                       "' sizes; a fit needs at least two");
  return out;
}

}  // namespace trainlab::bench
