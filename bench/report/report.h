// REPORT.md and its figures, regenerated from a ledger alone: a section for each study whose rows
// the ledger holds (the registry in studies/registry.h: the ladder, cost to accuracy, CPU pinning,
// memory, the data set, the comparison with PyTorch, all-reduce, the bucket sweep, scaling), each
// from its latest run, each saying the device, run and versions it came from. Nothing in it is
// typed by hand.
#pragma once

#include <string>
#include <vector>

#include "bench/report/section.h"

namespace trainlab::bench {

struct ReportOptions {
  std::string ledger_path;  // results/ledger_<device>.jsonl
  std::string out_path = "results/REPORT.md";
  std::string run_id;  // the ladder run; empty: the ledger's latest ladder run (the other sections: their latest)
  // When set, each section's table also replaces the text between "<!-- NAME:begin -->" and
  // "<!-- NAME:end -->" in this file (docs/RESULTS.md; NAME is the section's marker: ladder, cost,
  // pinning, ...), with the command and run it came from; the file must hold the markers of at least
  // one of them. The one writer of those blocks.
  std::string readme_path;
  // With readme_path: only these blocks (by marker); empty: every block the ledger's sections fill.
  std::vector<std::string> blocks;
};

// Writes the report (atomically) and its SVG figures beside it (figures/<study>_<run>.svg) from the
// sections that find a run in the ledger; returns the markdown.
std::string write_report(const ReportOptions& options, const std::vector<SectionDef>& sections);

}  // namespace trainlab::bench
