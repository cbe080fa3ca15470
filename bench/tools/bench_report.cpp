// bench_report: regenerates REPORT.md and its figure from a ledger alone.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "backends/error.h"
#include "bench/ledger.h"
#include "bench/report.h"

int main(int argc, char** argv) {
  using namespace trainlab;
  CLI::App app{"bench_report: REPORT.md and its figure from a ledger", "bench_report"};
  bench::ReportOptions options;
  options.ledger_path = bench::default_ledger_path("cpu");
  app.add_option("--ledger", options.ledger_path, "ledger (default results/ledger_cpu.jsonl)");
  app.add_option("--out", options.out_path, "the report to write (default results/REPORT.md)");
  app.add_option("--run", options.run_id, "the run to report (default: the ledger's latest)");
  app.add_option("--readme", options.readme_path, "also rewrite the ladder table between markers in this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string message = e.what();
    for (auto& c : message) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "bench_report: error: %s (see bench_report --help)\n", message.c_str());
    return 2;
  }
  try {
    bench::write_report(options);
    std::printf("report: %s (from %s)\n", options.out_path.c_str(), options.ledger_path.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_report: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
