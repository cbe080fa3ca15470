// The ladder's ledger rows: one `repeat` row per measurement (a rung's repeat) and one `rung` row per
// rung (its repeats and their statistics, or why it was skipped or failed), written as they happen.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/data_source.h"
#include "bench/measure/knobs.h"
#include "bench/measure/ledger.h"
#include "bench/measure/stats.h"

namespace trainlab::bench {

// The single knob a rung changed against the previous rung.
struct Change {
  std::string knob;  // "workers", or "batch (+ LR rule)"
  std::string from, to;
  template <class F>
  void fields(F& f) {
    f("knob", knob);
    f("from", from);
    f("to", to);
  }
};

// One phase of the step, per measured step and as a share of it.
struct PhaseShare {
  double seconds_per_step = 0;
  double share = 0;
  template <class F>
  void fields(F& f) {
    f("seconds_per_step", seconds_per_step);
    f("share", share);
  }
};
struct Breakdown {
  PhaseShare data_wait, forward, backward, optimizer;
  template <class F>
  void fields(F& f) {
    f("data_wait", data_wait);
    f("forward", forward);
    f("backward", backward);
    f("optimizer", optimizer);
  }
};

// What every ladder row says about its arm: the ladder, the rung, its place and what it changed.
struct LadderArmFields {
  std::string ladder;  // "cpu"
  std::string rung;    // "baseline", "workers", ..., "calibration A"
  std::int64_t rung_index = 0;
  bool calibration = false;
  KnobMap config;                  // as it ran (the trainer's keys)
  std::optional<DataSource> data;  // what it trained on (rows before 2026-12-02 lack it: SyntheticImages)
  std::optional<Change> changed;
  std::string note;
  // What the backend ran natively and what it emulated (the planner's answer, engine/train/step.h).
  std::map<std::string, std::string> compute;
  std::string emulated;
  std::string reason;  // skipped: why
  std::string error;   // failed: what
  std::optional<Breakdown> breakdown;
  std::int64_t warmup_steps_excluded = 0;
  std::int64_t measured_steps = 0;
  // Held-out accuracy after the measured steps, outside the timing: a repeat row's own; a rung row's
  // median over its repeats (repeat r trains with seed + r), each in held_out_accuracies.
  std::optional<double> held_out_accuracy;
  std::vector<double> held_out_accuracies;
  // The accuracy guard (accuracy_guard in ladder.h): whether the rung still trains, and why not.
  bool breaks_training = false;
  std::string accuracy_check;
  template <class F>
  void fields(F& f) {
    f.optional("ladder", ladder);
    f("rung", rung);
    f("rung_index", rung_index);
    f.optional("calibration", calibration);
    f.optional("config", config);
    f.optional("data", data);
    f.nullable("changed", changed);
    f.optional("note", note);
    f.optional("compute", compute);
    f.optional("emulated", emulated);
    f.optional("reason", reason);
    f.optional("error", error);
    f.optional("breakdown", breakdown);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f.optional("measured_steps", measured_steps);
    f.optional("held_out_accuracy", held_out_accuracy);
    f.optional("held_out_accuracies", held_out_accuracies);
    f.optional("breaks_training", breaks_training);
    f.optional("accuracy_check", accuracy_check);
  }
};

struct LadderRepeatRow {
  static constexpr const char* kKind = "repeat";
  RowHeader header;
  LadderArmFields arm;
  int repeat = 0;
  std::optional<double> value;  // samples/s
  json memory;                  // tensor memory by category (engine/instrument/memory_usage.h's JSON)
  template <class F>
  void fields(F& f) {
    header.fields(f);
    arm.fields(f);
    f.optional("repeat", repeat);
    f.optional("value", value);
    f.optional("memory", memory);
    if (header.ok()) {
      if (!value) throw RowError("no value");
      if (!arm.breakdown) throw RowError("no breakdown");
    }
  }
};

struct LadderRungRow {
  static constexpr const char* kKind = "rung";
  RowHeader header;
  LadderArmFields arm;
  std::vector<double> repeats;  // samples/s, one per repeat that finished
  std::optional<Summary> stats;
  bool incomplete = false;  // rebuilt by the report from the repeat rows of an interrupted run
  template <class F>
  void fields(F& f) {
    header.fields(f);
    arm.fields(f);
    f.optional("repeats", repeats);
    f.optional("stats", stats);
    f.optional("incomplete", incomplete);
    if (header.ok()) {
      if (repeats.empty()) throw RowError("no repeats");
      if (!stats) throw RowError("no stats");
      if (!arm.breakdown) throw RowError("no breakdown");
    }
  }
};

}  // namespace trainlab::bench
