// The memory study's report section (seed 003): batch x recompute x ZeRO, memory per rank and step time.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "bench/report/legacy_rows.h"
#include "bench/report/section.h"
#include "bench/report/table.h"
#include "studies/memory/memory_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> memory_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run_of(loaded.rows, "memory_repeat");
  if (run_id.empty()) return std::nullopt;
  const MemoryAnalysis analysis = analyse_memory(memory_arms_from_rows(rows));
  const json& first = rows.front();
  const json& config = first.at("config");
  ReportSection section;
  section.measured_on = from_json<Environment>(first);
  const std::string figure = "figures/memory_" + run_id + ".svg";
  std::ostringstream md;
  md << fmt::format(
      "\n## Memory: batch x recompute x ZeRO\n\nRun `{}` of `studies/memory` on {}: DDP over {} ranks, {}, optimizer "
      "{}; each arm {} steps of which {} warm-up excluded, {} repeats interleaved. Memory: tensor bytes by category "
      "(the engine's accounting), the largest rank's; step: the slowest rank's median measured step.\n\n",
      run_id, measured_on(first), config.value("world", 0), config.value("dtype", std::string("?")),
      config.value("optimizer", std::string("?")), config.value("steps", 0), config.value("warmup_steps_excluded", 0),
      analysis.arms.empty() ? 0 : analysis.arms.front().step_ms.size());
  md << memory_table(analysis, true) << "\n" << memory_findings(analysis);
  md << "\n![peak bytes by category, and peak against step time](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(figure,
                               memory_svg(analysis, "Memory per rank: batch x recompute x ZeRO (run " + run_id + ")"));
  section.marker = "memory";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(first);
  section.readme_table = memory_table(analysis, true) + "\n" + memory_findings(analysis);
  return section;
}

}  // namespace

SectionDef memory_report_section() {
  return {"memory", [](const SectionInput& in) -> std::optional<ReportSection> {
            try {
              return memory_section(in.ledger);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest memory run has a row it cannot read: ") + e.what());
            }
          }};
}

}  // namespace trainlab::bench
