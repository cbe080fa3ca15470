// The pinning study's ledger rows: one `pinning_repeat` row per repeat of each arm under each
// condition, written as it ends (studies/pinning/driver.cpp). An ok row carries the measurement and
// the CPU masks read back from every thread; a failed row says why instead.
//
// Also the one line a repeat's child process prints for its parent (PinningChildReport): the same
// typed fields, so the parent reads it the way the report reads a row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

// What the arm asked for ("unconfined" where it sets no mask; threads 0: the backend's default).
struct PinningRequest {
  std::string main, workers;
  int threads = 0;
  template <class F>
  void fields(F& f) {
    f("main", main);
    f("workers", workers);
    f("threads", threads);
  }
};

// The masks read back during the measured steps ("?" where nothing was read back), what the arm
// expected, and whether every thread had the mask it was meant to have.
struct PinningApplied {
  std::string main, workers, other_threads;
  std::string expected_main, expected_workers;
  bool as_set = false;
  template <class F>
  void fields(F& f) {
    f("main", main);
    f("workers", workers);
    f.optional("other_threads", other_threads);
    f.optional("expected_main", expected_main);
    f.optional("expected_workers", expected_workers);
    f("as_set", as_set);
  }
};

// What one repeat measured (an ok row's fields, at the row's top level).
struct PinningMeasurement {
  double samples_per_s = 0;
  std::int64_t measured_steps = 0, warmup_steps_excluded = 0;
  double data_wait_share = 0;
  std::vector<double> step_seconds;
  PinningApplied applied;
  template <class F>
  void fields(F& f) {
    f("samples_per_s", samples_per_s);
    f.optional("measured_steps", measured_steps);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f.optional("data_wait_share", data_wait_share);
    f.optional("step_seconds", step_seconds);
    f("applied", applied);
  }
};

struct PinningRepeatRow {
  static constexpr const char* kKind = "pinning_repeat";
  RowHeader header;
  std::string condition;  // "quiet", or "contended: N busy threads"
  int contend_threads = 0;
  std::string arm;  // kPinningArms
  bool calibration = false;
  int round = 0;
  int workers = 0;  // loader workers
  std::int64_t batch = 0, decode_cost = 0;
  std::string model = "smallcnn";      // the registered model trained (rows before --model: SmallCNN)
  std::string model_options;           // its keys, "hidden=64" ("" none)
  bool capped_equals_default = false;  // threads_capped is default's configuration on this machine
  int default_threads = 0, physical_cores = 0;
  PinningRequest requested;
  int threads = 0;                 // compute threads: as the child ran (ok), as requested (failed)
  PinningMeasurement measurement;  // ok rows
  std::string error;               // the other rows: why
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f("condition", condition);
    f.optional("contend_threads", contend_threads);
    f("arm", arm);
    f.optional("calibration", calibration);
    f.optional("round", round);
    f("workers", workers);
    f.optional("batch", batch);
    f.optional("decode_cost", decode_cost);
    f.optional("model", model);
    f.optional("model_options", model_options);
    f.optional("capped_equals_default", capped_equals_default);
    f.optional("default_threads", default_threads);
    f.optional("physical_cores", physical_cores);
    f.optional("requested", requested);
    f("threads", threads);
    // The header is read first: its status says which of the two a row holds.
    if (header.ok()) {
      measurement.fields(f);
    } else {
      f.optional("error", error);
    }
  }
};

// The line a repeat's child prints ("PINNING_RESULT " and this as JSON): what it measured and, once
// every worker existed during the measured steps, every thread's mask (null when none was read).
struct PinningReadBack {
  std::string main, workers, other_threads;  // each distinct mask, "; "-separated ("" where none)
  std::int64_t worker_threads = 0;
  template <class F>
  void fields(F& f) {
    f("main", main);
    f("workers", workers);
    f("other_threads", other_threads);
    f("worker_threads", worker_threads);
  }
};
struct PinningChildReport {
  double samples_per_s = 0;
  int threads = 0;
  std::int64_t measured_steps = 0, warmup_steps_excluded = 0;
  double data_wait_share = 0;
  std::vector<double> step_seconds;
  std::optional<PinningReadBack> readback;
  template <class F>
  void fields(F& f) {
    f("samples_per_s", samples_per_s);
    f("threads", threads);
    f("measured_steps", measured_steps);
    f("warmup_steps_excluded", warmup_steps_excluded);
    f("data_wait_share", data_wait_share);
    f("step_seconds", step_seconds);
    f.nullable("readback", readback);
  }
};

}  // namespace trainlab::bench
