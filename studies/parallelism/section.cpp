// The parallelism study's report section: the latest run's doors side by side.
#include <fmt/format.h>

#include <map>
#include <sstream>

#include "bench/report/table.h"
#include "studies/parallelism/parallelism_study.h"
#include "studies/parallelism/rows.h"

namespace trainlab::bench {

namespace {

std::optional<ReportSection> parallelism_section(const SectionInput& in) {
  // Every model's latest run at each rank count (run ids sort by time), its doors in the order they ran.
  const std::vector<ParallelismRow> all = in.read<ParallelismRow>();
  std::map<std::pair<std::string, int>, std::string> latest;  // (model, ranks) -> run id
  for (const auto& row : all) {
    std::string& id = latest[{row.config.model, row.config.ranks}];
    if (row.header.ok() && row.header.run_id > id) id = row.header.run_id;
  }
  if (latest.empty()) return std::nullopt;
  std::vector<std::vector<std::string>> table;
  const ParallelismRow* first = nullptr;
  std::string run_ids;
  for (const auto& [key, run_id] : latest) run_ids += (run_ids.empty() ? "`" : ", `") + run_id + "`";
  for (const auto& [key, run_id] : latest) {
    const std::string& model = key.first;
    for (const auto& row : all) {
      if (!row.header.ok() || row.config.model != model || row.header.run_id != run_id) continue;
      if (!first || row.header.run_id > first->header.run_id) first = &row;
      const Summary& s = row.stats;
      const auto mib = [](const std::optional<std::int64_t>& bytes) {
        return bytes ? fmt::format("{:.2f}", static_cast<double>(*bytes) / (1024.0 * 1024.0)) : std::string("-");
      };
      table.push_back({model, fmt::format("{}", row.config.ranks), fmt::format("{}", row.config.batch),
                       row.config.door + (row.fastest ? " (fastest)" : ""), row.config.detail,
                       fmt::format("{:.2f} ({:.2f}-{:.2f})", 1e3 * s.median, 1e3 * s.min, 1e3 * s.max),
                       fmt::format("{:.0f}", row.samples_per_s), fmt::format("{:.2f}x", row.speedup),
                       row.against_data.value_or("-"), mib(row.state_bytes_per_rank), mib(row.peak_bytes_per_rank),
                       mib(row.bytes_per_step),
                       row.predicted_comm_s ? fmt::format("{:.2f}", 1e3 * *row.predicted_comm_s) : std::string("-"),
                       row.waited_comm_s ? fmt::format("{:.2f}", 1e3 * *row.waited_comm_s) : std::string("-")});
    }
  }
  if (!first) return std::nullopt;
  ReportSection section = section_of("parallelism", first->header.run_id, first->header.env);
  const std::vector<std::string> head = {"model",
                                         "ranks",
                                         "batch",
                                         "door",
                                         "how",
                                         "step ms median (min-max)",
                                         "samples/s",
                                         "against one process",
                                         "against data",
                                         "state MiB per rank",
                                         "peak MiB per rank",
                                         "MiB sent per step per rank",
                                         "comm ms predicted",
                                         "comm ms waited"};
  std::ostringstream md;
  md << fmt::format(
      "\n## Which door wins: data, pipeline and tensor parallelism at one global batch\n\n`bench_parallelism` on {} "
      "(each model's latest run at each rank count: {}): in a run the doors go round-robin step by step, each from the "
      "same initial "
      "weights. \"Against one process\": the faster of the unsplit model at 1 thread and at every rank's threads "
      "on rank 0, the same cores. \"Against data\": the effect on samples/s against DDP, in units of the noise floor "
      "DDP's calibration pair (data, data again) measured. Per rank, the largest: \"state\", what it holds between "
      "steps (its parameters, their gradients and the optimiser's state); \"peak\", that state and the most a step "
      "allocated on top; \"sent\", point to point as sent and a collective over p ranks as the ring sends it (2 "
      "(p-1)/p "
      "of the buffer for an all-reduce, (p-1)/p for each half), in a step. Communication per step: \"predicted\", seed "
      "001's alpha-beta model fitted to the run's own ring all-reduces, for what the step sent as if alone on the "
      "wire; "
      "\"waited\", what the median step waited for (a slower rank's arrival included; - where the door does not time "
      "it apart: a pipeline's waits are its bubble). - in rows before they were recorded.\n\n",
      measured_on(first->header.env), run_ids);
  md << render_table(head, table, true);
  section.markdown = md.str();
  section.readme_table = render_table(head, table, true);
  return section;
}

}  // namespace

SectionDef parallelism_report_section() { return {"parallelism", parallelism_section}; }

}  // namespace trainlab::bench
