// collective-cost --fit's reader: the (bytes, median seconds) points of one all-reduce run.
#include <algorithm>
#include <filesystem>
#include <map>

#include "backends/error.h"
#include "studies/allreduce/rows.h"

namespace trainlab::bench {

LedgerPoints allreduce_points(const std::string& path, const std::string& run, const std::string& algorithm) {
  std::error_code ec;
  TL_CHECK(std::filesystem::exists(path, ec), "collective-cost: --fit: ledger '" + path + "' does not exist");
  const auto loaded = Ledger(path).load();
  LedgerPoints out;
  out.warnings = loaded.warnings;
  std::vector<AllreduceRow> rows;
  for (auto& row : loaded.read<AllreduceRow>(&out.warnings))
    if (row.header.ok() && row.config.is_allreduce()) rows.push_back(std::move(row));
  std::vector<std::string> runs;
  for (const auto& row : rows)
    if (std::find(runs.begin(), runs.end(), row.header.run_id) == runs.end()) runs.push_back(row.header.run_id);
  TL_CHECK(!runs.empty(),
           "collective-cost: --fit: ledger '" + path +
               "' has no all-reduce rows (write some with scripts/mpirun -np 2 build/bin/bench_allreduce)");
  out.run_id = run.empty() ? runs.back() : run;
  TL_CHECK(
      std::find(runs.begin(), runs.end(), out.run_id) != runs.end(),
      "collective-cost: --run '" + run + "' has no all-reduce rows in '" + path + "' (latest: " + runs.back() + ")");
  // A variant sweep (bench/allreduce_variants.py) has a row per size from each process: the point
  // of a size is its fastest median (for native, the strongest MPI variant there).
  std::map<std::int64_t, double> fastest;
  for (const auto& row : rows) {
    if (row.header.run_id != out.run_id || row.config.algorithm != algorithm) continue;
    out.ranks = row.config.ranks;
    out.dtype = row.config.dtype;
    const auto [it, fresh] = fastest.emplace(row.config.bytes, row.stats.median);
    if (!fresh) it->second = std::min(it->second, row.stats.median);
  }
  for (const auto& [bytes, seconds] : fastest) out.points.emplace_back(static_cast<double>(bytes), seconds);
  TL_CHECK(out.points.size() >= 2, "collective-cost: --fit: run " + out.run_id + " has " +
                                       std::to_string(out.points.size()) + " '" + algorithm +
                                       "' sizes; a fit needs at least two");
  return out;
}

}  // namespace trainlab::bench
