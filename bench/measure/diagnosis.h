// Seed 002's diagnosis of a slow run, as tools: the throughput budget (an analytic model: demanded
// against supplied samples/s, and the straggler tail of a synchronous step), the inspection of a
// checkpoint (what it holds, where a resume would start, how much of the data set has been seen),
// and diagnose: the seed's eight ordered checks applied to what a run left (its ledger rows, trace,
// checkpoint and data set; bench/measure/run_record.h), each with its verdict and evidence.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainlab::bench {

struct BudgetInput {
  std::int64_t ranks = 0;
  double per_rank = 0;    // samples/s one rank's step can consume
  double loader_cap = 0;  // samples/s the input pipeline can supply (all ranks together)
  double p_slow = 0.01;   // probability that one rank's step is slow
};

struct Budget {
  double demanded = 0, supplied = 0;
  double utilisation = 0;            // min(1, supplied / demanded): the fraction of time a rank computes
  double ranks_fed = 0;              // loader_cap / per_rank
  double tail = 0, tail_double = 0;  // 1 - (1 - p)^N at N and 2N ranks
};

// The probability that at least one of `ranks` ranks is slow in a step, each slow with p.
double straggler_tail(double p, double ranks);
// Throws Error naming a value that is out of range.
Budget throughput_budget(const BudgetInput& input);
std::string budget_text(const BudgetInput& input, const Budget& budget);
// Seed 002's own case (128 ranks x 95 samples/s against a 6,800 samples/s loader; p = 1% from 64 to
// 128 ranks), with what its stated "around 62%" would need and how far this model's figure is.
std::string seed_budget_text();

// A checkpoint, part by part: present or missing, and where a resume would start.
struct CheckpointPart {
  std::string name;  // "model", "optimizer", "scheduler", "rng", "loader position"
  bool present = false;
  std::string detail;
  std::string if_missing;  // what a resume without it does (seed 002's restart bump)
};

struct CheckpointInspection {
  std::string dir;
  std::int64_t step = 0;
  std::vector<std::string> tensors;  // "conv1.weight f32 [32, 3, 3, 3]", model then optimizer
  std::vector<CheckpointPart> parts;
  double resume_lr = -1;         // the schedule's LR at the next step (-1: no schedule state)
  double visited_fraction = -1;  // of the training data, at least once (-1: no loader position)
  std::int64_t samples_drawn = -1;
  std::map<std::string, std::string> config;  // the run's config keys, as saved
  // Why --resume refuses this checkpoint, in its words (engine/train/resume.h: one validation for
  // resume, verify-checkpoint, inspect and diagnose); empty when it takes it. A refused
  // checkpoint's step and position are not reported as fact.
  std::string refused;
  bool complete() const;  // every part present, and --resume takes it
};

// Loads `dir` (every CRC and header checked) and describes it.
CheckpointInspection inspect_checkpoint(const std::string& dir);
std::string inspection_text(const CheckpointInspection& inspection);

// ---- diagnose -----------------------------------------------------------------------------------

struct DiagnoseOptions {
  std::string target;        // a run id (in `ledger`), a Chrome trace (.json), or a checkpoint directory
  std::string ledger;        // where run ids are found (empty: results/ledger_cpu.jsonl)
  std::string against;       // an earlier run id in the same ledger: checks 6 and 7 compare with it
  double stall_factor = 10;  // no progress row for this many usual intervals (and 5 s): not advancing
  double now = 0;            // the current unix time (0: the clock); tests set it
};

enum class CheckVerdict { ok, problem, not_applicable };
const char* check_verdict_name(CheckVerdict verdict);  // "ok", "PROBLEM", "n/a"

struct DiagnosisCheck {
  int number = 0;
  std::string name;  // "liveness", "utilisation shape", ...
  CheckVerdict verdict = CheckVerdict::not_applicable;
  std::string finding;    // one line: what the evidence says ("input starvation: ...")
  std::string evidence;   // the numbers behind it
  std::string rules_out;  // what an ok (or the finding) eliminates, in the seed's words
};

struct Diagnosis {
  std::string target, kind;            // kind: "run", "trace", "checkpoint"
  std::string throughput;              // samples/s, and against the earlier run's (empty: no summary row)
  std::vector<DiagnosisCheck> checks;  // the seed's order, 1..8
  int decided_by = 0;                  // the first check with a problem (0: none)
  std::string cause;                   // its finding, or "no problem found by the checks that could run"
  std::vector<std::string> warnings;   // ledger rows skipped (damaged, or of another shape), with their line
};

Diagnosis diagnose(const DiagnoseOptions& options);
std::string diagnosis_text(const Diagnosis& diagnosis);

}  // namespace trainlab::bench
