// The report's sections: each study contributes one (studies/<name>/section.cpp), registered in
// studies/registry.cpp, and bench_report iterates the registry. A section reads its own typed rows
// from the loaded ledger and returns its markdown, its figures and the table that its block in
// docs/RESULTS.md (or any file with its markers) quotes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

// A generated block of docs/RESULTS.md (or any file with its markers): the text between
// <!-- marker:begin --> and <!-- marker:end -->, an intro ("from run X on ...") and a table; a
// further block of a section may link some of the section's figures (their names), which its own
// block then leaves out.
struct ReportBlock {
  std::string marker, intro, table;
  std::vector<std::string> figures;
};

// One row of the README's headline table (bench_report --blocks headline, from a `make headline`
// run): a figure a section draws from its latest run (the block names the command of the step that
// wrote the run).
struct HeadlineRow {
  std::string what;    // "SmallCNN f32 training (avx512_core_bf16): trainlab's best against ..."
  std::string figure;  // "1.81 (1.77-2.16)x: ...; target >= 1.5x: met"
  std::string run_id;  // the run it came from: the block quotes only the make headline run's
};

struct ReportSection {
  Environment measured_on;  // where its run was measured (the report's header names the first section's)
  std::string markdown;
  std::vector<std::pair<std::string, std::string>> figures;  // path relative to the report, SVG text
  // Its block (with its figures linked, less those a further block links), and any further blocks.
  std::string marker, readme_intro, readme_table;
  std::vector<ReportBlock> more_blocks;
  std::vector<HeadlineRow> headline;  // its figures for the README's headline table (none: not quoted there)
};

// What a section reads: the ledger, loaded once; the ladder run asked for (bench_report --run; the
// other sections report their latest run); where skipped rows are said.
struct SectionInput {
  const Ledger::Loaded& ledger;
  std::string run_id;
  std::vector<std::string>& warnings;
  template <class Row>
  std::vector<Row> read() const {
    return ledger.read<Row>(&warnings);
  }
};

struct SectionDef {
  std::string name;  // "ladder", "cost", ... (in errors)
  std::function<std::optional<ReportSection>(const SectionInput&)> build;
};

// "AMD EPYC (onednn, 2 threads; engine abc; timer steady_clock)".
std::string measured_on(const Environment& env);

// A section of run `run_id` measured on `env`, quoted by the block `marker`: its block's intro says
// "from run `RUN` on ENV" and then `more`.
ReportSection section_of(const std::string& marker, const std::string& run_id, const Environment& env,
                         const std::string& more = "");
// Where a study's figure of a run goes, relative to the report: "figures/<study>_<run>.svg".
std::string figure_path(const std::string& study, const std::string& run_id);

}  // namespace trainlab::bench
