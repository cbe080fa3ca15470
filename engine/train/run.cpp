#include "engine/train/run.h"

#include "backends/registry.h"

namespace trainlab {

Backend& run_backend(const ExecutionConfig& execution) {
  return get_backend(execution.backend.empty() ? default_backend_name() : execution.backend);
}

namespace {
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o, const NamedTensors& parameters) {
  if (o.kind == OptimizerKind::sgd)
    return std::make_unique<SGD>(parameters, SgdOptions{o.lr, o.momentum, 0.0, o.weight_decay, false});
  AdamWOptions options;
  options.lr = o.lr;
  options.weight_decay = o.weight_decay;
  options.beta1 = o.beta1;
  options.beta2 = o.beta2;
  return std::make_unique<AdamW>(parameters, options);
}

std::unique_ptr<LRScheduler> make_scheduler(const OptimizerConfig& o, Optimizer& optimizer, std::int64_t steps) {
  if (o.schedule == ScheduleKind::warmup_cosine)
    return std::make_unique<WarmupCosineLR>(optimizer, o.lr, o.warmup_steps, steps, o.min_lr);
  return std::make_unique<ConstantLR>(optimizer, o.lr, o.warmup_steps);
}
}  // namespace

RunParts make_run(const TrainConfig& config, const TrainTask& task, Generator& generator, DataParallel* parallel,
                  std::int64_t eager_steps_before_capture) {
  const ExecutionConfig& x = config.execution;
  RunParts run;
  run.backend = &run_backend(x);
  Backend& backend = *run.backend;
  TL_CHECK(!x.pin_memory || backend.pinned_uploads() != nullptr,
           "pin_memory needs a CUDA backend (it page-locks loader buffers for host-to-device copies); backend '" +
               backend.name() + "' runs on the CPU, where there is no copy");
  TL_CHECK(
      !x.tf32 || backend.math_modes() != nullptr,
      "tf32 needs a CUDA backend (TF32 is a tensor-core math mode); backend '" + backend.name() + "' runs on the CPU");
  if (x.threads > 0) backend.set_num_threads(x.threads);
  if (MathModes* math = backend.math_modes()) math->set_tf32(x.tf32);

  const DType dtype = x.dtype;
  run.param_dtype = dtype == DType::bf16 || dtype == DType::f16 ? DType::f32 : dtype;
  TL_CHECK(task.make_model != nullptr, "run: the task needs a model factory");
  run.model = task.make_model(InitOptions{&generator, run.param_dtype, &backend});
  TL_CHECK(run.model != nullptr, "run: the task's model factory returned no model");
  run.model->set_recompute(x.recompute);
  // Data parallel: the replicas start from rank 0's parameters, and with sharded optimiser state
  // (zero: 1) this rank's optimiser is built over its pieces of them.
  if (parallel != nullptr) {
    // ZeRO-3 gathers the parameters by the model's parts (the whole model as one unit without them).
    if (parallel->shards_parameters()) {
      std::vector<std::vector<std::string>> units;
      for (const ModelPart& part : run.model->parts()) units.push_back(part.parameters);
      parallel->set_parameter_units(units);
    }
    parallel->attach(run.model->named_parameters());
  }
  const bool sharded = parallel != nullptr && parallel->shards_optimizer_state();
  run.optimizer = make_optimizer(
      config.optimizer, parallel != nullptr ? parallel->optimizer_parameters() : run.model->named_parameters());
  // The model's parameter groups: weight decay where it says (a sharded piece, "name[begin:end]",
  // as its parameter).
  std::vector<bool> decay;
  for (const auto& [name, tensor] : run.optimizer->params())
    decay.push_back(run.model->decays(name.substr(0, name.find('['))));
  run.optimizer->set_decay_mask(std::move(decay));
  // Dropout draws from the run's own stream (each rank its own), from its start; a resume moves it
  // to where the checkpoint left it.
  const auto rank = static_cast<std::uint64_t>(parallel != nullptr ? parallel->rank() : 0);
  dropout_stream() = CounterStream{mix_seed(mix_seed(config.seed, 0xD50F), rank), 0};
  // Mixed precision: the optimiser writes bf16/f16 working copies of the weights in its step, and
  // autocast uses them instead of casting the f32 masters every forward. (Not with sharded state:
  // a rank's optimiser sees only its pieces, and autocast casts the gathered parameters.)
  if (run.param_dtype != dtype && !sharded) run.optimizer->keep_working_copies(dtype);
  run.scheduler = make_scheduler(config.optimizer, *run.optimizer, config.steps);
  if (dtype == DType::f16) {
    GradScalerOptions scaler_options;
    scaler_options.init_scale = x.loss_scale_init;
    scaler_options.growth_interval = x.loss_scale_growth_interval;
    run.scaler = std::make_unique<GradScaler>(scaler_options);
  }
  StepOptions step;
  step.dtype = dtype;
  step.layout = x.layout;
  step.accumulate = x.accumulate;
  step.cuda_graph = x.cuda_graph;
  step.eager_steps_before_capture = eager_steps_before_capture;
  step.grad_clip = config.optimizer.grad_clip;
  if (task.train_data != nullptr) step.num_classes = task.train_data->num_classes();
  run.runner = std::make_unique<StepRunner>(backend, *run.model, *run.optimizer, step, run.scaler.get(), parallel);
  return run;
}

}  // namespace trainlab
