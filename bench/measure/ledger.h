// The ledger: every measurement trainlab's benchmarks make, as JSON Lines (one JSON object per
// line) in results/ledger_<device>.jsonl, schema version kLedgerSchema.
//
// Rows are typed (bench/measure/row.h): each kind a struct that lists its fields once, written by
// append(row) and read back into the same struct by Loaded::read<Row>(); the structs live beside
// the code that measures them (a study's rows.h). Rows are appended one at a time, each with a single
// write() of the whole line followed by fsync, so an interrupted run loses at most the row it was
// writing: load() drops a torn last line (and says so); a damaged line anywhere else, a row of
// another schema or without its device, and (when read) a row that lacks a field of its kind or
// holds it with another type, is skipped with a warning naming its line, so one bad row never
// stops a report or a new run's appends. A ledger holds one device: appending a
// row measured on another device is refused, and rows of different devices or engine versions are
// never put in one table (see Run below).
#pragma once

#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "bench/measure/row.h"

namespace trainlab::bench {

inline constexpr int kLedgerSchema = 1;
using json = nlohmann::json;

struct DeviceId {
  std::string type;  // "cpu" | "cuda"
  std::string name;  // the CPU model, or the GPU's name
  template <class F>
  void fields(F& f) {
    f.optional("type", type);
    f("name", name);
  }
  bool operator==(const DeviceId&) const = default;
};

// Where a measurement was made: the same for every row of one run (its fields sit at the top level
// of each row).
struct Environment {
  DeviceId device;
  std::string host;
  int cores = 0;
  int threads = 0;
  std::string backend;
  std::string backend_describe;
  // The instruction set the backend's kernels were chosen for ("avx2", "avx512_core_bf16"; "sm_90"
  // on a GPU), and on the CPU the whole story: what the CPU has, the cap, the build's target.
  std::string isa;
  std::string cpu_isa;
  std::string timer;                            // steady_clock on the CPU; CUDA events on a GPU
  std::map<std::string, std::string> versions;  // engine (git describe), compiler, backend library, ...
  std::string placement;                        // local rank and GPU (backends/device_selection.h)
  template <class F>
  void fields(F& f) {
    f("device", device);
    f.optional("host", host);
    f.optional("cores", cores);
    f.optional("threads", threads);
    f.optional("backend", backend);
    f.optional("backend_describe", backend_describe);
    f.optional("isa", isa);
    f.optional("cpu_isa", cpu_isa);
    f.optional("timer", timer);
    f.optional("versions", versions);
    f.optional("placement", placement);
  }
  json to_json() const { return bench::to_json(*this); }
  std::string engine() const;  // versions["engine"], or "?"
};

// What every row carries: where it was measured, its kind, run, status and time.
struct RowHeader {
  Environment env;
  std::string kind;
  std::string run_id;
  std::string status;  // "ok" | "skipped" | "failed" (a measurement that did not happen stays a row)
  std::string time;    // ISO 8601, set by append
  int schema = kLedgerSchema;
  template <class F>
  void fields(F& f) {
    env.fields(f);
    f.optional("kind", kind);
    f.optional("run_id", run_id);
    f.optional("status", status);
    f.optional("time", time);
    f.optional("schema", schema);
  }
  bool ok() const { return status == "ok"; }
};

Environment current_environment(Backend& backend);
std::string default_ledger_path(const std::string& device_type);  // results/ledger_<device>.jsonl
std::string new_run_id();                                         // 20261129T120000Z-<pid>
std::string utc_now();                                            // ISO 8601
// Why a parsed row cannot be used by any reader (empty when it can): its schema and its device.
// A row's own fields are checked when it is read into its struct (Loaded::read).
std::string row_problem(const json& row);

class Ledger {
 public:
  // A path that holds something other than a ledger (a directory, a user's text) is refused here,
  // before a tool measures anything; nothing there yet is fine.
  explicit Ledger(std::string path);
  const std::string& path() const { return path_; }

  // Appends one row (adding "schema" and "time"); the row must carry "device": {"name", ...}.
  template <class Row>
  void append(const Row& row) const {
    append_json(bench::to_json(row));
  }
  void append_json(json row) const;

  struct Loaded {
    std::string path;
    std::vector<json> rows;
    std::vector<std::size_t> lines;     // each row's line in the file
    std::vector<std::string> warnings;  // e.g. a torn last line that was dropped
    // Every row of `Row`'s kind (Row::kKind, or any of Row::kinds()) read into its struct, in order;
    // a row that does not fit is skipped with a warning naming its line (added to `warnings` when
    // given). Rows of other kinds are passed over.
    template <class Row>
    std::vector<Row> read(std::vector<std::string>* warnings = nullptr) const;
    // The run id of the last row (in file order) of any of `kinds`; "" when there is none.
    std::string latest_run(std::initializer_list<const char*> kinds) const;
  };
  // Every complete, well-formed row, in order; the others as warnings. A missing file is an empty
  // ledger; a path that is not a regular file is refused (Error).
  Loaded load() const;

 private:
  void check_ledger_path() const;
  std::string path_;
};

namespace ledger_detail {
bool kind_matches(const json& row, const char* kind);
template <class Row, class = void>
struct has_kinds : std::false_type {};
template <class Row>
struct has_kinds<Row, std::void_t<decltype(Row::kinds())>> : std::true_type {};
}  // namespace ledger_detail

template <class Row>
std::vector<Row> Ledger::Loaded::read(std::vector<std::string>* out_warnings) const {
  std::vector<Row> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    bool mine = false;
    if constexpr (ledger_detail::has_kinds<Row>::value) {
      for (const char* kind : Row::kinds()) mine = mine || ledger_detail::kind_matches(rows[i], kind);
    } else {
      mine = ledger_detail::kind_matches(rows[i], Row::kKind);
    }
    if (!mine) continue;
    try {
      out.push_back(from_json<Row>(rows[i]));
    } catch (const RowError& e) {
      if (out_warnings != nullptr)
        out_warnings->push_back("ledger '" + path + "' line " + std::to_string(lines[i]) + " skipped: " + e.what());
    }
  }
  return out;
}

// The latest run of `rows` (the last row's run id among those `accept` keeps; "" when there is
// none), and every row of that run.
template <class Row, class Accept>
std::pair<std::string, std::vector<Row>> latest_run(const std::vector<Row>& rows, Accept accept) {
  std::string run_id;
  for (const Row& row : rows)
    if (accept(row)) run_id = row.header.run_id;
  std::vector<Row> of_run;
  if (run_id.empty()) return {run_id, of_run};
  for (const Row& row : rows)
    if (row.header.run_id == run_id) of_run.push_back(row);
  return {run_id, of_run};
}
template <class Row>
std::pair<std::string, std::vector<Row>> latest_run(const std::vector<Row>& rows) {
  return latest_run(rows, [](const Row&) { return true; });
}

}  // namespace trainlab::bench
