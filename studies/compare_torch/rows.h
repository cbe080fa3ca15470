// The comparison with PyTorch's ledger rows, written by bench/compare_torch.py --ledger (not by C++):
// a `compare_torch` row per trainlab configuration (against the best PyTorch variant of its dtype)
// and a `compare_torch_peer` row per PyTorch variant. These structs read exactly what
// append_ledger() there writes; a field added there is added here.
#pragma once

#include <cstdint>
#include <map>
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
  std::string model = "smallcnn";  // the model compared (rows before --model: SmallCNN)
  template <class F>
  void fields(F& f) {
    f.optional("model", model);
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
  // The step's GFLOP/s, its share of the same run's GEMM ceiling, and both processes' peak RSS (rows
  // written since the comparison's table is drawn from the ledger).
  std::optional<MedianRange> gflop_per_s, ceiling_share, rss_mb, peer_rss_mb;
  // The ISA oneDNN ran trainlab with ("avx512_core_bf16"; "avx2" in a run capped by make compare
  // CPU=avx2); "" in rows written before it was recorded.
  std::string isa;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    run.fields(f);
    f.optional("isa", isa);
    f.optional("config_name", config_name);
    f.optional("peer", peer);
    f("samples_per_s", samples_per_s);
    f("peer_samples_per_s", peer_samples_per_s);
    f.optional("ratio", ratio);
    f.optional("ratio_per_round", ratio_per_round);
    f.optional("gflop_per_s", gflop_per_s);
    f.optional("ceiling_share", ceiling_share);
    f.optional("rss_mb", rss_mb);
    f.optional("peer_rss_mb", peer_rss_mb);
  }
};

// One per run (since the comparison's tables are drawn from the ledger): the GEMM ceiling, the
// targets with their verdicts, and when it was measured.
struct CompareTorchTarget {
  std::string target;
  MedianRange value;
  std::string verdict;  // "met", "MISSED", "reported", with a stretch goal's word
  template <class F>
  void fields(F& f) {
    f("target", target);
    f("value", value);
    f("verdict", verdict);
  }
};
struct CompareTorchRunRow {
  static constexpr const char* kKind = "compare_torch_run";
  RowHeader header;
  CompareTorchRun run;
  std::string date;  // "2026-12-01 14:28 UTC"
  int rounds = 0;
  std::string engine_backend;                           // trainlab's backend as it described itself
  std::map<std::string, MedianRange> gemm_gflop_per_s;  // "f32", "bf16"
  std::vector<CompareTorchTarget> targets;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    run.fields(f);
    f("date", date);
    f("rounds", rounds);
    f.optional("engine_backend", engine_backend);
    f("gemm_gflop_per_s", gemm_gflop_per_s);
    f("targets", targets);
  }
};

struct CompareTorchPeerRow {
  static constexpr const char* kKind = "compare_torch_peer";
  RowHeader header;
  CompareTorchRun run;
  std::string config_name;           // the PyTorch variant
  std::string peer_kind;             // "f32" | "bf16" | "f32_infer" | "bf16_infer"
  std::vector<double> repeats;       // samples/s, one per round (none: failed every round, status "failed")
  bool best = false;                 // the best variant of its kind in this run
  std::optional<std::string> error;  // why a failed variant did not run (its last round's error)
  template <class F>
  void fields(F& f) {
    header.fields(f);
    run.fields(f);
    f("config_name", config_name);
    f("peer_kind", peer_kind);
    f("repeats", repeats);
    f("best", best);
    f.optional("error", error);
  }
};

}  // namespace trainlab::bench
