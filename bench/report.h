// REPORT.md and its figures, regenerated from a ledger alone, a section for each study the ledger
// holds (its latest run): the ladder (its table with skipped and failed rows, the step breakdown
// before and after the rung that removed the largest stall, a bar chart of samples/s per rung with
// its min-max, the noise floor and the verdicts); the cost to accuracy (both rankings, the findings,
// the scaling break-even, a rank-against-rank figure); the CPU pinning arms (per condition, with
// their noise floor band). Each says the device, run and versions it came from. Nothing in it is
// typed by hand.
#pragma once

#include <string>

namespace trainlab::bench {

struct ReportOptions {
  std::string ledger_path;  // results/ledger_<device>.jsonl
  std::string out_path = "results/REPORT.md";
  std::string run_id;  // the ladder run; empty: the ledger's latest ladder run
  // When set, each section's table also replaces the text between "<!-- NAME:begin -->" and
  // "<!-- NAME:end -->" in this file (the README; NAME: ladder, cost, pinning), with the command and
  // run it came from; the file must hold the markers of at least one of them.
  std::string readme_path;
};

// Writes the report (atomically) and its SVG figures beside it (figures/<study>_<run>.svg); returns
// the markdown.
std::string write_report(const ReportOptions& options);

}  // namespace trainlab::bench
