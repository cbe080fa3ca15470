// bench_report: regenerates REPORT.md and its figure from a ledger alone.
#include <cstdio>

#include "backends/error.h"
#include "bench/ledger.h"
#include "bench/report.h"
#include "bench/tools/cli_parse.h"

int main(int argc, char** argv) {
  using namespace trainlab;
  CLI::App app{"bench_report: REPORT.md and its figure from a ledger", "bench_report"};
  bench::ReportOptions options;
  options.ledger_path = bench::default_ledger_path("cpu");
  app.add_option("--ledger", options.ledger_path, "ledger (default results/ledger_cpu.jsonl)");
  app.add_option("--out", options.out_path, "the report to write (default results/REPORT.md)");
  app.add_option("--run", options.run_id, "the run to report (default: the ledger's latest)");
  app.add_option("--readme", options.readme_path, "also rewrite the ladder table between markers in this file");
  if (const auto status = parse_command_line(app, argc, argv, "bench_report")) return *status;
  try {
    bench::write_report(options);
    std::printf("report: %s (from %s)\n", options.out_path.c_str(), options.ledger_path.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_report: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
