#include "engine/train/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "backends/registry.h"
#include "engine/io/fileio.h"
#include "engine/io/yaml_file.h"

namespace trainlab {

namespace {

std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  for (auto& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

[[noreturn]] void bad_value(const std::string& origin, const std::string& key, const std::string& text,
                            const std::string& allowed) {
  throw Error(origin + ": invalid value " + quote_value(text) + " for " + key + " (allowed: " + allowed + ")");
}

std::int64_t parse_int(const std::string& text, const std::string& origin, const std::string& key,
                       const std::string& allowed) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) bad_value(origin, key, text, "an integer, " + allowed);
  return value;
}

double parse_double(const std::string& text, const std::string& origin, const std::string& key,
                    const std::string& allowed) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty() || !std::isfinite(value)) {
    bad_value(origin, key, text, "a number, " + allowed);
  }
  return value;
}

// A key's place in the nested config, as one accessor for a const and a mutable TrainConfig alike.
#define TL_KEY(path) \
  [](auto& c) -> auto& { return c.path; }

template <typename Ref>
std::function<bool(const TrainConfig&, const TrainConfig&)> same_member(Ref member) {
  return [member](const TrainConfig& a, const TrainConfig& b) { return member(a) == member(b); };
}

template <typename Ref>
ConfigField int_field(const std::string& key, Ref member, std::int64_t lo, std::int64_t hi, const std::string& help) {
  const std::string allowed = std::to_string(lo) + ".." + std::to_string(hi);
  return ConfigField{key,
                     flag_of(key),
                     help,
                     allowed,
                     false,
                     [=](TrainConfig& c, const std::string& text, const std::string& origin) {
                       const std::int64_t v = parse_int(text, origin, key, allowed);
                       if (v < lo || v > hi) bad_value(origin, key, text, allowed);
                       member(c) = static_cast<std::remove_reference_t<decltype(member(c))>>(v);
                     },
                     [=](const TrainConfig& c) { return std::to_string(member(c)); },
                     same_member(member)};
}

template <typename Ref>
ConfigField double_field(const std::string& key, Ref member, double lo, double hi, bool lo_open,
                         const std::string& help) {
  std::ostringstream range;
  range << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  const std::string allowed = range.str();
  return ConfigField{key,
                     flag_of(key),
                     help,
                     allowed,
                     false,
                     [=](TrainConfig& c, const std::string& text, const std::string& origin) {
                       const double v = parse_double(text, origin, key, allowed);
                       if (v < lo || (lo_open && v == lo) || v > hi) bad_value(origin, key, text, allowed);
                       member(c) = v;
                     },
                     [=](const TrainConfig& c) {
                       char buffer[32];
                       auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, member(c));  // shortest exact
                       return std::string(buffer, end);
                     },
                     same_member(member)};
}

// A key with a fixed set of named values, parsed into `member`'s type (an enum, DType, ...).
template <typename T, typename Ref>
ConfigField enum_field(const std::string& key, Ref member, std::vector<std::pair<std::string, T>> choices,
                       const std::string& help) {
  std::string allowed;
  for (const auto& choice : choices) allowed += (allowed.empty() ? "" : " | ") + choice.first;
  return ConfigField{key,
                     flag_of(key),
                     help,
                     allowed,
                     false,
                     [=](TrainConfig& c, const std::string& text, const std::string& origin) {
                       for (const auto& [name, value] : choices) {
                         if (text == name) {
                           member(c) = value;
                           return;
                         }
                       }
                       bad_value(origin, key, text, allowed);
                     },
                     [=](const TrainConfig& c) {
                       for (const auto& [name, value] : choices) {
                         if (member(c) == value) return name;
                       }
                       return std::string("?");
                     },
                     same_member(member)};
}

template <typename Ref>
ConfigField string_field(const std::string& key, Ref member, const std::string& allowed, const std::string& help) {
  return ConfigField{key,
                     flag_of(key),
                     help,
                     allowed,
                     false,
                     [=](TrainConfig& c, const std::string& text, const std::string&) { member(c) = text; },
                     [=](const TrainConfig& c) { return member(c); },
                     same_member(member)};
}

template <typename Ref>
ConfigField bool_field(const std::string& key, Ref member, const std::string& help) {
  const std::string allowed = "true | false";
  return ConfigField{key,
                     flag_of(key),
                     help,
                     allowed,
                     true,
                     [=](TrainConfig& c, const std::string& text, const std::string& origin) {
                       if (text == "true" || text == "1" || text == "yes")
                         member(c) = true;
                       else if (text == "false" || text == "0" || text == "no")
                         member(c) = false;
                       else
                         bad_value(origin, key, text, allowed);
                     },
                     [=](const TrainConfig& c) { return std::string(member(c) ? "true" : "false"); },
                     same_member(member)};
}

ConfigField seed_field() {
  const std::string allowed = "0..2^63-1";
  return ConfigField{"seed",
                     "--seed",
                     "seed for initialisation, data and shuffling",
                     allowed,
                     false,
                     [=](TrainConfig& c, const std::string& text, const std::string& origin) {
                       const std::int64_t v = parse_int(text, origin, "seed", allowed);
                       if (v < 0) bad_value(origin, "seed", text, allowed);
                       c.seed = static_cast<std::uint64_t>(v);
                     },
                     [](const TrainConfig& c) { return std::to_string(c.seed); },
                     same_member(TL_KEY(seed))};
}

ConfigField model_field() {
  return ConfigField{"model",
                     "--model",
                     "the model to train (trainlab models lists them with their keys)",
                     registered_model_names(),
                     false,
                     [](TrainConfig& c, const std::string& text, const std::string& origin) {
                       try {
                         c.model.name = find_model(text).name;
                       } catch (const Error&) {
                         bad_value(origin, "model", text, registered_model_names());
                       }
                     },
                     [](const TrainConfig& c) { return c.model.name; },
                     same_member(TL_KEY(model.name))};
}

ConfigField model_options_field() {
  return ConfigField{"model_options",
                     "--model-options",
                     "the model's own keys, key=value,key=value (trainlab models lists each model's)",
                     "key=value,...",
                     false,
                     [](TrainConfig& c, const std::string& text, const std::string& origin) {
                       try {
                         c.model.options = parse_model_options(text);
                       } catch (const Error& e) {
                         throw Error(origin + ": " + e.what());
                       }
                     },
                     [](const TrainConfig& c) { return model_options_text(c.model.options); },
                     same_member(TL_KEY(model.options))};
}

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int32_t>::max();

// The model, the run's length and batch, the optimiser and its schedule, the seed.
std::vector<ConfigField> model_and_optimizer_fields() {
  return {
      model_field(),
      model_options_field(),
      int_field("steps", TL_KEY(steps), 1, kMaxInt, "total optimiser steps (a resumed run continues up to this)"),
      int_field("stop_at", TL_KEY(stop_at), 0, kMaxInt,
                "stop after this global step (0: run to steps); the schedule still spans steps"),
      int_field("batch", TL_KEY(batch), 1, 65536, "batch size"),
      double_field("lr", TL_KEY(optimizer.lr), 0.0, 10.0, true, "learning rate"),
      double_field("momentum", TL_KEY(optimizer.momentum), 0.0, 0.999, false, "SGD momentum"),
      double_field("weight_decay", TL_KEY(optimizer.weight_decay), 0.0, 1.0, false,
                   "weight decay (decoupled for adamw)"),
      double_field("beta1", TL_KEY(optimizer.beta1), 0.0, 0.9999, false, "AdamW's first-moment decay"),
      double_field("beta2", TL_KEY(optimizer.beta2), 0.0, 0.9999, false,
                   "AdamW's second-moment decay (nanoGPT's small models: 0.99)"),
      double_field("grad_clip", TL_KEY(optimizer.grad_clip), 0.0, 1e6, false,
                   "clip the gradients' global norm to this before each update (0: off)"),
      enum_field<OptimizerKind>("optimizer", TL_KEY(optimizer.kind),
                                {{"sgd", OptimizerKind::sgd}, {"adamw", OptimizerKind::adamw}}, "optimiser"),
      enum_field<ScheduleKind>("schedule", TL_KEY(optimizer.schedule),
                               {{"constant", ScheduleKind::constant}, {"warmup_cosine", ScheduleKind::warmup_cosine}},
                               "learning-rate schedule"),
      int_field("warmup_steps", TL_KEY(optimizer.warmup_steps), 0, kMaxInt,
                "linear warm-up steps (warmup_cosine; constant: then held)"),
      double_field("min_lr", TL_KEY(optimizer.min_lr), 0.0, 10.0, false, "final learning rate (warmup_cosine)"),
      seed_field(),
  };
}

// How the step runs: the backend, dtype, layout, fusion, recomputation, pinned memory, TF32, graphs, threads.
std::vector<ConfigField> execution_fields() {
  return {
      string_field("backend", TL_KEY(execution.backend), "a registered backend",
                   "compute backend (default: the best CPU one)"),
      enum_field<DType>("dtype", TL_KEY(execution.dtype),
                        {{"f32", DType::f32}, {"f64", DType::f64}, {"bf16", DType::bf16}, {"f16", DType::f16}},
                        "compute dtype (bf16/f16: autocast with f32 master weights and optimizer state; f16 with "
                        "dynamic loss scaling)"),
      enum_field<MemoryFormat>("layout", TL_KEY(execution.layout),
                               {{"nchw", MemoryFormat::contiguous}, {"nhwc", MemoryFormat::channels_last}},
                               "activation memory layout (nhwc: channels_last)"),
      bool_field("fuse", TL_KEY(execution.fuse), "conv/linear with bias and ReLU fused into one kernel call"),
      enum_field<Recompute>(
          "recompute", TL_KEY(execution.recompute),
          {{"none", Recompute::none}, {"convs", Recompute::convs}, {"all", Recompute::all}},
          "activation recomputation: keep only block boundaries in forward and recompute the rest "
          "in backward (convs: the conv blocks; all: every block; a GPT recomputes each transformer block at either)"),
      bool_field("pin_memory", TL_KEY(execution.pin_memory),
                 "page-locked loader buffers (a backend with pinned uploads: cuda)"),
      bool_field("tf32", TL_KEY(execution.tf32), "TF32 math for f32 matmuls (a backend with TF32: cuda)"),
      bool_field("cuda_graph", TL_KEY(execution.cuda_graph),
                 "capture forward and backward as CUDA graphs after two eager steps, then replay them (cuda "
                 "backend; f32/bf16, one process)"),
      int_field("threads", TL_KEY(execution.threads), 0, 1024, "compute threads (0: the backend's default)"),
  };
}

// The data: SyntheticImages' splits or a data set on disk, and the loader.
std::vector<ConfigField> data_fields() {
  return {
      int_field("train_samples", TL_KEY(data.train_samples), 1, kMaxInt,
                "SyntheticImages training split size (with data: at most this many of its training samples)"),
      int_field("eval_samples", TL_KEY(data.eval_samples), 1, kMaxInt,
                "held-out split size (with data: at most this many of its held-out samples)"),
      int_field("eval_batch", TL_KEY(data.eval_batch), 1, 65536, "batch size for evaluation"),
      int_field("workers", TL_KEY(data.workers), 0, 64, "data loader worker threads (0: load on the training thread)"),
      int_field("prefetch", TL_KEY(data.prefetch), 1, 64, "batches in flight per worker"),
      bool_field("persistent_workers", TL_KEY(data.persistent_workers), "keep loader workers across epochs"),
      int_field("decode_cost", TL_KEY(data.decode_cost), 0, 100000,
                "SyntheticImages' per-sample CPU work standing in for decoding (stencil passes)"),
      string_field("data", TL_KEY(data.dir), "a data set directory",
                   "train on this data set on disk (trainlab make-dataset; empty: SyntheticImages)"),
      enum_field<Augment>("augment", TL_KEY(data.augment), {{"none", Augment::none}, {"crop_flip", Augment::crop_flip}},
                          "with data: random 4-pixel crop and horizontal flip of each training sample, on the fly "
                          "per epoch"),
      bool_field("cold_cache", TL_KEY(data.cold_cache),
                 "with data: drop the data set's files from the page cache before the run (reads come from storage)"),
  };
}

// Evaluation, progress, checkpoints, the trace, the ledger and the precision audit.
std::vector<ConfigField> reporting_and_checkpoint_fields() {
  return {
      int_field("eval_every", TL_KEY(reporting.eval_every), 0, kMaxInt, "evaluate every K steps (0: only at the end)"),
      int_field("log_every", TL_KEY(reporting.log_every), 1, kMaxInt, "progress line every K steps"),
      int_field("warmup", TL_KEY(reporting.warmup), 0, kMaxInt, "steps excluded from throughput"),
      string_field("save", TL_KEY(checkpoint.save), "a directory", "write a checkpoint here at the end"),
      int_field("save_every", TL_KEY(checkpoint.save_every), 0, kMaxInt, "also checkpoint every K steps (needs save)"),
      string_field("resume", TL_KEY(checkpoint.resume), "a checkpoint directory", "continue from this checkpoint"),
      bool_field("eval_at_end", TL_KEY(reporting.eval_at_end), "held-out evaluation after the last step"),
      string_field("trace", TL_KEY(reporting.trace), "a file path", "write a Chrome trace (Perfetto) of the run here"),
      string_field("ledger", TL_KEY(reporting.ledger), "a file path",
                   "append the run's progress rows and its summary row to this ledger (for trainlab diagnose)"),
      bool_field("audit", TL_KEY(reporting.audit),
                 "precision audit after the run: each op's dtypes, masters, optimiser state, the gradient reduction, "
                 "the loss scaler, the finiteness checks, and an f32 run of the same seed beside it"),
      string_field("audit_file", TL_KEY(reporting.audit_file), "a file path",
                   "with audit: also write the audit here as JSON"),
      string_field("record", TL_KEY(reporting.record), "a file path",
                   "write the run's initial state, every batch it trains on and each step's loss and learning rate "
                   "here (safetensors), to replay the same run in PyTorch (bench/peers/replay_torch.py)"),
  };
}

// Gradient accumulation, DDP and its communication, the f16 loss scale, non-finite steps.
std::vector<ConfigField> parallel_and_numerics_fields() {
  return {
      int_field("accumulate", TL_KEY(execution.accumulate), 1, 4096,
                "micro-steps per optimiser step (gradient accumulation; DDP communicates on the last only)"),
      double_field("bucket_cap_mb", TL_KEY(parallel.bucket_cap_mb), 0.0, 4096.0, true,
                   "DDP gradient bucket capacity in MiB (the first bucket is 1 MiB)"),
      bool_field("gradient_as_bucket_view", TL_KEY(parallel.gradient_as_bucket_view),
                 "DDP gradients are views of the communication buckets (no copy in or back; false: copied)"),
      enum_field<GradCompression>(
          "grad_compress", TL_KEY(parallel.grad_compress),
          {{"none", GradCompression::none}, {"bf16", GradCompression::bf16}, {"fp16", GradCompression::f16}},
          "DDP communication hook: gradients cast to bf16/fp16 for the reduction (half the "
          "bytes; the ring adds in f32 at each hop) and back"),
      enum_field<AllreduceAlgorithm>("allreduce", TL_KEY(parallel.allreduce),
                                     {{"ring", AllreduceAlgorithm::ring},
                                      {"recursive_doubling", AllreduceAlgorithm::recursive_doubling},
                                      {"halving_doubling", AllreduceAlgorithm::halving_doubling},
                                      {"single_copy", AllreduceAlgorithm::single_copy},
                                      {"auto", AllreduceAlgorithm::automatic},
                                      {"native", AllreduceAlgorithm::native}},
                                     "DDP all-reduce (and ZeRO's halves): a hand-written one (single_copy: DDP's "
                                     "buckets in a window the host's ranks share, zero 0 without compression; the "
                                     "ring where it cannot be), auto (one of them by bucket size, from "
                                     "allreduce_tuning's thresholds), or the library's own"),
      string_field("allreduce_tuning", TL_KEY(parallel.allreduce_tuning), "a file path",
                   "allreduce auto: the thresholds bench_allreduce --write-tuning wrote (empty: the built-in ones)"),
      int_field("zero", TL_KEY(parallel.zero), 0, 3,
                "DDP's ZeRO stage: 0 every rank holds all the state, 1 the optimiser state sharded over the ranks "
                "(reduce-scatter, update the shard, all-gather), 2 the gradients too (each bucket freed after its "
                "reduce-scatter), 3 the parameters too (FSDP: each part's all-gathered before its forward and "
                "backward, freed after)"),
      enum_field<CommBackend>("comm", TL_KEY(parallel.comm), {{"mpi", CommBackend::mpi}, {"nccl", CommBackend::nccl}},
                              "DDP communicator (nccl: CUDA builds, one GPU per rank)"),
      double_field("loss_scale_init", TL_KEY(execution.loss_scale_init), 0.0, 1e30, true,
                   "f16: the loss scale to start from (halved on overflow, doubled after the growth interval)"),
      int_field("loss_scale_growth_interval", TL_KEY(execution.loss_scale_growth_interval), 1, kMaxInt,
                "f16: good steps in a row before the loss scale doubles"),
      double_field("comm_timeout", TL_KEY(parallel.comm_timeout), 0.0, 86400.0, true,
                   "seconds a DDP communication may wait before the job is ended, naming the peer"),
      enum_field<NonFinitePolicy>("on_nonfinite", TL_KEY(execution.on_nonfinite),
                                  {{"stop", NonFinitePolicy::stop}, {"skip", NonFinitePolicy::skip}},
                                  "a step whose loss or gradient is NaN or inf: stop the run (exit status 3, naming "
                                  "the step), or skip its update and count it"),
      bool_field("allow_nonfinite_checkpoint", TL_KEY(checkpoint.allow_nonfinite_checkpoint),
                 "resume from a checkpoint whose tensors hold NaN or inf (refused otherwise)"),
  };
}

}  // namespace

const char* optimizer_name(OptimizerKind kind) { return kind == OptimizerKind::sgd ? "sgd" : "adamw"; }
const char* schedule_name(ScheduleKind kind) { return kind == ScheduleKind::constant ? "constant" : "warmup_cosine"; }
const char* allreduce_name(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::ring:
      return "ring";
    case AllreduceAlgorithm::recursive_doubling:
      return "recursive_doubling";
    case AllreduceAlgorithm::halving_doubling:
      return "halving_doubling";
    case AllreduceAlgorithm::automatic:
      return "auto";
    case AllreduceAlgorithm::single_copy:
      return "single_copy";
    case AllreduceAlgorithm::native:
      break;
  }
  return "native";
}
const char* comm_backend_name(CommBackend backend) { return backend == CommBackend::mpi ? "mpi" : "nccl"; }
const char* nonfinite_policy_name(NonFinitePolicy policy) { return policy == NonFinitePolicy::stop ? "stop" : "skip"; }

const std::vector<ConfigField>& config_fields() {
  // One list, its parts in sequence: the order is the one docs/CONFIG.md shows (generated from it).
  static const std::vector<ConfigField> fields = [] {
    std::vector<ConfigField> all;
    for (const auto& part : {model_and_optimizer_fields(), execution_fields(), data_fields(),
                             reporting_and_checkpoint_fields(), parallel_and_numerics_fields()})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  }();
  return fields;
}

const ConfigField& config_field(const std::string& key) {
  for (const auto& field : config_fields()) {
    if (field.key == key) return field;
  }
  std::string allowed;
  for (const auto& field : config_fields()) allowed += (allowed.empty() ? "" : ", ") + field.key;
  throw Error("unknown config key " + quote_value(key) + " (allowed: " + allowed + ")");
}

void apply_config_value(TrainConfig& config, const std::string& key, const std::string& text,
                        const std::string& origin) {
  for (const auto& field : config_fields()) {
    if (field.key == key) {
      field.set(config, text, origin);
      return;
    }
  }
  std::string allowed;
  for (const auto& field : config_fields()) allowed += (allowed.empty() ? "" : ", ") + field.key;
  throw Error(origin + ": unknown key " + quote_value(key) + " (allowed: " + allowed + ")");
}

namespace {
void apply_config_node(TrainConfig& config, const YAML::Node& root, const std::string& source) {
  if (root.IsNull()) return;  // an empty file changes nothing
  TL_CHECK(root.IsMap(), "config file " + source + " must be a map of key: value");
  for (const auto& item : root) {
    TL_CHECK(item.first.IsScalar(), "config file " + source + ": every key must be a plain name");
    const std::string key = item.first.Scalar();
    // `key:` with nothing after it is an empty value, refused by the key's parser unless empty is allowed.
    TL_CHECK(item.second.IsScalar() || item.second.IsNull(),
             source + ": the value of " + quote_value(key) + " must be a single value, not a list or map");
    apply_config_value(config, key, item.second.IsNull() ? std::string() : item.second.Scalar(), source);
  }
}
}  // namespace

void apply_config_file(TrainConfig& config, const std::string& path) {
  apply_config_node(config, load_yaml_file(path, "config file"), "'" + path + "'");
}

void apply_config_text(TrainConfig& config, const std::string& text, const std::string& source) {
  apply_config_node(config, load_yaml_text(text, source), source);
}

void check_backend_name(const std::string& name) {
  if (name.empty()) return;
  for (const auto& info : registered_backends()) {
    if (info.name == name) return;
  }
  throw Error("unknown backend '" + name + "' (registered: " + registered_backend_names() + ")");
}

void validate_config(const TrainConfig& config) {
  TL_CHECK(config.data.train_samples >= config.batch, "train_samples (" + std::to_string(config.data.train_samples) +
                                                          ") must be at least batch (" + std::to_string(config.batch) +
                                                          ")");
  check_backend_name(config.execution.backend);
  check_model_keys(find_model(config.model.name), config.model.options);
  // The tuning file is checked at every world size, world 1 included (where no DDP reads it): a file
  // that is not there, or a setting that would never read it, is said before the run.
  if (!config.parallel.allreduce_tuning.empty()) {
    TL_CHECK(config.parallel.allreduce == AllreduceAlgorithm::automatic,
             "allreduce_tuning " + quote_value(config.parallel.allreduce_tuning) +
                 " is read by allreduce auto only, and the all-reduce is " + allreduce_name(config.parallel.allreduce));
    try {
      (void)regular_file_size(config.parallel.allreduce_tuning);
    } catch (const Error& e) {
      throw Error("allreduce_tuning: " + std::string(e.what()) + " (bench_allreduce --write-tuning writes one)");
    }
  }
  if (config.optimizer.schedule == ScheduleKind::warmup_cosine) {
    TL_CHECK(config.steps > config.optimizer.warmup_steps, "warmup_cosine: steps (" + std::to_string(config.steps) +
                                                               ") must exceed warmup_steps (" +
                                                               std::to_string(config.optimizer.warmup_steps) + ")");
    TL_CHECK(config.optimizer.min_lr <= config.optimizer.lr, "min_lr must not exceed lr");
  }
  if (config.data.dir.empty()) {
    TL_CHECK(config.data.augment == Augment::none, "augment needs data (a data set on disk: --data DIR)");
    TL_CHECK(!config.data.cold_cache, "cold_cache needs data (a data set on disk: --data DIR)");
  } else {
    TL_CHECK(config.data.decode_cost == 0, "decode_cost is SyntheticImages' stand-in for decoding; with data (" +
                                               config.data.dir + ") the decoding is real: drop decode_cost");
    std::error_code ec;
    TL_CHECK(std::filesystem::is_directory(config.data.dir, ec),
             "data: " + quote_value(config.data.dir) + " is not a directory (a data set from trainlab make-dataset)");
  }
  TL_CHECK(config.stop_at <= config.steps, "stop_at (" + std::to_string(config.stop_at) + ") must not exceed steps (" +
                                               std::to_string(config.steps) + ")");
  TL_CHECK(config.checkpoint.save_every == 0 || !config.checkpoint.save.empty(),
           "save_every needs a save directory (--save DIR)");
  TL_CHECK(config.reporting.audit_file.empty() || config.reporting.audit, "audit_file needs audit (--audit)");
  TL_CHECK(!config.reporting.audit || config.checkpoint.resume.empty(),
           "audit: its f32 reference trains from step 0, so the audited run must too (drop --resume)");
  TL_CHECK(!config.reporting.audit || config.reporting.eval_at_end,
           "audit compares held-out accuracy with an f32 run: it needs eval_at_end true");
  if (!config.checkpoint.resume.empty()) {
    std::error_code ec;
    TL_CHECK(std::filesystem::is_directory(config.checkpoint.resume, ec),
             "resume: checkpoint directory '" + config.checkpoint.resume + "' does not exist");
  }
}

void config_to_state(const TrainConfig& config, StateDict& state) {
  for (const auto& field : config_fields()) state.strings["config." + field.key] = field.get(config);
}

std::string config_summary(const TrainConfig& config) {
  std::string out;
  for (const auto& field : config_fields()) {
    const std::string value = field.get(config);
    if (value.empty()) continue;
    out += (out.empty() ? "" : " ") + field.key + "=" + value;
  }
  return out;
}

std::string config_reference_markdown() {
  const TrainConfig defaults;
  std::string out =
      "# trainlab configuration keys\n\n"
      "Generated by `trainlab config-reference` from the table that parses them (engine/train/config.cpp), so it "
      "cannot drift from the code; a test compares this file with the command's output. Every key can be set "
      "in a YAML file (`trainlab train --config FILE`) or as a flag (key `decode_cost` is flag "
      "`--decode-cost`); flags override the file. Errors name the key, the value, where it came from and what is "
      "allowed.\n\n| key | flag | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& field : config_fields()) {
    std::string def = field.get(defaults);
    if (def.empty()) def = "(none)";
    auto cell = [](std::string text) {  // a | inside a table cell must be escaped
      for (std::size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2))
        text.insert(at, 1, '\\');
      return text;
    };
    out += "| `" + field.key + "` | `" + field.flag + "` | `" + def + "` | " + cell(field.allowed) + " | " +
           cell(field.help) + " |\n";
  }
  return out;
}

}  // namespace trainlab
