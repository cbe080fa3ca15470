// The pinning study's report section (seed 000): each condition's arms against the noise floor.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "bench/report/legacy_rows.h"
#include "bench/report/section.h"
#include "bench/report/table.h"
#include "studies/pinning/pinning_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> pinning_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run_of(loaded.rows, "pinning_repeat");
  if (run_id.empty()) return std::nullopt;
  const auto analyses = pinning_from_rows(rows);
  TL_CHECK(!analyses.empty(), "report: pinning run '" + run_id + "' has no successful repeat");
  ReportSection section;
  section.measured_on = from_json<Environment>(rows.front());
  const std::string figure = "figures/pinning_" + run_id + ".svg";
  std::ostringstream md, readme;
  md << fmt::format(
      "\n## CPU pinning\n\nRun `{}` of `studies/pinning` on {}: each repeat of each arm its own process, repeats "
      "interleaved; affinity read back from every thread during the measured steps. default is measured twice "
      "(calibration A and B): their gap is the noise floor.\n",
      run_id, measured_on(rows.front()));
  for (const auto& a : analyses) {
    md << "\n### " << a.condition << "\n\n" << pinning_table(a, true) << "\n" << pinning_findings(a);
    readme << "\n" << a.condition << ":\n\n" << pinning_table(a, true) << "\n" << pinning_findings(a);
  }
  if (analyses.size() > 1) {
    md << "\n### Side by side\n\n" << pinning_comparison(analyses, true);
    readme << "\n" << pinning_comparison(analyses, true);
  }
  md << "\n![the arms, their ranges and the noise floor](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(figure, pinning_svg(analyses, "CPU pinning (run " + run_id + ")"));
  section.marker = "pinning";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(rows.front());
  section.readme_table = readme.str();
  return section;
}

}  // namespace

SectionDef pinning_report_section() {
  return {"pinning", [](const SectionInput& in) -> std::optional<ReportSection> {
            try {
              return pinning_section(in.ledger);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest pinning run has a row it cannot read: ") + e.what());
            }
          }};
}

}  // namespace trainlab::bench
