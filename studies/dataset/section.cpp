// The data set study's report section (seed 002): the re-export regression, in units of the noise floor.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "bench/report/legacy_rows.h"
#include "bench/report/section.h"
#include "bench/report/table.h"
#include "studies/dataset/dataset_study.h"

namespace trainlab::bench {

namespace {
std::optional<ReportSection> dataset_section(const Ledger::Loaded& loaded) {
  const auto [run_id, rows] = latest_run_of(loaded.rows, "dataset_study_repeat");
  if (run_id.empty()) return std::nullopt;
  const json& first = rows.front();
  const auto arms = dataset_arms_from_rows(rows);
  ReportSection section;
  section.measured_on = from_json<Environment>(first);
  const std::string intro = fmt::format(
      "{} samples of SyntheticImages at {} px, {} loader workers, batch {}, {} page cache; every arm measured in "
      "each of {} rounds (the loader alone, then SmallCNN trained on it)",
      int_at(first, "samples", 0), int_at(first, "image_size", 0), int_at(first, "workers", 0),
      int_at(first, "batch", 0), first.value("cold", true) ? "cold" : "warm",
      arms.empty() ? 0 : arms.front().loader.size());
  section.markdown =
      fmt::format("\n## Data on disk: the re-export regression\n\nRun `{}` of `studies/dataset` on {}: {}.\n\n", run_id,
                  measured_on(first), intro) +
      dataset_report(arms);
  section.marker = "dataset";
  section.readme_intro = "from run `" + run_id + "` on " + measured_on(first) + ": " + intro;
  section.readme_table = dataset_report(arms);
  return section;
}

}  // namespace

SectionDef dataset_report_section() {
  return {"dataset", [](const SectionInput& in) -> std::optional<ReportSection> {
            try {
              return dataset_section(in.ledger);
            } catch (const json::exception& e) {
              throw Error(std::string("report: the ledger's latest dataset run has a row it cannot read: ") + e.what());
            }
          }};
}

}  // namespace trainlab::bench
