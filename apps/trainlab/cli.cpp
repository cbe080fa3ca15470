#include "apps/trainlab/cli.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <new>
#include <optional>
#include <string>
#include "apps/cli_parse.h"
#include "apps/model_option.h"
#include "apps/trainlab/cli_data.h"
#include "apps/trainlab/cli_generate.h"

#include "backends/cpu/isa.h"
#include "backends/registry.h"
#include "bench/measure/grad_dump.h"
#include "bench/measure/ledger.h"
#include "bench/measure/memory_report.h"
#include "bench/measure/run_record.h"
#include "bench/measure/throughput.h"
#include "comm/cost_model.h"
#include "comm/run_training.h"
#include "engine/instrument/memory_model.h"
#include "engine/io/fileio.h"
#include "engine/io/version.h"
#include "engine/train/checkpoint.h"
#include "engine/train/config.h"
#include "engine/train/resume.h"
#include "engine/train/trainer.h"
#include "studies/allreduce/rows.h"

namespace trainlab {

namespace {

using bench::GradDumpOptions;
using bench::StepMemoryReport;
using bench::ThroughputConfig;
using bench::ThroughputResult;

// Exit status: 0 done, 1 an internal error or a run that ended early, 2 bad input (one line
// naming it), 3 the run diverged (a NaN or inf loss or gradient; nothing was saved).
constexpr int kExitBadInput = 2;
constexpr int kExitDiverged = 3;

// The precision audit's reference: the same run in f32, quietly, writing nothing.
TrainConfig audit_reference(const TrainConfig& config) {
  TrainConfig reference = config;
  reference.execution.dtype = DType::f32;
  reference.reporting.audit = false;
  reference.reporting.audit_file.clear();
  reference.checkpoint.save.clear();
  reference.checkpoint.save_every = 0;
  reference.reporting.trace.clear();
  return reference;
}

void report_audit(const TrainConfig& config, const PrecisionAudit& audit) {
  std::cout << precision_audit_text(audit);
  if (!config.reporting.audit_file.empty()) {
    write_file_atomic(config.reporting.audit_file, precision_audit_json(audit) + "\n");
    std::cout << "audit: written to " << config.reporting.audit_file << "\n";
  }
}

int run_train(const std::string& config_path, const std::map<std::string, CLI::Option*>& options,
              const std::map<std::string, std::string>& values, bool dry_run) {
  TrainConfig config;
  if (!config_path.empty()) apply_config_file(config, config_path);
  for (const auto& field : config_fields()) {
    const CLI::Option* option = options.at(field.key);
    if (option->count() == 0) continue;
    std::string text = values.at(field.key);
    if (text.empty() && field.is_bool) text = "true";  // a bare boolean flag
    apply_config_value(config, field.key, text, field.flag);
  }
  validate_config(config);
  if (dry_run) {
    // Everything that can be refused before a run is checked, and nothing is trained or written.
    if (!config.reporting.trace.empty()) check_output_file(config.reporting.trace, "--trace");
    if (!config.checkpoint.save.empty()) check_checkpoint_dir(config.checkpoint.save);
    // The data: a data set on disk is opened as the run would open it (its manifest, the index and
    // every file's size), so a truncated or foreign one is refused here too.
    if (!config.data.dir.empty()) (void)model_task(config);
    std::printf("config: %s\ndry run: the configuration is valid; nothing was trained or written\n",
                config_summary(config).c_str());
    return 0;
  }
  const std::int64_t target = config.stop_at > 0 ? config.stop_at : config.steps;
  // Alone, or (under mpirun or a scheduler's MPI launcher) one replica per rank with DDP over the
  // world; only rank 0 prints and records.
  return comm::run_training(config, [&](comm::Replica& replica) {
    const bool lead = replica.rank() == 0;
    if (!config.reporting.ledger.empty() && lead)
      bench::Ledger(config.reporting.ledger).load();  // a bad path fails before the run
    bench::RunRecorder recorder(config.reporting.ledger, config, replica.rank(), replica.world_size());
    try {
      TrainTask task = model_task(config);
      recorder.watch_loader(task.train_data);
      auto trainer = replica.trainer(config, task);
      trainer->set_callbacks(TrainCallbacks{[&](const StepReport& r) { recorder.on_step(r); }, {}, {}, {}});
      const TrainResult result = trainer->train(lead ? &std::cout : nullptr);
      // Each rank's step-time distribution, gathered to every rank (rank 0 prints and records it).
      const bench::RankStepStats mine =
          bench::rank_step_stats(replica.rank(), result.step_seconds, recorder.work_seconds());
      std::vector<bench::RankStepStats> ranks = {mine};
      if (replica.distributed()) {
        const auto us = [](double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e3)); };
        const auto p50 = replica.gather(us(mine.p50_ms)), p99 = replica.gather(us(mine.p99_ms)),
                   max = replica.gather(us(mine.max_ms)), work = replica.gather(us(mine.work_p50_ms));
        ranks.clear();
        for (int r = 0; r < replica.world_size(); ++r) {
          const auto i = static_cast<std::size_t>(r);
          ranks.push_back({r, p50[i] * 1e-3, p99[i] * 1e-3, max[i] * 1e-3, work[i] * 1e-3, mine.steps});
        }
        if (lead) std::cout << bench::rank_stats_text(ranks) << "\n";
      }
      if (lead) {
        recorder.finish(result, ranks, config.data.dir);
        if (recorder.enabled())
          std::cout << "ledger: " << config.reporting.ledger << " (run " << recorder.run_id() << ")\n";
      }
      if (config.reporting.audit) {
        PrecisionAudit audit;
        if (config.execution.dtype == DType::f32) {
          audit = trainer->precision_audit(result, result);
        } else {
          if (lead) std::cout << "audit: the f32 reference run (same seed and steps)...\n" << std::flush;
          const TrainConfig f32_config = audit_reference(config);
          auto reference = replica.trainer(f32_config, model_task(f32_config));
          const TrainResult f32 = reference->train(nullptr);
          audit = trainer->precision_audit(result, f32);
        }
        if (lead) report_audit(config, audit);
      }
      return result.last_step == target ? 0 : 1;
    } catch (const std::exception& e) {
      recorder.fail(e.what());
      throw;
    }
  });
}

int run_verify_checkpoint(const std::string& dir) {
  const Checkpoint c = load_checkpoint(dir, get_backend("reference"));
  validate_checkpoint(c, dir);  // what --resume checks, in its words
  std::int64_t parameters = 0, buffers = 0;
  for (const auto& [name, tensor] : c.model) parameters += tensor.numel();
  for (const auto& [name, tensor] : c.optimizer.tensors) buffers += tensor.numel();
  std::printf(
      "checkpoint %s: complete (marker, sizes, CRC-32s and headers checked; the state loaded and cross-checked as "
      "--resume does)\n",
      dir.c_str());
  std::printf("step %lld; engine %s; backend %s\n", static_cast<long long>(c.trainer.integer("step", dir)),
              c.trainer.strings.count("engine_version") ? c.trainer.strings.at("engine_version").c_str() : "?",
              c.trainer.strings.count("backend") ? c.trainer.strings.at("backend").c_str() : "?");
  std::printf("model: %zu tensors, %lld values; optimizer (%s): %zu tensors, %lld values\n", c.model.size(),
              static_cast<long long>(parameters),
              c.optimizer.strings.count("optimizer") ? c.optimizer.strings.at("optimizer").c_str() : "?",
              c.optimizer.tensors.size(), static_cast<long long>(buffers));
  std::string config;
  for (const auto& [key, value] : c.trainer.strings) {
    if (key.rfind("config.", 0) != 0 || value.empty()) continue;
    if (!config.empty()) config += ' ';
    config += key.substr(7);
    config += '=';
    config += value;
  }
  std::printf("config: %s\n", config.c_str());
  return 0;
}

int run_throughput(const ThroughputConfig& config) {
  check_backend_name(config.backend);
  (void)find_model(config.model);
  const ThroughputResult result = bench::measure_throughput(config);
  std::printf("%s\n", bench::throughput_json(result).c_str());
  std::fprintf(stderr, "%s\n", bench::throughput_summary(result).c_str());
  return 0;
}

// With --ops: each backend's capability table (backends/capability.h) on this machine, per op and
// dtype, in NCHW (channels_last answers the same on every backend here), and why each emulated or
// unsupported entry is so. A backend that cannot start here (no GPU) says why instead.
int list_backends(bool ops, const std::string& only) {
  const std::string fallback = default_backend_name();
  if (!only.empty()) check_backend_name(only);
  for (const auto& info : registered_backends()) {
    if (!only.empty() && info.name != only) continue;
    if (!ops) {
      std::printf("%-10s %-5s %s%s\n", info.name.c_str(), device_type_name(info.device_type), info.description.c_str(),
                  info.name == fallback ? " (default)" : "");
      continue;
    }
    Backend* backend = nullptr;
    try {
      backend = &get_backend(info.name);
    } catch (const std::exception& e) {
      std::printf("%s: not available here: %s\n\n", info.name.c_str(), e.what());
      continue;
    }
    std::printf("%s%s (ISA %s)\n", info.name.c_str(), info.name == fallback ? " (default)" : "",
                backend->isa().empty() ? "-" : backend->isa().c_str());
    std::map<std::string, std::string> why;  // "emulated: how" or "unsupported: why" -> the entries it explains
    // One row: the answer per dtype, each one not native explained below the table.
    auto row = [&](const std::string& label, const std::function<OpSupport(DType)>& ask) {
      std::printf("  %-40s", label.c_str());
      for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
        const OpSupport s = ask(dtype);
        std::printf(" %-12s", support_name(s.level));
        if (s.level != Support::native) {
          std::string& entries = why[std::string(support_name(s.level)) + ": " + s.how];
          entries += (entries.empty() ? "" : ", ") + label + " " + dtype_name(dtype);
        }
      }
      std::printf("\n");
    };
    std::printf("  %-40s %-12s %-12s %-12s %-12s\n", "op", "f32", "f64", "bf16", "f16");
    for (BackendOp op : kAllBackendOps)
      row(backend_op_name(op), [&](DType dtype) { return backend->supports_op(op, dtype, false); });
    // The fused patterns (backends/fusion.h), asked in general: a pattern may take only some shapes.
    std::printf("  %-40s\n", "fused pattern");
    for (const FusedPattern& pattern : kFusedPatterns)
      row(pattern.str(), [&](DType dtype) { return backend->supports_fused(pattern, dtype, false); });
    for (const auto& [reason, entries] : why) std::printf("  %s (%s)\n", reason.c_str(), entries.c_str());
    std::printf("\n");
  }
  return 0;
}

struct CostOptions {
  comm::CostQuestion question;
  double bw_gbps = 0, latency_us = 0, params_billions = 0, step_ms = 0;
  double intra_bw_gbps = 0, intra_latency_us = -1;  // -1: --latency's
  std::string buckets = "1,8,16,25,100", fit_ledger, fit_run, fit_algorithm = "ring";
};

std::vector<double> parse_bucket_list(const std::string& text) {
  std::vector<double> out;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const auto comma = text.find(',', start);
    const std::string item = text.substr(start, comma - start);
    std::size_t used = 0;
    double mib = 0;
    try {
      mib = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TL_CHECK(used == item.size() && used > 0 && std::isfinite(mib), "collective-cost: --buckets " + quote_value(text) +
                                                                        ": " + quote_value(item) +
                                                                        " is not a size in MiB (e.g. 1,8,16,25,100)");
    TL_CHECK(mib >= 1.0 / 1024 && mib <= 1 << 20, "collective-cost: --buckets " + quote_value(text) + ": " +
                                                      quote_value(item) +
                                                      " MiB is outside 0.0009765625..1048576 (1 KiB to 1 TiB)");
    out.push_back(mib);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int run_collective_cost(CostOptions& o, const CLI::App& cmd) {
  comm::CostQuestion& q = o.question;
  q.buckets_mib = parse_bucket_list(o.buckets);
  const bool fitting = !o.fit_ledger.empty();
  if (fitting) {
    const bench::LedgerPoints measured = bench::allreduce_points(o.fit_ledger, o.fit_run, o.fit_algorithm);
    for (const auto& warning : measured.warnings)
      std::fprintf(stderr, "collective-cost: warning: %s\n", warning.c_str());
    std::printf("ledger %s, run %s: %s all-reduce, %d ranks, %s, %zu sizes\n", o.fit_ledger.c_str(),
                measured.run_id.c_str(), o.fit_algorithm.c_str(), measured.ranks, measured.dtype.c_str(),
                measured.points.size());
    const comm::FitAnalysis analysis = comm::analyse_fit(measured.ranks, measured.points);
    std::printf("%s", comm::fit_report(analysis, measured.points).c_str());
    if (cmd.count("--params") == 0) return 0;
    // The model questions answered with the fitted alpha and B (of the regime the message falls in).
    const double bytes = o.params_billions * 1e9 * q.bytes_per_param;
    const comm::Fit& used = analysis.one_line_fits || !analysis.split ? analysis.one_line
                            : bytes >= analysis.split_bytes           ? analysis.upper
                                                                      : analysis.lower;
    if (cmd.count("--gpus") == 0) o.question.model.ranks = measured.ranks;
    if (cmd.count("--bw") == 0) o.bw_gbps = used.model.bandwidth_Bps / 1e9;
    if (cmd.count("--latency") == 0) o.latency_us = used.model.alpha_s * 1e6;
    TL_CHECK(used.physical, "collective-cost: the fitted alpha or B is not physical; pass --bw and --latency");
    std::printf("\nwith the fitted alpha and B%s:\n",
                &used == &analysis.one_line ? "" : (&used == &analysis.upper ? " (upper regime)" : " (lower regime)"));
  } else {
    std::string missing;
    for (const char* flag : {"--gpus", "--bw", "--latency", "--params", "--step-ms"})
      if (cmd.count(flag) == 0) missing += std::string(missing.empty() ? "" : ", ") + flag;
    TL_CHECK(missing.empty(), "collective-cost: missing " + missing + " (or --fit LEDGER to fit them to measurements)");
  }
  TL_CHECK(cmd.count("--step-ms") > 0,
           "collective-cost: --step-ms is required with --params (the step the "
           "communication is compared with)");
  q.model.bandwidth_Bps = o.bw_gbps * 1e9;
  q.model.alpha_s = o.latency_us * 1e-6;
  q.params = o.params_billions * 1e9;
  q.step_s = o.step_ms * 1e-3;
  if (cmd.count("--node-size") == 0) {
    for (const char* flag : {"--intra-bw", "--intra-latency"})
      TL_CHECK(cmd.count(flag) == 0, std::string("collective-cost: ") + flag + " needs --node-size");
  } else {
    TL_CHECK(cmd.count("--intra-bw") > 0,
             "collective-cost: --node-size needs --intra-bw (the bandwidth inside a node, GB/s)");
    q.intra_bandwidth_Bps = o.intra_bw_gbps * 1e9;
    q.intra_alpha_s = (o.intra_latency_us >= 0 ? o.intra_latency_us : o.latency_us) * 1e-6;
  }
  std::printf("%s", comm::collective_cost_report(q).c_str());
  return 0;
}

struct MemoryOptions {
  std::string config;                            // set: measure one step of this train config next to the estimate
  std::map<std::string, std::string> overrides;  // config keys set by --batch, --dtype, ...
  double params = 0;
  int workers = 1;
  std::string stages = "0,1,2,3";
  StateBytes bytes;
  std::string optimizer;  // set: trainlab's own bytes for this optimiser
  double momentum = 0.9;
};

// `trainlab memory --config FILE`: one measured training step, by category, next to the estimate.
int run_memory_step(const MemoryOptions& o, const CLI::App& cmd) {
  for (const char* flag :
       {"--params", "--workers", "--zero", "--param-bytes", "--grad-bytes", "--master-bytes", "--moment-bytes"})
    TL_CHECK(cmd.count(flag) == 0, std::string("memory: ") + flag +
                                       " is for the persistent-state estimate (--params); with --config the step "
                                       "is measured");
  TrainConfig config;
  apply_config_file(config, o.config);
  for (const auto& [key, value] : o.overrides) {
    const ConfigField& field = config_field(key);
    if (cmd.count(field.flag) == 0) continue;
    const std::string text = value.empty() && field.is_bool ? "true" : value;  // a bare boolean flag
    apply_config_value(config, key, text, field.flag);
  }
  if (cmd.count("--optimizer") > 0) apply_config_value(config, "optimizer", o.optimizer, "--optimizer");
  if (cmd.count("--momentum") > 0) apply_config_value(config, "momentum", fmt::format("{}", o.momentum), "--momentum");
  validate_config(config);
  const StepMemoryReport report = bench::measure_step_memory(config, model_task(config));
  std::printf("%s", bench::step_memory_table(report).c_str());
  std::printf("%s\n", memory_summary_line(report.measured, report.device).c_str());
  return 0;
}

int run_memory(MemoryOptions& o, const CLI::App& cmd) {
  if (!o.config.empty()) return run_memory_step(o, cmd);
  TL_CHECK(cmd.count("--params") > 0,
           "memory: --params is required (the parameter count, e.g. 1e9), or --config FILE to measure a step");
  if (!o.optimizer.empty()) {
    for (const char* flag : {"--param-bytes", "--grad-bytes", "--master-bytes", "--moment-bytes"})
      TL_CHECK(cmd.count(flag) == 0, std::string("memory: --optimizer sets the bytes per parameter; drop ") + flag);
    o.bytes = trainlab_state_bytes(o.optimizer, o.momentum);
  }
  std::vector<int> stages;
  std::size_t start = 0;
  while (true) {
    const auto comma = o.stages.find(',', start);
    const std::string item = o.stages.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    TL_CHECK(item.size() == 1 && item[0] >= '0' && item[0] <= '3',
             "memory: --zero " + quote_value(o.stages) + ": " + quote_value(item) + " is not a stage 0, 1, 2 or 3");
    stages.push_back(item[0] - '0');
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::printf(
      "persistent model state per worker: %g parameters, %d worker%s; bytes per parameter: parameters %g, "
      "gradients %g, master %g, optimiser moments %g%s\n",
      o.params, o.workers, o.workers == 1 ? "" : "s", o.bytes.param, o.bytes.grad, o.bytes.master, o.bytes.moments,
      o.optimizer.empty() ? "" : (" (trainlab's own, " + o.optimizer + ")").c_str());
  std::printf("| ZeRO stage | parameters GB | gradients GB | optimiser state GB | total GB | total GiB |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int stage : stages) {
    const PersistentState s = persistent_state(o.params, o.workers, stage, o.bytes);
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", stage, s.params / 1e9, s.grads / 1e9, s.optimizer / 1e9,
                s.total() / 1e9, s.total() / (1024.0 * 1024.0 * 1024.0));
  }
  std::printf(
      "activations, workspaces, communication buffers and fragmentation are not included (seed 003: one "
      "term of a peak, not a capacity guarantee)\n");
  return 0;
}

// Each subcommand: its options, the function that declares them on the command line, and (in
// dispatch below) the call it makes.
struct TrainCommand {
  CLI::App* command = nullptr;
  std::string config_path;
  bool dry_run = false;
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
};
TrainCommand add_train(CLI::App& app) {
  TrainCommand c;
  c.command = app.add_subcommand("train",
                                 "train a registered model (--model; SmallCNN by default) on SyntheticImages or a "
                                 "data set on disk (--data)");
  c.command->add_option("--config", c.config_path, "YAML config file (flags override its keys)");
  c.command->add_flag("--dry-run", c.dry_run, "check the configuration and the outputs, print it, and train nothing");
  for (const auto& field : config_fields()) {
    auto* option = c.command->add_option(field.flag, c.values[field.key], field.help + " [" + field.allowed + "]")
                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides
    if (field.is_bool) option->expected(0, 1);
    c.options[field.key] = option;
  }
  return c;
}

struct ThroughputCommand {
  CLI::App* command = nullptr;
  ThroughputConfig config;
  std::string dtype = "f32", layout = "nchw";  // parsed into config once the command line is read
};
ThroughputCommand add_throughput(CLI::App& app) {
  ThroughputCommand c;
  c.command = app.add_subcommand(
      "throughput",
      "time a model's training steps on in-memory batches of SyntheticImages (a token model: SyntheticTokens "
      "windows, with AdamW and gradient clipping, and tokens/s); prints one JSON line (warm-up excluded)");
  add_model_options(*c.command, c.config.model, c.config.model_options);
  c.command->add_option("--backend", c.config.backend, "backend (default: the best CPU backend)");
  c.command->add_option("--dtype", c.dtype, "f32 | bf16 | f64")->check(CLI::IsMember({"f32", "bf16", "f64"}));
  c.command->add_option("--layout", c.layout, "nchw | nhwc")->check(CLI::IsMember({"nchw", "nhwc"}));
  c.command->add_option("--batch", c.config.batch, "batch size [1..65536]")->check(FiniteRange(1, 65536));
  c.command->add_option("--threads", c.config.threads, "compute threads (0: all cores) [0..1024]")
      ->check(FiniteRange(0, 1024));
  c.command->add_option("--seconds", c.config.seconds, "measured seconds after warm-up (0.01..3600]")
      ->check(FiniteRange(0.01, 3600.0));
  c.command->add_option("--warmup", c.config.warmup, "warm-up steps excluded [0..10000]")->check(FiniteRange(0, 10000));
  c.command->add_option("--seed", c.config.seed, "seed for weights and data");
  c.command->add_flag("--fuse", c.config.fuse, "conv/linear with bias and ReLU fused");
  c.command->add_flag("--forward-only", c.config.forward_only,
                      "inference: forward passes without gradients on frozen weights (onednn: each weight reordered "
                      "once into its inference primitive's layout and kept; with --fuse each conv block is one call, "
                      "conv2d_relu_max_pool2d in --profile)");
  c.command->add_flag("--cuda-graph", c.config.cuda_graph,
                      "training steps replayed from CUDA graphs (forward and backward captured after the warm-up)");
  c.command->add_flag("--profile", c.config.profile, "add per-op seconds over the measured steps (op_seconds)");
  c.command
      ->add_option("--ceiling-seconds", c.config.ceiling_seconds,
                   "seconds of GEMM products after the steps, the ceiling the step's GFLOP/s is a share of "
                   "(0: none) [0..600]")
      ->check(FiniteRange(0.0, 600.0));
  return c;
}

struct GradDumpCommand {
  CLI::App* command = nullptr;
  std::string weights, batch, out;
  GradDumpOptions options;
  std::string dtype = "f32", layout = "nchw";
};
GradDumpCommand add_grad_dump(CLI::App& app) {
  GradDumpCommand c;
  c.command = app.add_subcommand("grad-dump",
                                 "a model's loss and every parameter gradient for given weights and "
                                 "batch (safetensors in, safetensors out)");
  add_model_options(*c.command, c.options.model, c.options.model_options);
  c.command->add_option("--weights", c.weights, "the model's state dict (SmallCNN: conv1.weight, ...), f32")
      ->required()
      ->check(CLI::ExistingFile);
  c.command
      ->add_option("--batch", c.batch,
                   "tensors 'images' f32 [N, C, H, W] and 'labels' i64 [N]; a token model's: 'tokens' and "
                   "'labels' i64 [N, T]")
      ->required()
      ->check(CLI::ExistingFile);
  c.command->add_option("--out", c.out, "output: 'loss' and one gradient per parameter")
      ->required()
      ->check(NonEmptyPath());
  c.command->add_option("--backend", c.options.backend, "backend (default: the best CPU backend)");
  c.command->add_option("--dtype", c.dtype, "f32 | bf16 | f64")->check(CLI::IsMember({"f32", "bf16", "f64"}));
  c.command->add_option("--layout", c.layout, "nchw | nhwc")->check(CLI::IsMember({"nchw", "nhwc"}));
  c.command->add_flag("--fuse", c.options.fuse, "conv/linear with bias and ReLU fused");
  return c;
}

struct GemmCommand {
  CLI::App* command = nullptr;
  std::string backend, dtype = "f32";
  std::int64_t n = 2048;
  int threads = 0;
  double seconds = 3.0;
};
GemmCommand add_gemm(CLI::App& app) {
  GemmCommand c;
  c.command = app.add_subcommand("gemm",
                                 "GEMM ceiling: n x n x n products through the backend's linear kernel; "
                                 "prints one JSON line");
  c.command->add_option("--backend", c.backend, "backend (default: the best CPU backend)");
  c.command->add_option("--dtype", c.dtype, "f32 | bf16")->check(CLI::IsMember({"f32", "bf16"}));
  c.command->add_option("--size", c.n, "n [1..16384]")->check(FiniteRange(1, 16384));
  c.command->add_option("--threads", c.threads, "compute threads (0: all cores) [0..1024]")
      ->check(FiniteRange(0, 1024));
  c.command->add_option("--seconds", c.seconds, "measured seconds (0.01..3600]")->check(FiniteRange(0.01, 3600.0));
  return c;
}

struct CostCommand {
  CLI::App* command = nullptr;
  CostOptions options;
};
CostCommand add_collective_cost(CLI::App& app) {
  CostCommand c;
  c.command = app.add_subcommand("collective-cost",
                                 "the alpha-beta ring all-reduce model (seed 001): cost, overlap, buckets, "
                                 "scaling; --fit fits alpha and B to bench_allreduce rows");
  c.command->add_option("--gpus", c.options.question.model.ranks, "ranks in the ring P [2..1048576]")
      ->check(FiniteRange(2, 1 << 20));
  c.command->add_option("--bw", c.options.bw_gbps, "per-link bandwidth B in GB/s (1e9 bytes/s) (0..1e6]")
      ->check(FiniteRange(1e-6, 1e6));
  c.command->add_option("--latency", c.options.latency_us, "per-hop latency alpha in microseconds [0..1e6]")
      ->check(FiniteRange(0.0, 1e6));
  c.command->add_option("--params", c.options.params_billions, "parameters, in billions (1.3 = 1.3e9) (0..1e6]")
      ->check(FiniteRange(1e-12, 1e6));
  c.command
      ->add_option("--bytes-per-param", c.options.question.bytes_per_param,
                   "bytes per gradient element (2 for bf16/fp16, 4 for f32) (0..64]")
      ->capture_default_str()
      ->check(FiniteRange(0.125, 64.0));
  c.command->add_option("--step-ms", c.options.step_ms, "the training step without communication, ms (0..1e7]")
      ->check(FiniteRange(1e-6, 1e7));
  c.command->add_option("--buckets", c.options.buckets, "bucket sizes in MiB for the bucket table")
      ->capture_default_str();
  c.command->add_option("--scale-to", c.options.question.scale_to, "also the scaling table at this many ranks")
      ->check(FiniteRange(2, 1 << 20));
  c.command
      ->add_option("--accumulate", c.options.question.accumulate,
                   "(e) also the step with K micro-steps per all-reduce [1..65536]")
      ->check(FiniteRange(1, 65536));
  c.command
      ->add_option("--zero", c.options.question.zero_stage,
                   "(e) also ZeRO stage 0|1|2|3: bytes moved and memory per rank (16 bytes/param of state)")
      ->check(FiniteRange(0, 3));
  c.command
      ->add_option("--node-size", c.options.question.node_size,
                   "(e) also a hierarchical all-reduce with this many ranks per node (divides --gpus) [1..1048576]")
      ->check(FiniteRange(1, 1 << 20));
  c.command
      ->add_option("--intra-bw", c.options.intra_bw_gbps, "with --node-size: bandwidth inside a node, GB/s (0..1e6]")
      ->check(FiniteRange(1e-6, 1e6));
  c.command
      ->add_option("--intra-latency", c.options.intra_latency_us,
                   "with --node-size: per-hop latency inside a node, us (default: --latency) [0..1e6]")
      ->check(FiniteRange(0.0, 1e6));
  c.command->add_option("--fit", c.options.fit_ledger,
                        "fit alpha and B to a ledger's bench_allreduce rows (with --params: answer with the fit)");
  c.command->add_option("--run", c.options.fit_run, "with --fit: the run id (default: the latest all-reduce run)");
  c.command->add_option("--algorithm", c.options.fit_algorithm, "with --fit: ring | native")
      ->capture_default_str()
      ->check(CLI::IsMember({"ring", "native"}));
  return c;
}

struct MemoryCommand {
  CLI::App* command = nullptr;
  MemoryOptions options;
};
MemoryCommand add_memory(CLI::App& app) {
  MemoryCommand c;
  c.command = app.add_subcommand(
      "memory",
      "persistent training state per worker under ZeRO stages 0-3, estimated (seed 003's accounting); with --config, "
      "one training step measured by category next to the estimate");
  c.command->add_option("--config", c.options.config, "a train config (YAML) whose step to measure")
      ->check(CLI::ExistingFile);
  for (const char* key :
       {"model", "model_options", "batch", "dtype", "layout", "fuse", "recompute", "backend", "threads"}) {
    const ConfigField& field = config_field(key);
    auto* option = c.command->add_option(field.flag, c.options.overrides[key],
                                         "with --config: " + field.help + " [" + field.allowed + "]");
    if (field.is_bool) option->expected(0, 1);
  }
  c.command->add_option("--params", c.options.params, "parameters (a count: 1e9) (0..1e15]")
      ->check(FiniteRange(1e-12, 1e15));
  c.command->add_option("--workers", c.options.workers, "data-parallel workers W [1..1048576]")
      ->capture_default_str()
      ->check(FiniteRange(1, 1 << 20));
  c.command->add_option("--zero", c.options.stages, "ZeRO stages to print (0..3, comma-separated)")
      ->capture_default_str();
  c.command->add_option("--param-bytes", c.options.bytes.param, "bytes per parameter (q_p) [0..64]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 64.0));
  c.command->add_option("--grad-bytes", c.options.bytes.grad, "bytes per gradient element (q_g) [0..64]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 64.0));
  c.command->add_option("--master-bytes", c.options.bytes.master, "bytes of master copy per parameter [0..64]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 64.0));
  c.command->add_option("--moment-bytes", c.options.bytes.moments, "bytes of optimiser moments per parameter [0..64]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 64.0));
  c.command
      ->add_option("--optimizer", c.options.optimizer,
                   "instead of the byte flags: the bytes trainlab itself keeps for sgd (with --momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  c.command->add_option("--momentum", c.options.momentum, "with --optimizer sgd: 0 keeps no moment [0..0.999]")
      ->capture_default_str()
      ->check(FiniteRange(0.0, 0.999));
  return c;
}

// `trainlab models`: every registered model, its parameter count at its default input, and its keys.
int list_models() {
  for (const ModelDef* model : registered_models()) {
    const ModelInput& input = model->default_input;
    const std::string built_for = model->context
                                      ? "windows of " + std::to_string(input.sample.at(0)) + " tokens, vocabulary " +
                                            std::to_string(input.classes) + " (SyntheticTokens')"
                                      : input.str();
    std::printf("%-10s %-10s %11lld parameters (%s)  %s\n", model->name.c_str(), model->title.c_str(),
                static_cast<long long>(model_parameter_count(*model)), built_for.c_str(), model->description.c_str());
    for (const ModelKey& key : model->keys) {
      std::printf("    %-12s default %-8s [%s] %s\n", key.name.c_str(), key.default_value.c_str(), key.allowed.c_str(),
                  key.help.c_str());
    }
  }
  return 0;
}

struct InfoCommands {
  CLI::App *backends = nullptr, *models = nullptr, *reference = nullptr, *verify = nullptr, *version = nullptr;
  bool backends_ops = false;
  std::string backends_only, verify_dir;
};
InfoCommands add_info_commands(CLI::App& app) {
  InfoCommands c;
  c.backends = app.add_subcommand(
      "backends",
      "list the registered backends; --ops: what each runs natively, emulated or not at all, per op and dtype");
  c.backends->add_flag("--ops", c.backends_ops,
                       "each backend's capability table on this machine (ISA, per op and dtype: native, emulated, "
                       "unsupported, and why)");
  c.backends->add_option("--backend", c.backends_only, "only this backend");
  c.models = app.add_subcommand("models",
                                "list the registered models (--model NAME): parameters at their default input, "
                                "what each is, and its own keys (--model-options key=value,...)");
  c.reference = app.add_subcommand("config-reference",
                                   "print every train config key (flag, default, allowed values, meaning) as markdown");
  c.verify = app.add_subcommand("verify-checkpoint",
                                "check a checkpoint completely (marker, sizes, CRC-32s, headers, state) and "
                                "print what it holds; exit 0 when it loads, 2 with the problem otherwise");
  c.verify->add_option("DIR", c.verify_dir, "the checkpoint directory")->required();
  c.version = app.add_subcommand(
      "version", "print the version, compiler and engine commit, and the CPU's instruction set as trainlab uses it");
  return c;
}

// CLI11 would only say "a subcommand is required"; name the word it did not know.
std::optional<int> refuse_unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc <= 1 || argv[1][0] == '-') return std::nullopt;
  std::string allowed;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    known = known || sub->get_name() == argv[1];
    allowed += (allowed.empty() ? "" : ", ") + sub->get_name();
  }
  if (known) return std::nullopt;
  std::fprintf(stderr, "trainlab: error: unknown command '%s' (allowed: %s)\n", argv[1], allowed.c_str());
  return kExitBadInput;
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"trainlab: a C++ training-systems lab (tensor and autograd engine, backends, benchmarks)", "trainlab"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version() + " (" + git_describe() + ")");
  TrainCommand train = add_train(app);
  ThroughputCommand throughput = add_throughput(app);
  GradDumpCommand grad = add_grad_dump(app);
  GemmCommand gemm = add_gemm(app);
  CostCommand cost = add_collective_cost(app);
  MemoryCommand memory = add_memory(app);
  InfoCommands info = add_info_commands(app);
  DataCommands data_commands;
  add_data_commands(app, data_commands);
  const GenerateCommand generate = add_generate(app);
  if (const auto status = refuse_unknown_command(app, argc, argv)) return *status;
  if (const auto status = parse_command_line(app, argc, argv, "trainlab")) return *status;

  try {
    if (*train.command) return run_train(train.config_path, train.options, train.values, train.dry_run);
    if (*throughput.command) {
      throughput.config.dtype = parse_dtype(throughput.dtype);
      throughput.config.layout = parse_memory_format(throughput.layout);
      return run_throughput(throughput.config);
    }
    if (*gemm.command) {
      check_backend_name(gemm.backend);
      const DType dtype = parse_dtype(gemm.dtype);
      const auto gflops = bench::measure_gemm_gflops(gemm.backend, dtype, gemm.n, gemm.threads, gemm.seconds);
      Backend& be = get_backend(gemm.backend.empty() ? default_backend_name() : gemm.backend);
      std::printf("%s\n", bench::gemm_json(be, dtype, gemm.n, gflops).c_str());
      return 0;
    }
    if (*grad.command) {
      check_backend_name(grad.options.backend);
      grad.options.dtype = parse_dtype(grad.dtype);
      grad.options.layout = parse_memory_format(grad.layout);
      const std::size_t written = bench::grad_dump(grad.weights, grad.batch, grad.out, grad.options);
      std::printf("grad-dump: loss and %zu gradients written to %s\n", written, grad.out.c_str());
      return 0;
    }
    if (*cost.command) return run_collective_cost(cost.options, *cost.command);
    if (*generate.command) return run_generate(generate);
    if (*memory.command) return run_memory(memory.options, *memory.command);
    if (*info.backends) return list_backends(info.backends_ops, info.backends_only);
    if (*info.models) return list_models();
    if (*info.reference) {
      std::printf("%s", config_reference_markdown().c_str());
      return 0;
    }
    if (*info.verify) return run_verify_checkpoint(info.verify_dir);
    if (const auto status = run_data_command(data_commands)) return *status;
    if (*info.version) {
      std::printf("trainlab %s (%s), compiler %s\n", version().c_str(), git_describe().c_str(),
                  compiler_version().c_str());
      // The instruction set: what this build targets, what this CPU has, the cap, what runs.
      std::printf("cpu: %s\n", cpu::describe_cpu_isa().c_str());
      return 0;
    }
  } catch (const TrainingDiverged& e) {
    std::fprintf(stderr, "trainlab: error: %s\n", e.what());
    return kExitDiverged;
  } catch (const Error& e) {
    std::fprintf(stderr, "trainlab: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {  // an allocation no code above named: what it ran against
    std::fprintf(stderr, "trainlab: error: out of memory: an allocation failed (%s)\n", memory_limits_text().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainlab: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace trainlab
