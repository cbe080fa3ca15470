// The pinning study's report section (seed 000): each condition's arms against the noise floor.
#include <fmt/format.h>

#include <optional>
#include <sstream>

#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "studies/pinning/pinning_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> pinning_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<PinningRepeatRow>());
  if (run_id.empty()) return std::nullopt;
  const auto analyses = pinning_from_rows(rows);
  TL_CHECK(!analyses.empty(), "report: pinning run '" + run_id + "' has no successful repeat");
  const Environment& env = rows.front().header.env;
  ReportSection section = section_of("pinning", run_id, env);
  const std::string figure = figure_path("pinning", run_id);
  std::ostringstream md, readme;
  md << fmt::format(
      "\n## CPU pinning\n\nRun `{}` of `studies/pinning` on {}: each repeat of each arm its own process, repeats "
      "interleaved; affinity read back from every thread during the measured steps. default is measured twice "
      "(calibration A and B): their gap is the noise floor.\n",
      run_id, measured_on(env));
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
  section.figures.emplace_back(figure, chart::render(pinning_figure(analyses, "CPU pinning (run " + run_id + ")")));
  section.readme_table = readme.str();
  return section;
}

}  // namespace

SectionDef pinning_report_section() { return {"pinning", pinning_section}; }

}  // namespace trainlab::bench
