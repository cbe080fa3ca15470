// The memory study (issue 13; seed 003's capacity levers): batch size x activation recomputation x
// ZeRO stage, each arm a short DDP training run at world 2, measured for its tensor memory by
// category (the largest rank's) and its step time. The repeats are interleaved across arms; the
// control arm (batch 128, recompute none, zero 0) runs twice, and the gap between the two is the
// noise floor every step-time effect is stated against. The driver is studies/memory/driver.h; this
// is the arithmetic over its ledger rows (studies/memory/rows.h), shared with bench_report.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "engine/instrument/memory_usage.h"
#include "studies/memory/rows.h"

namespace trainlab::bench {

// One arm's repeats. Memory is per rank, the largest over the ranks and the repeats (a steady step
// allocates the same bytes every time: the repeats agree, and the study checks they do).
struct MemoryArm {
  std::string name;  // "b128 none z0", "b128 none z0 again"
  std::int64_t batch = 0;
  std::string recompute = "none";
  int zero = 0;
  std::vector<double> step_ms;  // per repeat: the median measured step of the slowest rank
  std::array<std::int64_t, kMemoryCategories> peak{}, at_peak{};
  std::int64_t total_peak = 0, activations_after_forward = 0;
  std::array<std::int64_t, kMemoryCategories> held{};  // between steps (rows before it: zeros)
  std::int64_t parameters = 0;                         // 0: the rows do not say
  // Seed 003's formula and the estimator per rank (rows before them, or a model without a memory
  // chain: -1): activations; communication buffers (the estimator only) and what its transient is.
  double formula_activations = -1, estimated_activations = -1, estimated_saved = -1, estimated_communication = -1;
  std::string communication_estimate;
  std::int64_t per_rank_batch = 0;
  int world = 0;
  std::string optimizer = "sgd";
  std::string peak_phase;
  bool repeats_agree = true;  // every repeat measured the same bytes
};

struct MemoryEffect {
  double step_percent = 0;    // step time against the arm's control (+: slower)
  double floor_multiple = 0;  // |step_percent| / the noise floor
  Verdict verdict = Verdict::not_separable;
  double peak_percent = 0;  // total peak against the control's (-: less memory)
};

struct MemoryAnalysis {
  std::vector<MemoryArm> arms;
  std::vector<Summary> step;          // one per arm
  std::vector<int> control;           // per arm: the index of its batch's none/zero-0 arm (-1: none)
  std::vector<MemoryEffect> effects;  // per arm, against its control
  Calibration calibration;
  std::string calibration_pair;
  bool separability_test_valid = false;
};

// Needs the calibration pair (two arms with the same configuration, the second named "... again").
MemoryAnalysis analyse_memory(std::vector<MemoryArm> arms);
std::string memory_table(const MemoryAnalysis& analysis, bool markdown);
std::string memory_findings(const MemoryAnalysis& analysis);
// The persistent state per rank by ZeRO stage, three ways: seed 003's formula (mixed-precision Adam,
// 16 bytes a parameter), the estimator (the same formula with the bytes trainlab keeps for this
// optimiser, engine/instrument/memory_model.h), and the bytes measured between steps. Empty when the
// rows do not carry the held bytes.
std::string memory_persistent_table(const MemoryAnalysis& analysis, bool markdown);
// The transient side per rank, three ways: activations (seed 003's B x S x H x q per saved layer
// beside the estimator's walk of the model's chain and the measured bytes when the forward ends;
// the step's peak, estimated and measured) and communication buffers (seed 003 has none; the
// estimator from DDP's plan; the measured peak), at the control batch: every
// ZeRO stage without recomputation, then each recompute level at stage 0. Empty when the rows do
// not carry the estimates.
std::string memory_transient_table(const MemoryAnalysis& analysis, bool markdown);
// Bytes as MiB ("4.01", then `unit`), or, between 0 and 10 KiB, as bytes ("32 B") rather than 0.00.
std::string mib_or_bytes(double bytes, const char* unit = "");
// A run's ok rows, gathered by arm in the order they appear.
std::vector<MemoryArm> memory_arms_from_rows(const std::vector<MemoryRepeatRow>& rows);
// Peak bytes by category (stacked) per arm, and peak against step time.
chart::Figure memory_figure(const MemoryAnalysis& analysis, const std::string& title);

// The report's section for this study (studies/registry.h).
SectionDef memory_report_section();

}  // namespace trainlab::bench
