// bench_report: regenerates REPORT.md and its figures from a ledger alone; with --verify, re-runs a
// sample of the ladder figures behind them on this machine and says whether each lands within its
// recorded spread.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "apps/cli_parse.h"
#include "backends/error.h"
#include "bench/measure/ledger.h"
#include "bench/report/report.h"
#include "engine/io/version.h"
#include "studies/ladder/verify.h"
#include "studies/registry.h"

int main(int argc, char** argv) {
  using namespace trainlab;
  CLI::App app{"bench_report: REPORT.md and its figure from a ledger", "bench_report"};
  bench::ReportOptions options;
  options.ledger_path = bench::default_ledger_path("cpu");
  app.add_option("--ledger", options.ledger_path, "ledger (default results/ledger_cpu.jsonl)")->check(NonEmptyPath());
  app.add_option("--out", options.out_path, "the report to write (default results/REPORT.md)")->check(NonEmptyPath());
  app.add_option("--run", options.run_id, "the run to report (default: the ledger's latest)");
  app.add_option("--readme", options.readme_path,
                 "also rewrite the generated blocks (each study's table) between their markers in this file "
                 "(docs/RESULTS.md): the one writer of those blocks");
  app.add_option("--blocks", options.blocks, "with --readme: only these blocks (markers, comma-separated)")
      ->delimiter(',');
  bool verify = false, strict = false;
  int sample = 3, rounds = 0;
  app.add_flag("--verify", verify,
               "write nothing: re-run a sample of the ladder run's rungs (--run, default the latest) with their "
               "recorded configs, interleaved with the run's reference arm, and say for each whether the re-run "
               "ratio lands within the recorded spread");
  app.add_option("--sample", sample, "--verify: rungs to re-run, evenly spread, the last always included (default 3)")
      ->check(FiniteRange(1, 1000));
  app.add_option("--rounds", rounds, "--verify: interleaved rounds (default: the recorded number of repeats)")
      ->check(FiniteRange(0, 1000));
  app.add_flag("--strict", strict, "--verify: exit 1 when a figure lands outside its recorded spread");
  if (const auto status = parse_command_line(app, argc, argv, "bench_report")) return *status;
  if (verify) {
    try {
      bench::VerifyOptions v;
      v.ledger_path = options.ledger_path;
      v.run_id = options.run_id;
      v.sample = sample;
      v.rounds = rounds;
      v.log = &std::cout;
      const auto result = bench::verify_ledger(v);
      std::cout << bench::verify_text(result, git_describe());
      const bool all_within =
          std::all_of(result.rows.begin(), result.rows.end(), [](const auto& row) { return row.within; });
      return strict && !all_within ? 1 : 0;
    } catch (const Error& e) {
      std::fprintf(stderr, "bench_report: error: %s\n", e.what());
      return 2;
    } catch (const bench::json::exception& e) {
      std::fprintf(stderr, "bench_report: error: verify: a rung row of the run cannot be read: %s\n", e.what());
      return 2;
    }
  }
  try {
    bench::write_report(options, bench::report_sections());
    std::printf("report: %s (from %s)\n", options.out_path.c_str(), options.ledger_path.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_report: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
