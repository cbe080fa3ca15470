// The optimisation ladder (seed 000): an instrumented baseline, then rungs that each change exactly
// one knob against the previous rung, measured in interleaved repeats (A B C ... A B C ...), every
// measurement a ledger row, skipped and failed rungs recorded with their reason, and an optional
// pair of secretly identical calibration arms whose gap is the noise floor.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "bench/report/section.h"
#include "engine/train/config.h"
#include "studies/ladder/rows.h"

namespace trainlab::bench {

// lr = base_lr * batch / base_batch: the learning rate follows from the batch, so a rung that
// changes the batch (and the LR by exactly this rule) changes one thing.
// With warmup_steps, a rung whose batch raises the LR by the rule also warms up linearly over those
// steps (Goyal et al. 2017: the linear scaling rule holds after a gradual warm-up), part of the same
// change.
struct LrRule {
  std::int64_t base_batch = 32;
  double base_lr = 0.01;
  std::int64_t warmup_steps = 0;
  double lr_for(std::int64_t batch) const;
};

struct Rung {
  std::string name;
  KnobMap set;              // changed against the previous rung
  std::string needs;        // "" or a device type ("cuda") the rung needs
  std::string skip_reason;  // why it cannot run elsewhere
  std::string note;         // what the rung is, said plainly
};

struct LadderSpec {
  std::string name;    // "cpu"
  std::string device;  // the device type it is meant for
  KnobMap base;        // the instrumented baseline's config keys
  std::vector<Rung> rungs;
  std::int64_t quick_steps = 30, full_steps = 120, warmup = 5;
  LrRule lr_rule;
};

// Parses and checks a ladder YAML file (configs/ladder_<device>.yaml); errors name the file and key.
LadderSpec load_ladder(const std::string& path);
LadderSpec load_ladder_text(const std::string& text, const std::string& source);  // the same from text

// Each rung's complete config, typed: the base with every earlier rung's `set` applied, the LR from
// the rule. Keys are TrainConfig keys (trainlab train --help, docs/CONFIG.md). Given a device type, rungs that need
// another device, or do not apply to the base's model (rung_model_skip_reason), are skipped there
// and their knobs are not applied to later rungs (a skipped rung is a no-op); without one, the
// declared chain.
std::vector<TrainConfig> rung_configs(const LadderSpec& spec, const std::string& device_type = "");
// Whether `rung` runs on `device_type`.
bool rung_runs_on(const Rung& rung, const std::string& device_type);
// Why `rung` does not apply to `model` ("" where it does): a knob that changes nothing the model
// runs, so measuring it would measure nothing (or fail): the layout of a model with no 4-D op (an
// MLP flattens its input first), a recompute level the model marks no blocks for, fusing or TF32 in
// a model with no convolution or linear layer, the loader's workers and prefetch for a token model
// (nothing to decode). Such a rung is skipped with this reason, as a rung
// that needs another device is.
std::string rung_model_skip_reason(const Rung& rung, const ModelConfig& model);

// The single knob `after` changes against `before`; throws Error naming every changed knob when
// there is more than one (batch plus an LR that follows the rule counts as one). Bookkeeping keys
// (steps, warm-up, logging, trace) are not knobs.
std::optional<Change> single_change(const TrainConfig& before, const TrainConfig& after, const LrRule& rule,
                                    const std::string& rung);

struct LadderOptions {
  int repeats = 3;
  bool quick = false;
  bool calibrate = false;
  bool trace = false;  // a Chrome trace of each rung's first repeat under trace_dir
  std::string trace_dir = "results/traces";
  std::string ledger_path;  // empty: results/ledger_<device>.jsonl
  std::ostream* log = nullptr;
};

struct LadderRun {
  std::string run_id;
  std::string ledger_path;
  std::vector<LadderRungRow> rung_rows;  // one per rung (and calibration arm), in ladder order
};

LadderRun run_ladder(const LadderSpec& spec, const LadderOptions& options);

// The baseline under the profiler: its step breakdown, the top ops, and which rung the largest
// exposed time category points to. Returns the printed text.
std::string plan_ladder(const LadderSpec& spec, bool quick);

// The accuracy guard (seed 000: a rung's speed without its accuracy is not a result). Each rung's
// held-out accuracies, one per repeat and seed, against the seeds of the baseline and of the previous
// rung that still trains: a rung whose median lies below the lowest of those seeds by more than
// their spread (max - min, at least one percentage point) is marked breaks_training, and its gain is
// not called one. Fewer than two seeds on either side: not checked, said so. Rows in ladder order.
void accuracy_guard(std::vector<LadderRungRow>& rung_rows);

// The seed's table from a run's rung rows (rung, samples/s, +-, min-max, data-wait, vs previous,
// separable) with the noise floor line; markdown when `markdown`, else aligned text.
std::string ladder_table(const std::vector<LadderRungRow>& rung_rows, bool markdown);
// The noise floor from a run's calibration arms (none without both), and what the table says below
// itself: the floor, what ran emulated, the held-out accuracy of each rung over its seeds and what the accuracy guard
// found.
std::optional<Calibration> ladder_calibration(const std::vector<LadderRungRow>& rung_rows);
std::string ladder_table_notes(const std::vector<LadderRungRow>& rung_rows,
                               const std::optional<Calibration>& calibration, bool markdown);

// The report's ladder section (studies/registry.h).
SectionDef ladder_report_section();

}  // namespace trainlab::bench
