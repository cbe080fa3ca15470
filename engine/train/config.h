// The training run's configuration: one table of keys (config_fields), shared by YAML files and
// command-line flags (key `decode_cost` is flag `--decode-cost`). Text is parsed once, here, into
// typed values (enums, numbers); every value is checked against its range, and errors name the
// key, the value, where it came from and what is allowed. Nothing past this file compares strings.
// docs/CONFIG.md is generated from the same table (config_reference_markdown).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/dtype.h"
#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"
#include "engine/data/disk_dataset.h"
#include "engine/nn/model_registry.h"
#include "engine/nn/module.h"
#include "engine/train/distributed.h"

namespace trainlab {

enum class OptimizerKind { sgd, adamw };
// What a step with a non-finite loss or gradient does (f32/bf16/f64; f16's loss scaler skips such
// steps by design): stop the run with an error naming the step (exit status 3), or skip the update
// and count it.
enum class NonFinitePolicy { stop, skip };
enum class ScheduleKind { constant, warmup_cosine };
const char* optimizer_name(OptimizerKind kind);  // "sgd", "adamw"
const char* schedule_name(ScheduleKind kind);    // "constant", "warmup_cosine"
const char* allreduce_name(AllreduceAlgorithm algorithm);
const char* comm_backend_name(CommBackend backend);
const char* nonfinite_policy_name(NonFinitePolicy policy);

// The configuration is nested by who consumes it, and each part is handed over whole: the
// optimiser and its schedule (make_optimizer), how a step executes (the backend, autocast, the
// StepRunner), the data (the task and its loader), data parallelism (comm::Ddp), what the run
// reports (the trainer's observers), and its checkpoints. Keys stay flat in YAML and on the command
// line (config_fields: key `decode_cost` is data.decode_cost).
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999;  // AdamW's
  // Gradient clipping: each step's gradients scaled so that their global norm (over every
  // parameter; under data parallelism after the average, over all the shards) is at most this
  // (PyTorch's clip_grad_norm_). 0: off.
  double grad_clip = 0.0;
  ScheduleKind schedule = ScheduleKind::constant;
  std::int64_t warmup_steps = 0;  // for warmup_cosine
  double min_lr = 0.0;            // for warmup_cosine
};

struct ExecutionConfig {
  std::string backend;                             // a registered backend's name; empty: the default CPU one
  DType dtype = DType::f32;                        // f32 | f64 | bf16 | f16 (autocast, f32 masters; f16 scaled)
  MemoryFormat layout = MemoryFormat::contiguous;  // nchw | nhwc (channels_last activations)
  bool fuse = false;                               // conv/linear with bias and ReLU in one kernel call
  Recompute recompute = Recompute::none;           // activation recomputation: none | convs | all
  bool pin_memory = false;      // page-locked loader buffers for host-to-device copies (a backend with PinnedUploads)
  bool tf32 = false;            // TF32 tensor-core math for f32 matmuls (a backend with MathModes)
  bool cuda_graph = false;      // forward and backward captured once as device graphs, then replayed
  int threads = 0;              // 0: the backend's default (all cores)
  std::int64_t accumulate = 1;  // micro-steps per optimiser step (gradients summed; DDP syncs only the last)
  // What a step with a NaN or inf loss or gradient does.
  NonFinitePolicy on_nonfinite = NonFinitePolicy::stop;
  // f16 dynamic loss scaling (PyTorch GradScaler semantics)
  double loss_scale_init = 65536;
  std::int64_t loss_scale_growth_interval = 2000;
};

struct DataConfig {
  std::int64_t train_samples = 50000;
  std::int64_t eval_samples = 1000;
  std::int64_t eval_batch = 250;
  int workers = 0;
  int prefetch = 2;
  bool persistent_workers = false;
  std::int64_t decode_cost = 0;
  // A data set on disk (trainlab make-dataset; engine/data/disk_dataset.h) instead of SyntheticImages:
  // its train split (at most train_samples of it) and its held-out split (at most eval_samples).
  std::string dir;                  // key `data`
  Augment augment = Augment::none;  // on-the-fly random crop and flip of the training samples (with dir)
  bool cold_cache = false;          // drop the data set's files from the page cache before the run (with dir)
};

// Data parallelism (trainlab train under scripts/mpirun; ignored by a single process): comm::Ddp's
// options. The run's `batch` is the global batch of one micro-step: each rank takes batch / world.
struct ParallelConfig {
  double bucket_cap_mb = 25;            // bucket capacity, MiB
  double first_bucket_mb = 1;           // the first bucket's (PyTorch DDP's 1 MiB; bench_scaling sets it)
  bool gradient_as_bucket_view = true;  // gradients are views of the buckets (PyTorch's option)
  // ring | recursive_doubling | halving_doubling | auto | native
  AllreduceAlgorithm allreduce = AllreduceAlgorithm::native;
  std::string allreduce_tuning;  // auto's thresholds: a file bench_allreduce --write-tuning wrote ("": built in)
  GradCompression grad_compress = GradCompression::none;  // none | bf16 | fp16 (DDP's compress hook)
  std::int64_t zero = 0;                // ZeRO stage: 0 replicated, 1 optimiser state sharded, 2 gradients too
  CommBackend comm = CommBackend::mpi;  // mpi | nccl (a CUDA build, one GPU per rank)
  double comm_timeout = 300;            // seconds any communication may wait
  // Meet the other ranks at a sleeping rendezvous before each bucket's all-reduce, so an early rank
  // does not spin (Communicator::rendezvous; bench_scaling sets it). Off: straight into the all-reduce.
  bool rendezvous = false;
};

struct ReportingConfig {
  std::int64_t eval_every = 0;  // 0: evaluate only at the end
  bool eval_at_end = true;      // held-out evaluation after the last step
  std::int64_t log_every = 20;
  std::int64_t warmup = 5;  // steps excluded from throughput
  std::string trace;        // Chrome trace JSON of the run's profiler spans (empty: none)
  std::string ledger;       // the run's progress and summary rows for trainlab diagnose (empty: none; rank 0 writes)
  // The precision audit (engine/instrument/precision_audit.h): printed after the run, with an f32 reference
  // run of the same seed; audit_file also writes it as JSON.
  bool audit = false;
  std::string audit_file;
  // The run's initial state, every batch it trains on and each step's loss and learning rate, in
  // one safetensors file written at the end: the same run replayed elsewhere (bench/peers/replay_torch.py).
  std::string record;
};

struct CheckpointConfig {
  std::string save;  // checkpoint directory written at the end (and every save_every)
  std::int64_t save_every = 0;
  std::string resume;                       // checkpoint directory to continue from
  bool allow_nonfinite_checkpoint = false;  // resume from a checkpoint whose tensors hold NaN or inf
};

// Which registered model (engine/nn/model_registry.h) and its own keys.
struct ModelConfig {
  std::string name = "smallcnn";  // key `model`
  ModelOptions options;           // key `model_options`: "depth=3,width=16"
};

struct TrainConfig {
  ModelConfig model;
  // The run's shape: how long, how many samples per step, which seed.
  std::int64_t steps = 300;  // total optimiser steps (a resumed run continues up to this)
  std::int64_t stop_at = 0;  // stop early after this global step (0: run to steps); schedules still span steps
  std::int64_t batch = 32;
  std::uint64_t seed = 0;
  OptimizerConfig optimizer;
  ExecutionConfig execution;
  DataConfig data;
  ParallelConfig parallel;
  ReportingConfig reporting;
  CheckpointConfig checkpoint;
};

struct ConfigField {
  std::string key;   // YAML key
  std::string flag;  // "--decode-cost"
  std::string help;
  std::string allowed;   // "1..65536", "sgd | adamw", ...
  bool is_bool = false;  // a flag that may stand alone (--fuse)
  // Parses `text` (from `origin`, e.g. "configs/smallcnn.yaml" or "--batch") into the config.
  std::function<void(TrainConfig&, const std::string& text, const std::string& origin)> set;
  std::function<std::string(const TrainConfig&)> get;  // the value as text (exact: get then set is the identity)
  std::function<bool(const TrainConfig&, const TrainConfig&)> same;  // the typed values are equal
};

const std::vector<ConfigField>& config_fields();
const ConfigField& config_field(const std::string& key);  // throws Error listing the keys when unknown
// Applies a YAML file (a flat map of known keys to scalars) on top of `config`.
void apply_config_file(TrainConfig& config, const std::string& path);
// The same from text (`source` names it in errors).
void apply_config_text(TrainConfig& config, const std::string& text, const std::string& source);
void apply_config_value(TrainConfig& config, const std::string& key, const std::string& text,
                        const std::string& origin);
// Throws Error unless `name` is empty (the default) or a registered backend.
void check_backend_name(const std::string& name);
// Cross-field checks (train_samples >= batch, the backend is registered, ...).
void validate_config(const TrainConfig& config);
// The config as strings ("config.<key>"), for checkpoints and ledgers.
void config_to_state(const TrainConfig& config, StateDict& state);
std::string config_summary(const TrainConfig& config);  // "steps=300 batch=32 ..."
// docs/CONFIG.md: every key, its flag, default, allowed values and meaning, from the table itself.
std::string config_reference_markdown();

}  // namespace trainlab
