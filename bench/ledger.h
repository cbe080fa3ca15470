// The ledger: every measurement trainlab's benchmarks make, as JSON Lines (one JSON object per
// line) in results/ledger_<device>.jsonl, schema version kLedgerSchema.
//
// Rows are appended one at a time, each with a single write() of the whole line followed by
// fsync, so an interrupted run loses at most the row it was writing: load() drops a torn last line
// (and says so); a damaged line anywhere else, or a row that lacks a field its readers use or holds
// it with another type (row_problem), is skipped with a warning naming its line, so one bad row
// never stops a report or a new run's appends. A ledger holds one device: appending a
// row measured on another device is refused, and rows of different devices or engine versions are
// never put in one table (see Run below).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace trainlab::bench {

inline constexpr int kLedgerSchema = 1;
using json = nlohmann::json;

// Where a measurement was made: the same for every row of one run.
struct Environment {
  std::string device_type;  // "cpu" | "cuda"
  std::string device_name;  // the CPU model, or the GPU's name
  std::string host;
  int cores = 0;
  int threads = 0;
  std::string backend;
  std::string backend_describe;
  // The instruction set the backend's kernels were chosen for ("avx2", "avx512_core_bf16"; "sm_90"
  // on a GPU), and on the CPU the whole story: what the CPU has, the cap, the build's target.
  std::string isa;
  std::string cpu_isa;
  std::string timer;      // steady_clock on the CPU; CUDA events on a GPU
  json versions;          // engine (git describe), compiler, backend library, ...
  std::string placement;  // local rank and GPU (backends/device_selection.h)
  json to_json() const;
};
Environment current_environment(Backend& backend);
std::string default_ledger_path(const std::string& device_type);  // results/ledger_<device>.jsonl
std::string new_run_id();                                         // 20261129T120000Z-<pid>
std::string utc_now();                                            // ISO 8601
// Why a parsed row cannot be used (empty when it can): the schema, and the fields of its kind
// that readers rely on, with their types.
std::string row_problem(const json& row);

class Ledger {
 public:
  explicit Ledger(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // Appends one row (adding "schema" and "time"); the row must carry "device": {"name", ...}.
  void append(json row) const;

  struct Loaded {
    std::vector<json> rows;
    std::vector<std::string> warnings;  // e.g. a torn last line that was dropped
  };
  // Every complete, well-formed row, in order; the others as warnings. A missing file is an empty
  // ledger; a path that is not a regular file is refused (Error).
  Loaded load() const;

 private:
  void check_ledger_path() const;
  std::string path_;
};

// The (bytes, median seconds) points of one bench_allreduce run in a ledger, for the cost model's
// fit (trainlab collective-cost --fit): the run `run` (the latest all-reduce run when empty), the
// `algorithm` ("ring" | "native") rows. Throws Error naming what is missing.
struct LedgerPoints {
  std::string run_id, dtype;
  int ranks = 0;
  std::vector<std::pair<double, double>> points;
  std::vector<std::string> warnings;  // the ledger's (skipped rows and the like)
};
LedgerPoints allreduce_points(const std::string& path, const std::string& run, const std::string& algorithm);

}  // namespace trainlab::bench
