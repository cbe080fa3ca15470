// The comparison with PyTorch's ledger rows, written by bench/compare_torch.py --ledger (not by C++):
// a `compare_torch` row per trainlab configuration (against the best PyTorch variant of its dtype)
// and a `compare_torch_peer` row per PyTorch variant. These structs read exactly what
// append_ledger() there writes; a field added there is added here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

// compare_torch.py's summary(): median, min, max and n (no mean or std).
struct MedianRange {
  double median = 0, min = 0, max = 0;
  int n = 0;
  template <class F>
  void fields(F& f) {
    f("median", median);
    f("min", min);
    f("max", max);
    f.optional("n", n);
  }
};

// What both kinds carry beside the environment: the run's settings and its command line.
struct CompareTorchRun {
  std::int64_t batch = 0;
  double seconds = 0;  // measured seconds per configuration and round
  std::int64_t warmup_steps_excluded = 0;
  std::string command = "compare_torch";
  template <class F>
  void fields(F& f) {
    f.optional("batch", batch);
    f.optional("seconds", seconds);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f.optional("command", command);
  }
};

struct CompareTorchRow {
  static constexpr const char* kKind = "compare_torch";
  RowHeader header;  // versions also name PyTorch's ("torch")
  CompareTorchRun run;
  std::string config_name = "?";  // the trainlab configuration
  std::string peer = "?";         // the best PyTorch variant of its dtype
  MedianRange samples_per_s, peer_samples_per_s;
  std::optional<MedianRange> ratio;
  // One ratio per round (absent from rows written before they were recorded: those are not drawn).
  std::optional<std::vector<double>> ratio_per_round;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    run.fields(f);
    f.optional("config_name", config_name);
    f.optional("peer", peer);
    f("samples_per_s", samples_per_s);
    f("peer_samples_per_s", peer_samples_per_s);
    f.optional("ratio", ratio);
    f.optional("ratio_per_round", ratio_per_round);
  }
};

struct CompareTorchPeerRow {
  static constexpr const char* kKind = "compare_torch_peer";
  RowHeader header;
  CompareTorchRun run;
  std::string config_name;      // the PyTorch variant
  std::string peer_kind;        // "f32" | "bf16" | "f32_infer"
  std::vector<double> repeats;  // samples/s, one per round
  bool best = false;            // the best variant of its kind in this run
  template <class F>
  void fields(F& f) {
    header.fields(f);
    run.fields(f);
    f("config_name", config_name);
    f("peer_kind", peer_kind);
    f("repeats", repeats);
    f("best", best);
  }
};

}  // namespace trainlab::bench
