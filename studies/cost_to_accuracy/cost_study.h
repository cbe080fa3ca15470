// The cost-to-accuracy study (seed 000, "cost to target"): what it costs to reach a model this
// good, not how many samples per second go by on the way.
//
//   $ to target = samples_to_target / samples_per_s x rate / 3600
//
// The study file (configs/cost_<device>.yaml) names the configurations; the driver
// (studies/cost_to_accuracy) trains each from scratch until held-out accuracy reaches the target on
// `consecutive` evaluations in a row, R repeats interleaved, and appends a ledger row per repeat.
// Everything else here is arithmetic over those rows, shared by the driver's printout and
// bench_report's section: both rankings over the full orderings, the configuration throughput
// over-rates the most, the spread, the stopping resolution of each row, and the break-even of
// scaling out (from a bench_scaling ledger).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"
#include "bench/report/chart.h"
#include "bench/report/section.h"
#include "studies/ladder/ladder.h"

namespace trainlab::bench {

struct CostRepeatRow;

// What a run must reach: held-out accuracy at least the target (a classifier), or held-out loss at
// most it (a language model: cross entropy per token, in nats).
enum class CostMetric { accuracy, loss };
const char* cost_metric_name(CostMetric metric);  // "accuracy" | "loss"
// Throws Error naming the value and what is allowed.
CostMetric parse_cost_metric(const std::string& name);
// "held-out accuracy >= 0.85" | "held-out loss <= 2.2"
std::string target_phrase(CostMetric metric, double target);
// Throws Error unless the target is one the metric can reach: accuracy in (0, 1], loss finite and > 0.
void check_cost_target(CostMetric metric, double target, const std::string& where);

// cost_to_accuracy as a library call: the options its command line sets (the executable,
// apps/cost_to_accuracy.cpp, parses the command line and calls run_cost_study).
struct CostOptions {
  std::string config_path;  // empty: configs/cost_cuda.yaml where a GPU is, else configs/cost_cpu.yaml
  double rate = 0;          // $/hour (required: there is no honest default price)
  bool quick = false;
  int repeats = 0;    // 0: the study file's
  std::string data;   // a data set on disk in place of the study file's data (its `data:` key, else SyntheticImages)
  double target = 0;  // 0: the study file's (its quick one with --quick), in the file's metric
  std::string ledger_path, scaling_ledger;
  bool no_ledger = false;
  // --model and --model-options: in place of the study file's model (its base's model: key, else
  // SmallCNN) for every configuration, when given.
  ModelConfig model;
  bool model_given = false;
};
// Runs the study; returns the exit status: 0, 1 when every repeat of every configuration failed,
// 2 on an error (said on stderr).
int run_cost_study(const CostOptions& options);

struct CostStudySpec {
  struct Entry {
    std::string name;
    KnobMap set;                  // changed against the base
    bool lr_follows_rule = true;  // lr = the rule's lr for its batch; false: the base lr, unscaled
    std::string note;
  };
  std::string name;    // "cost_cpu"
  std::string device;  // cpu | cuda: the device the configurations' backend is meant for
  std::string data;    // the file's `data:` (a data set on disk its target is meant for); empty: SyntheticImages
  KnobMap base;
  std::vector<Entry> configs;
  LrRule lr_rule;  // base_lr: the base config's lr at lr_rule.base_batch
  CostMetric metric = CostMetric::accuracy;
  double target = 0.85;
  int consecutive = 2;
  std::int64_t eval_every = 25, step_cap = 2000;
  int repeats = 3;
  // --quick: the same configurations against a lower bar (make test runs it).
  double quick_target = 0.5;
  std::int64_t quick_step_cap = 200;
  int quick_repeats = 1;
};

// Parses and checks a study file; errors name the file and the key.
CostStudySpec load_cost_study(const std::string& path);
CostStudySpec load_cost_study_text(const std::string& text, const std::string& source);
// Each configuration's complete config (the base with its `set`, the LR by its rule, eval_every
// and the step cap applied), in the file's order.
std::vector<TrainConfig> cost_configs(const CostStudySpec& spec, bool quick);

// One training run from scratch.
struct CostRepeat {
  double samples_per_s = 0;          // over its measured steps (warm-up excluded, evaluation outside)
  std::int64_t steps_to_target = 0;  // the step at which the stop rule was met (0 when it was not)
  bool reached = false;
  bool failed = false;  // the run itself failed (error): never reached, said so
  std::string error;
};

struct CostConfigResult {
  std::string name;
  std::int64_t batch = 0;
  double lr = 0;
  bool lr_follows_rule = true;
  std::string dtype;
  std::vector<CostRepeat> repeats;
};

// A configuration's row of the table.
struct CostRow {
  std::string name;
  std::int64_t batch = 0;
  double lr = 0;
  bool lr_follows_rule = true;
  std::string dtype;
  Summary samples_per_s;  // over the repeats that ran (n = 0: none did)
  int repeats = 0, reached = 0;
  bool reached_target = false;   // every repeat reached it within the step cap
  double steps_to_target = 0;    // median over the repeats (reached_target only)
  double samples_to_target = 0;  // steps_to_target x batch
  double dollars = 0;            // to target, at the median samples/s
  int rank_throughput = 0;       // 1 = fastest; ties share a rank
  int rank_cost = 0;             // 1 = cheapest; 0 when the target was not reached
  // The stopping resolution: evaluations every eval_every steps quantise samples_to_target to
  // eval_every x batch samples, this share of the row's figure.
  double quantum_samples = 0, quantum_share = 0;
  std::string why_not;           // when not reached: "2 of 3 repeats did not reach 0.85 within 2000 steps"
  std::vector<CostRepeat> runs;  // every repeat, in order
};

struct CostAnalysis {
  std::vector<CostRow> rows;  // in rank-by-cost order (those that did not reach the target last)
  double rate = 0, target = 0;
  CostMetric metric = CostMetric::accuracy;
  std::int64_t eval_every = 0, step_cap = 0;
  bool any_reached = false;
  bool winners_agree = false;    // the throughput winner is also ranked first by cost
  bool orderings_agree = false;  // every configuration has the same rank in both
  // The configuration throughput over-rates the most: the largest move from its throughput rank
  // down to its cost rank (a configuration that never reached the target counts as ranked after
  // every one that did). Empty when no configuration moves down.
  std::string over_rated;
  int over_rated_places = 0;
  double spread = 0;  // dearest / cheapest $ to target, over the configurations that reached it
  std::string cheapest, dearest;
};

CostAnalysis analyse_cost(const std::vector<CostConfigResult>& results, double rate, double target,
                          std::int64_t eval_every, std::int64_t step_cap, CostMetric metric = CostMetric::accuracy);
// The seed's table (config, samples/s median and min-max, steps, samples, $ to target, both ranks,
// the stopping quantum and its share); markdown when `markdown`, else aligned text.
std::string cost_table(const CostAnalysis& analysis, bool markdown);
// Every repeat of every configuration: samples/s and the step the target was reached at (or why not).
std::string cost_repeats_table(const CostAnalysis& analysis, bool markdown);
// The findings in plain words: winners_agree, the over-rated configuration, the spread, and that
// an agreement is a property of the hardware, not of the code.
std::string cost_findings(const CostAnalysis& analysis);

// Scaling out: a world size's time and $ to target from its weak-scaling samples/s (bench_scaling)
// and the samples to target this study measured at its global batch. Each rank is charged `rate`.
struct ScalingPoint {
  int world = 0;
  std::int64_t global_batch = 0;
  Summary samples_per_s;
};
struct BreakEvenRow {
  int world = 0;
  std::int64_t global_batch = 0;
  double samples_per_s = 0;  // median
  std::string config;        // the study's configuration at this global batch ("" when none)
  bool measured = false;     // that configuration reached the target
  double samples_to_target = 0, hours = 0, dollars = 0;
  double multiplier = 0;              // $ against world 1 (0 when world 1 has no figure)
  double dollars_per_hour_saved = 0;  // extra $ per hour of time to target saved against world 1
  bool saves_time = false;            // faster than world 1 to the target
  std::string note;                   // why a figure is missing
};
// The weak-scaling points of the latest bench_scaling run of `model` in `ledger_path` (no_sync runs
// excluded) at `decode_cost`; `run_id` receives the run, `warnings` the ledger's (a row that does not
// fit its kind is skipped). Throws Error naming what is missing.
std::vector<ScalingPoint> weak_scaling_points(const std::string& ledger_path, std::int64_t decode_cost,
                                              std::string* run_id, std::vector<std::string>* warnings = nullptr,
                                              const ModelConfig& model = {});
std::vector<BreakEvenRow> break_even(const std::vector<ScalingPoint>& points, const CostAnalysis& analysis,
                                     double rate);
std::string break_even_table(const std::vector<BreakEvenRow>& rows, bool markdown);

// The ledger side: the study's results rebuilt from a run's repeat rows (studies/cost_to_accuracy/
// rows.h), in the rows' order.
std::vector<CostConfigResult> cost_results_from_rows(const std::vector<CostRepeatRow>& rows);
// The report's figure: rank by throughput against rank by cost (bench/report/chart.h).
chart::Figure cost_rank_figure(const CostAnalysis& analysis, const std::string& title);

// The report's section for this study (studies/registry.h).
SectionDef cost_report_section();

}  // namespace trainlab::bench
