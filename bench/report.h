// REPORT.md and its figure, regenerated from a ledger alone: the ladder table with skipped and
// failed rows, the step breakdown before and after the rung that removed the largest stall, a bar
// chart (SVG) of samples/s per rung with its min-max, the noise floor and the verdicts, and the
// ledger, run and versions it came from. Nothing in it is typed by hand.
#pragma once

#include <string>

namespace trainlab::bench {

struct ReportOptions {
  std::string ledger_path;  // results/ledger_<device>.jsonl
  std::string out_path = "results/REPORT.md";
  std::string run_id;  // empty: the ledger's latest ladder run
  // When set, the ladder table also replaces the text between "<!-- ladder:begin -->" and
  // "<!-- ladder:end -->" in this file (the README), with the command and run it came from.
  std::string readme_path;
};

// Writes the report (atomically) and the SVG figure beside it (figures/ladder_<run>.svg); returns
// the markdown.
std::string write_report(const ReportOptions& options);

}  // namespace trainlab::bench
