// The data set study's arithmetic (studies/dataset/driver.h drives it): its arms rebuilt from the
// ledger's dataset_study_repeat rows (studies/dataset/rows.h), and its table (medians and min-max per arm, each arm's
// effect against the first arm in percent and in units of the noise floor, separable or not), so that the driver and
// bench_report print the same thing from the same rows.
#pragma once

#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/report/section.h"
#include "studies/dataset/rows.h"

namespace trainlab::bench {

struct DatasetArm {
  std::string name;
  bool calibration = false;  // the control measured again: its gap to the control is the noise floor
  std::int64_t files = -1;   // -1: not recorded
  double bytes_per_sample = -1;
  std::vector<double> loader, train, wait_ms, read_us, decode_us;  // per round, successful rounds only
};

// The arms of one run, in the order their rows first appear (the control first).
std::vector<DatasetArm> dataset_arms_from_rows(const std::vector<DatasetRepeatRow>& rows);

// The noise floor line, the table and the verdict lines (markdown), as the driver prints them.
// Requires the control (first arm) and a calibration arm.
std::string dataset_report(const std::vector<DatasetArm>& arms);

// The report's section for this study (studies/registry.h).
SectionDef dataset_report_section();

}  // namespace trainlab::bench
