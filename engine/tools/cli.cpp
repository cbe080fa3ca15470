#include "engine/tools/cli.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include "engine/tools/cli_parse.h"

#include "backends/registry.h"
#include "engine/config.h"
#include "engine/grad_dump.h"
#include "engine/throughput.h"
#include "engine/trainer.h"
#include "engine/version.h"

namespace trainlab {

namespace {

constexpr int kExitBadInput = 2;

int run_train(const std::string& config_path, const std::map<std::string, CLI::Option*>& options,
              const std::map<std::string, std::string>& values) {
  TrainConfig config;
  if (!config_path.empty()) apply_config_file(config, config_path);
  for (const auto& field : config_fields()) {
    const CLI::Option* option = options.at(field.key);
    if (option->count() == 0) continue;
    std::string text = values.at(field.key);
    if (text.empty() && field.allowed == "true | false") text = "true";  // a bare boolean flag
    apply_config_value(config, field.key, text, field.flag);
  }
  validate_config(config);
  Trainer trainer(config);
  const TrainResult result = trainer.train(&std::cout);
  return result.last_step == (config.stop_at > 0 ? config.stop_at : config.steps) ? 0 : 1;
}

int run_throughput(const ThroughputConfig& config) {
  check_backend_name(config.backend);
  std::printf("%s\n", throughput_json(measure_throughput(config)).c_str());
  return 0;
}

int list_backends() {
  const std::string fallback = default_backend_name();
  for (const auto& info : registered_backends()) {
    std::printf("%-10s %-5s %s%s\n", info.name.c_str(), device_type_name(info.device_type), info.description.c_str(),
                info.name == fallback ? " (default)" : "");
  }
  return 0;
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{"trainlab: a C++ training-systems lab (tensor and autograd engine, backends, benchmarks)", "trainlab"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version() + " (" + git_describe() + ")");

  auto* train = app.add_subcommand("train", "train SmallCNN on SyntheticImages");
  std::string config_path;
  train->add_option("--config", config_path, "YAML config file (flags override its keys)");
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
  for (const auto& field : config_fields()) {
    auto* option = train->add_option(field.flag, values[field.key], field.help + " [" + field.allowed + "]")
                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag overrides
    if (field.allowed == "true | false") option->expected(0, 1);
    options[field.key] = option;
  }
  auto* throughput = app.add_subcommand(
      "throughput", "time SmallCNN training steps on in-memory batches; prints one JSON line (warm-up excluded)");
  ThroughputConfig tp;
  throughput->add_option("--backend", tp.backend, "backend (default: the best CPU backend)");
  throughput->add_option("--dtype", tp.dtype, "f32 | bf16 | f64")->check(CLI::IsMember({"f32", "bf16", "f64"}));
  throughput->add_option("--layout", tp.layout, "nchw | nhwc")->check(CLI::IsMember({"nchw", "nhwc"}));
  throughput->add_option("--batch", tp.batch, "batch size [1..65536]")->check(CLI::Range(1, 65536));
  throughput->add_option("--threads", tp.threads, "compute threads (0: all cores) [0..1024]")
      ->check(CLI::Range(0, 1024));
  throughput->add_option("--seconds", tp.seconds, "measured seconds after warm-up (0.01..3600]")
      ->check(CLI::Range(0.01, 3600.0));
  throughput->add_option("--warmup", tp.warmup, "warm-up steps excluded [0..10000]")->check(CLI::Range(0, 10000));
  throughput->add_option("--seed", tp.seed, "seed for weights and data");
  throughput->add_flag("--fuse", tp.fuse, "conv/linear with bias and ReLU fused");
  throughput->add_flag("--forward-only", tp.forward_only, "inference: forward passes without gradients");
  throughput->add_flag("--profile", tp.profile, "add per-op seconds over the measured steps (op_seconds)");
  auto* grad = app.add_subcommand("grad-dump",
                                  "SmallCNN's loss and every parameter gradient for given weights and "
                                  "batch (safetensors in, safetensors out)");
  std::string grad_weights, grad_batch, grad_out;
  GradDumpOptions grad_options;
  grad->add_option("--weights", grad_weights, "SmallCNN state dict (conv1.weight, ...), f32")
      ->required()
      ->check(CLI::ExistingFile);
  grad->add_option("--batch", grad_batch, "tensors 'images' f32 [N, 3, 32, 32] and 'labels' i64 [N]")
      ->required()
      ->check(CLI::ExistingFile);
  grad->add_option("--out", grad_out, "output: 'loss' and one gradient per parameter")->required();
  grad->add_option("--backend", grad_options.backend, "backend (default: the best CPU backend)");
  grad->add_option("--dtype", grad_options.dtype, "f32 | bf16 | f64")->check(CLI::IsMember({"f32", "bf16", "f64"}));
  grad->add_option("--layout", grad_options.layout, "nchw | nhwc")->check(CLI::IsMember({"nchw", "nhwc"}));
  grad->add_flag("--fuse", grad_options.fuse, "conv/linear with bias and ReLU fused");
  auto* gemm = app.add_subcommand("gemm",
                                  "GEMM ceiling: n x n x n products through the backend's linear kernel; "
                                  "prints one JSON line");
  std::string gemm_backend, gemm_dtype = "f32";
  std::int64_t gemm_n = 2048;
  int gemm_threads = 0;
  double gemm_seconds = 3.0;
  gemm->add_option("--backend", gemm_backend, "backend (default: the best CPU backend)");
  gemm->add_option("--dtype", gemm_dtype, "f32 | bf16")->check(CLI::IsMember({"f32", "bf16"}));
  gemm->add_option("--size", gemm_n, "n [1..16384]")->check(CLI::Range(1, 16384));
  gemm->add_option("--threads", gemm_threads, "compute threads (0: all cores) [0..1024]")->check(CLI::Range(0, 1024));
  gemm->add_option("--seconds", gemm_seconds, "measured seconds (0.01..3600]")->check(CLI::Range(0.01, 3600.0));
  auto* backends = app.add_subcommand("backends", "list the registered backends");
  auto* version_cmd = app.add_subcommand("version", "print the version, compiler and engine commit");

  // CLI11 would only say "a subcommand is required"; name the word it did not know.
  if (argc > 1 && argv[1][0] != '-') {
    std::string allowed;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
      allowed += (allowed.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "trainlab: error: unknown command '%s' (allowed: %s)\n", argv[1], allowed.c_str());
      return kExitBadInput;
    }
  }
  if (const auto status = parse_command_line(app, argc, argv, "trainlab")) return *status;

  try {
    if (*train) return run_train(config_path, options, values);
    if (*throughput) return run_throughput(tp);
    if (*gemm) {
      check_backend_name(gemm_backend);
      const auto gflops = measure_gemm_gflops(gemm_backend, gemm_dtype, gemm_n, gemm_threads, gemm_seconds);
      Backend& be = get_backend(gemm_backend.empty() ? default_backend_name() : gemm_backend);
      std::printf("%s\n", gemm_json(be, gemm_dtype, gemm_n, gflops).c_str());
      return 0;
    }
    if (*grad) {
      check_backend_name(grad_options.backend);
      const std::size_t written = grad_dump(grad_weights, grad_batch, grad_out, grad_options);
      std::printf("grad-dump: loss and %zu gradients written to %s\n", written, grad_out.c_str());
      return 0;
    }
    if (*backends) return list_backends();
    if (*version_cmd) {
      std::printf("trainlab %s (%s), compiler %s\n", version().c_str(), git_describe().c_str(),
                  compiler_version().c_str());
      return 0;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "trainlab: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainlab: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace trainlab
