// The CPU pinning study (seed 000): does confining training and its loader workers to cores beat
// sharing all of them, and does the apparent effect survive its own noise floor?
//
// Four arms, each in its own process: default (no affinity, default threads), threads_capped
// (compute threads = physical cores), pinned_split (training and its compute threads on one half
// of the cores, the loader workers on the other) and pinned_half_shared (both on the same half).
// default is measured twice (calibration arms A and B): their gap is the noise floor, and when
// their own repeat ranges do not overlap the separability test is unsound at this number of
// repeats and every verdict is NO CONCLUSION. Where threads_capped is the same configuration as
// default (default threads = physical cores), its pairs with A and B are calibration pairs too: the
// floor is the widest gap, and every pair must overlap. The driver is studies/pinning/driver.h;
// this is the arithmetic over its ledger rows (studies/pinning/rows.h), shared with bench_report.
#pragma once

#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "studies/pinning/rows.h"

namespace trainlab::bench {

inline constexpr const char* kPinningArms[] = {"default", "default_b", "threads_capped", "pinned_split",
                                               "pinned_half_shared"};

// One arm's repeats under one condition ("quiet", or "contended: N busy threads").
struct PinningArm {
  std::string name;
  std::string main_cpus, worker_cpus;  // as applied and read back ("all" when unconfined)
  int threads = 0, workers = 0;
  std::vector<double> samples_per_s;
  int affinity_mismatches = 0;  // repeats whose read-back masks were not the arm's
};

struct ArmEffect {
  std::string arm, against;
  double percent = 0;         // median against median
  double floor_multiple = 0;  // |percent| / the noise floor (0 when the floor is 0)
  Verdict verdict = Verdict::not_separable;
};

struct PinningAnalysis {
  std::string condition;
  std::vector<PinningArm> arms;
  std::vector<Summary> summaries;  // one per arm
  Calibration calibration;         // the identical pair with the widest gap (default vs default_b, ...)
  std::string calibration_pair = "default vs default_b";
  bool separability_test_valid = false;
  std::vector<ArmEffect> effects;      // threads_capped, pinned_split, pinned_half_shared against default
  ArmEffect confinement;               // pinned_half_shared vs default
  ArmEffect disjointness;              // pinned_split vs pinned_half_shared
  bool capped_equals_default = false;  // threads_capped is the same configuration as default here
};

// Needs the five arms (kPinningArms), each with at least one repeat; throws Error naming a missing one.
PinningAnalysis analyse_pinning(const std::string& condition, const std::vector<PinningArm>& arms,
                                bool capped_equals_default);
std::string pinning_table(const PinningAnalysis& analysis, bool markdown);
// The verdicts in plain words: NO CONCLUSION when the calibration arms fail their own check; each
// effect as a multiple of the noise floor; confinement and disjointness, each separable or not.
std::string pinning_findings(const PinningAnalysis& analysis);
// Quiet against contended, side by side: noise floor, pinning vs control, separable, disjointness.
std::string pinning_comparison(const std::vector<PinningAnalysis>& analyses, bool markdown);

// Adds an ok row's repeat to its arm (name, masks read back, threads, workers, samples/s); other
// rows leave the arm as it is.
void add_repeat(PinningArm& arm, const PinningRepeatRow& row);
// A run's rows, one analysis per condition in the order their first ok rows appear.
std::vector<PinningAnalysis> pinning_from_rows(const std::vector<PinningRepeatRow>& rows);
// The arms with their ranges and the noise floor band around the control's median, per condition.
chart::Figure pinning_figure(const std::vector<PinningAnalysis>& analyses, const std::string& title);

// The report's section for this study (studies/registry.h).
SectionDef pinning_report_section();

}  // namespace trainlab::bench
