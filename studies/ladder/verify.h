// bench_report --verify: re-runs a sample of the rows behind the report's ladder figures on this
// machine and says, for each, whether the re-run lands within the recorded spread.
//
// A figure is checked as a ratio to its run's own reference (calibration arm A, or the baseline when
// the run had no calibration arms), re-measured in the same rounds, so that a different machine
// scales both alike: the absolute samples/s of another machine is never the test. The recorded
// spread is the min-max of the recorded per-round ratios (repeat i of the rung over repeat i of the
// reference), widened on each side by the run's noise floor (the calibration arms' gap; 0 without
// them). The re-run's figure is the median of its per-round ratios. The recorded engine version is
// not rebuilt: the re-run uses this binary, against the recorded values, and says both versions.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "studies/ladder/rows.h"

namespace trainlab::bench {

struct VerifyOptions {
  std::string ledger_path;
  std::string run_id;  // the ladder run; empty: the ledger's latest
  int sample = 3;      // rungs re-run (evenly spread over the ladder, always including its last rung)
  int rounds = 0;      // re-run rounds; 0: the recorded number of repeats
  std::ostream* log = nullptr;
};

struct VerifyRow {
  std::string rung;
  double recorded_lo = 0, recorded_hi = 0, recorded_median = 0;  // recorded per-round ratios to the reference
  double allowed_lo = 0, allowed_hi = 0;                         // widened by the noise floor
  std::vector<double> rerun;                                     // re-run per-round ratios
  double rerun_median = 0;
  bool within = false;
};

struct VerifyResult {
  std::string run_id, reference, recorded_engine, recorded_device;
  double noise_floor_percent = 0;
  int rounds = 0;
  std::vector<VerifyRow> rows;
};

// One measurement (samples/s) of a recorded rung row's config, on this machine.
using Measure = std::function<double(const LadderRungRow& rung_row)>;

// The rungs a sample of `n` picks from `count` measured rungs: indices evenly spread, the last
// always included (it is the figure the README quotes first).
std::vector<std::size_t> verify_sample(std::size_t count, int n);

// The verdicts, from a ladder run's rung rows and a measure (the real trainer, or a test's fake):
// the reference and the sampled rungs measured in `rounds` interleaved rounds (reference first).
VerifyResult verify_ladder(const std::vector<LadderRungRow>& rung_rows, const Measure& measure, int sample, int rounds,
                           std::ostream* log = nullptr);

// The real thing: loads the ledger, re-runs with the trainer (the recorded config, evaluation off).
VerifyResult verify_ledger(const VerifyOptions& options);

// The printed result: one line per rung, then a summary line ("k of n within their recorded spread").
std::string verify_text(const VerifyResult& result, const std::string& engine_now);

}  // namespace trainlab::bench
