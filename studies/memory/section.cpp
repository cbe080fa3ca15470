// The memory study's report section (seed 003): batch x recompute x ZeRO, memory per rank and step time.
#include <fmt/format.h>

#include <optional>
#include <sstream>

#include "bench/measure/knobs.h"
#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "studies/memory/memory_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> memory_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<MemoryRepeatRow>());
  if (run_id.empty()) return std::nullopt;
  const MemoryAnalysis analysis = analyse_memory(memory_arms_from_rows(rows));
  const MemoryRepeatRow& first = rows.front();
  const MemoryConfig& config = first.config;
  ReportSection section = section_of("memory", run_id, first.header.env);
  const std::string figure = figure_path("memory", run_id);
  std::ostringstream md;
  md << fmt::format(
      "\n## Memory: batch x recompute x ZeRO\n\nRun `{}` of `studies/memory` on {}: {}DDP over {} ranks, {}, "
      "optimizer {}; each arm {} steps of which {} warm-up excluded, {} repeats interleaved. Memory: tensor bytes by "
      "category (the engine's accounting), the largest rank's; step: the slowest rank's median measured step.\n\n",
      run_id, measured_on(first.header.env),
      config.model == "smallcnn" ? "" : model_label(config.model, config.model_options) + " trained by ", config.world,
      config.dtype, config.optimizer, config.steps, config.warmup_steps_excluded,
      analysis.arms.empty() ? 0 : analysis.arms.front().step_ms.size());
  md << memory_table(analysis, true) << "\n" << memory_findings(analysis);
  if (const std::string persistent = memory_persistent_table(analysis, true); !persistent.empty())
    md << "\nPersistent state per rank, three ways (MiB):\n\n" << persistent;
  if (const std::string transient = memory_transient_table(analysis, true); !transient.empty())
    md << "\nActivations and communication buffers per rank, three ways:\n\n" << transient;
  md << "\n![peak bytes by category, and peak against step time](" << figure << ")\n";
  section.markdown = md.str();
  section.figures.emplace_back(
      figure, chart::render(memory_figure(analysis, "Memory per rank: batch x recompute x ZeRO (run " + run_id + ")")));
  section.readme_table = memory_table(analysis, true) + "\n" + memory_findings(analysis);
  return section;
}

}  // namespace

SectionDef memory_report_section() { return {"memory", memory_section}; }

}  // namespace trainlab::bench
