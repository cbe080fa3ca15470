// The scaling study's ledger rows: one `scaling` row per training run (bench_scaling: weak, strong,
// the no_sync trials, the compared arms and the accuracy runs), and one `scaling_peer` row per
// PyTorch DDP measurement (bench/peers/torch_ddp.py's output as it printed it). The cost study's
// break-even reads the `scaling` rows too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/measure/ledger.h"

namespace trainlab::bench {

struct ScalingConfig {
  std::string mode;  // weak | strong | zero_compare | compress_compare | allreduce_compare | compress_accuracy
  int world = 0;
  std::int64_t global_batch = 0, per_worker_batch = 0;
  double lr = 0;  // the LR rule's, at the global batch
  std::int64_t decode_cost = 0;
  bool no_sync = false;  // communication off (the paired no_sync trials)
  std::string allreduce;
  bool rendezvous = false;
  double bucket_cap_mb = 0, first_bucket_mb = 0;
  std::string dtype;
  int launched_ranks = 0;
  double ranks_per_core = 0;
  std::string bind = "none";  // core | none (none_b: the second unbound arm of --bind-compare)
  bool bind_compare = false;
  std::string rank0_cpus;
  int zero = 0;
  std::string grad_compress = "none";
  bool bucket_view = true;
  std::string model = "smallcnn";  // the registered model trained (rows before --model: SmallCNN)
  std::string model_options;       // its keys, "hidden=64" ("" none)
  template <class F>
  void fields(F& f) {
    f("mode", mode);
    f("world", world);
    f("global_batch", global_batch);
    f.optional("per_worker_batch", per_worker_batch);
    f.optional("lr", lr);
    f("decode_cost", decode_cost);
    f.optional("no_sync", no_sync);
    f.optional("allreduce", allreduce);
    f.optional("rendezvous", rendezvous);
    f.optional("bucket_cap_mb", bucket_cap_mb);
    f.optional("first_bucket_mb", first_bucket_mb);
    f.optional("dtype", dtype);
    f.optional("launched_ranks", launched_ranks);
    f.optional("ranks_per_core", ranks_per_core);
    f.optional("bind", bind);
    f.optional("bind_compare", bind_compare);
    f.optional("rank0_cpus", rank0_cpus);
    f.optional("zero", zero);
    f.optional("grad_compress", grad_compress);
    f.optional("bucket_view", bucket_view);
    f.optional("model", model);
    f.optional("model_options", model_options);
  }
};

struct ScalingMemory {
  std::int64_t optimizer_state_peak_bytes = 0, total_peak_bytes = 0;
  std::string note = "the largest over the ranks";
  template <class F>
  void fields(F& f) {
    f("optimizer_state_peak_bytes", optimizer_state_peak_bytes);
    f("total_peak_bytes", total_peak_bytes);
    f.optional("note", note);
  }
};

struct RankStepTimes {
  double p50_s = 0, p99_s = 0, max_s = 0;
  template <class F>
  void fields(F& f) {
    f("p50_s", p50_s);
    f("p99_s", p99_s);
    f("max_s", max_s);
  }
};

// DDP's own accounting per step (means over the measured steps), rank 0's.
struct DdpPerStep {
  double backward_compute_s = 0, comm_s = 0, overlap_s = 0, exposed_s = 0;
  std::vector<std::int64_t> bucket_bytes;
  std::string clock;  // "device events" | "host steady_clock"
  // ZeRO: the parameters all-gathered per step, and (ZeRO-3) the forward's and backward's wait for them.
  std::optional<std::int64_t> gather_bytes;
  std::optional<double> gather_wait_s;
  template <class F>
  void fields(F& f) {
    f("backward_compute_s", backward_compute_s);
    f("comm_s", comm_s);
    f("overlap_s", overlap_s);
    f("exposed_s", exposed_s);
    f.optional("bucket_bytes", bucket_bytes);
    f.optional("clock", clock);
    f.optional("gather_bytes", gather_bytes);
    f.optional("gather_wait_s", gather_wait_s);
  }
};

struct ScalingRow {
  static constexpr const char* kKind = "scaling";
  RowHeader header;
  std::string communicator, interconnect;  // what DDP ran over
  ScalingConfig config;
  double samples_per_s = 0;                             // global, over the measured steps of the slowest rank
  std::optional<double> held_out_accuracy, final_loss;  // compress_accuracy runs
  double comm_wait_s_per_step = 0;
  ScalingMemory memory_per_rank;
  int warmup_steps_excluded = 0;
  std::int64_t measured_steps = 0;
  std::vector<RankStepTimes> per_rank_step;
  DdpPerStep ddp_per_step;
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f.optional("communicator", communicator);
    f.optional("interconnect", interconnect);
    f("config", config);
    f("samples_per_s", samples_per_s);
    f.optional("held_out_accuracy", held_out_accuracy);
    f.optional("final_loss", final_loss);
    f.optional("comm_wait_s_per_step", comm_wait_s_per_step);
    f.optional("memory_per_rank", memory_per_rank);
    f.optional("warmup_steps_excluded", warmup_steps_excluded);
    f.optional("measured_steps", measured_steps);
    f.optional("per_rank_step", per_rank_step);
    f.optional("ddp_per_step", ddp_per_step);
  }
  bool weak_or_strong() const { return config.mode == "weak" || config.mode == "strong"; }
};

// What trainlab reads of the PyTorch peer's output (bench/peers/torch_ddp.py's last line): every
// variant's samples/s, or (an older peer) one variant's; or why it did not run.
struct PeerVariant {
  double samples_per_s = 0;
  template <class F>
  void fields(F& f) {
    f("samples_per_s", samples_per_s);
  }
};
struct PeerOutput {
  std::optional<std::string> error;
  std::optional<std::map<std::string, PeerVariant>> variants;
  std::optional<std::map<std::string, std::string>> variant_errors;  // variants that did not run, and why
  std::optional<double> samples_per_s;
  std::string variant;
  template <class F>
  void fields(F& f) {
    f.optional("error", error);
    f.optional("variants", variants);
    f.optional("variant_errors", variant_errors);
    f.optional("samples_per_s", samples_per_s);
    f.optional("variant", variant);
  }
};

struct ScalingPeerConfig {
  std::string mode;  // weak
  int world = 0;
  std::int64_t global_batch = 0, decode_cost = 0;
  std::string dtype;
  template <class F>
  void fields(F& f) {
    f("mode", mode);
    f("world", world);
    f.optional("global_batch", global_batch);
    f.optional("decode_cost", decode_cost);
    f.optional("dtype", dtype);
  }
};

struct ScalingPeerRow {
  static constexpr const char* kKind = "scaling_peer";
  RowHeader header;
  std::string communicator, interconnect;
  ScalingPeerConfig config;
  json peer;          // the peer's output, whole, as it printed it
  PeerOutput result;  // what is read of it (not a field of its own: written as part of `peer`)
  template <class F>
  void fields(F& f) {
    header.fields(f);
    f.optional("communicator", communicator);
    f.optional("interconnect", interconnect);
    f("config", config);
    f("peer", peer);
    if constexpr (std::is_same_v<F, RowReader>) RowReader::decode(peer, result, "peer");
  }
};

}  // namespace trainlab::bench
