// The README's headline table, from one `make headline` run (bench/headline.py): the run's own
// ledger row names every step it ran (its command, the runs it wrote, its wall time, ok or failed),
// and the block quotes each section's headline figures from those runs only: a figure of an earlier
// run is not quoted beside them, and a step that failed is a row saying so.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/report/section.h"

namespace trainlab::bench {

struct HeadlineStep {
  std::string name;     // "compare", "ladder", ...
  std::string command;  // as run
  std::string form;     // "full", or what the short form leaves out
  std::string status;   // "ok" | "failed"
  std::string error;    // the failure's last line ("" when ok)
  double wall_s = 0;
  std::vector<std::string> runs;  // the run ids it appended to the ledger
  template <class F>
  void fields(F& f) {
    f("name", name);
    f("command", command);
    f.optional("form", form);
    f("status", status);
    f.optional("error", error);
    f("wall_s", wall_s);
    f("runs", runs);
  }
};

struct HeadlineRunRow {
  static constexpr const char* kKind = "headline_run";
  RowHeader header;
  std::string date;     // "2026-12-06 07:12 UTC", when it started
  std::string commit;   // git describe of the tree it built
  std::string command;  // "make headline" and its variables
  std::vector<HeadlineStep> steps;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("date", date);
    f("commit", commit);
    f("command", command);
    f("steps", steps);
  }
};

// The headline block of the ledger's latest headline run, from the sections' headline rows (none
// when the ledger holds no headline run).
std::optional<ReportBlock> headline_block(const SectionInput& in, const std::vector<ReportSection>& sections);

}  // namespace trainlab::bench
