// The data set study's report section (seed 002): the re-export regression, in units of the noise floor.
#include <fmt/format.h>

#include <optional>

#include "bench/measure/knobs.h"
#include "bench/report/section.h"
#include "studies/dataset/dataset_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> dataset_section(const SectionInput& in) {
  const auto [run_id, rows] = latest_run(in.read<DatasetRepeatRow>());
  if (run_id.empty()) return std::nullopt;
  const DatasetRepeatRow& first = rows.front();
  const auto arms = dataset_arms_from_rows(rows);
  const std::string intro = fmt::format(
      "{} samples of SyntheticImages at {} px, {} loader workers, batch {}, {} page cache; every arm measured in "
      "each of {} rounds (the loader alone, then {} trained on it)",
      first.samples, first.image_size, first.workers, first.batch, first.cold ? "cold" : "warm",
      arms.empty() ? 0 : arms.front().loader.size(), model_label(first.model, first.model_options));
  ReportSection section = section_of("dataset", run_id, first.header.env, ": " + intro);
  section.markdown =
      fmt::format("\n## Data on disk: the re-export regression\n\nRun `{}` of `studies/dataset` on {}: {}.\n\n", run_id,
                  measured_on(first.header.env), intro) +
      dataset_report(arms);
  section.readme_table = dataset_report(arms);
  return section;
}

}  // namespace

SectionDef dataset_report_section() { return {"dataset", dataset_section}; }

}  // namespace trainlab::bench
