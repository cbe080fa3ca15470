#include "engine/train/resume.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "engine/data/loader.h"
#include "engine/train/task.h"

namespace trainlab {

namespace {

// A driver's model, as its checkpoint holds it: its parameters by name and shape (its architecture
// is the driver's own; nothing here runs it).
class RecordedModel : public Module {
 public:
  RecordedModel(const NamedTensors& tensors, const InitOptions& init) {
    for (const auto& [name, tensor] : tensors) register_parameter(name, tensor.to(*init.backend).clone());
  }
  Tensor forward(const Tensor&) override { throw Error("a driver's model, rebuilt from its checkpoint, does not run"); }
  void set_recompute(Recompute) override {}
};

void check_finite(const Checkpoint& checkpoint, const std::string& owner) {
  NamedTensors tensors = checkpoint.model;
  for (const auto& [name, tensor] : checkpoint.optimizer.tensors) tensors.emplace_back(name, tensor);
  for (const auto& [name, tensor] : tensors) {
    const std::vector<double> values = tensor.to(DType::f64).to_vector<double>();
    const auto bad = std::find_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); });
    TL_CHECK(bad == values.end(), owner + ": tensor '" + name + "' holds " + std::to_string(*bad) + " at element " +
                                      std::to_string(bad - values.begin()) +
                                      " (resume anyway with --allow-nonfinite-checkpoint)");
  }
}

}  // namespace

ResumedCounters restore_run(const Checkpoint& checkpoint, const std::string& owner, const TrainConfig& config,
                            RunParts& run, Generator& generator, DataParallel* parallel) {
  ResumedCounters counters;
  counters.step = checkpoint.trainer.integer("step", owner);
  TL_CHECK(counters.step >= 0, owner + " is at step " + std::to_string(counters.step) + " (a step count is >= 0)");
  // Weights or optimiser state holding NaN or inf would only propagate: refused unless asked for.
  if (!config.checkpoint.allow_nonfinite_checkpoint) check_finite(checkpoint, owner);
  try {
    {
      FullParameters whole(parallel);  // ZeRO-3: loaded whole, then this rank's shard kept
      run.model->load_state_dict(checkpoint.model);
    }
    run.optimizer->load_state_dict(parallel != nullptr ? parallel->shard_optimizer_state(checkpoint.optimizer)
                                                       : checkpoint.optimizer);
    run.scheduler->load_state_dict(checkpoint.scheduler);
    generator.set_state_string(checkpoint.trainer.string("generator", owner));
    // A checkpoint from before dropout's stream was kept had drawn nothing from it.
    if (checkpoint.trainer.integers.count("dropout_offset") > 0) {
      const std::int64_t offset = checkpoint.trainer.integer("dropout_offset", owner);
      TL_CHECK(offset >= 0, "dropout_offset " + std::to_string(offset) + " is negative (it counts draws)");
      dropout_stream().offset = static_cast<std::uint64_t>(offset);
    }
    if (run.scaler) {
      StateDict scaler;
      scaler.numbers["scale"] = checkpoint.trainer.number("scaler.scale", owner);
      for (const char* key : {"growth_tracker", "skipped_steps", "growth_interval"})
        scaler.integers[key] = checkpoint.trainer.integer(std::string("scaler.") + key, owner);
      run.scaler->load_state_dict(scaler);
      counters.scaler_skipped = run.scaler->skipped_steps();
    }
  } catch (const Error& e) {
    throw Error(owner + ": " + e.what());
  }
  counters.nonfinite_total = checkpoint.trainer.integers.count("nonfinite_skipped")
                                 ? checkpoint.trainer.integer("nonfinite_skipped", owner)
                                 : 0;
  TL_CHECK(counters.nonfinite_total >= 0 && counters.nonfinite_total <= counters.step,
           owner + ": nonfinite_skipped " + std::to_string(counters.nonfinite_total) + " is outside 0.." +
               std::to_string(counters.step) + " (the steps taken)");
  // The learning rate the state records is the schedule's at that step: a state.json edited to
  // another value is refused, not obeyed.
  const double saved_lr = checkpoint.optimizer.number("lr", owner + " optimizer");
  TL_CHECK(saved_lr == run.scheduler->current_lr(),
           owner + ": the optimizer's lr " + std::to_string(saved_lr) + " is not the schedule's at step " +
               std::to_string(counters.step) + " (" + std::to_string(run.scheduler->current_lr()) + ")");
  // Every step either updated the weights or was skipped (the f16 scaler, or --on-nonfinite skip):
  // a step count rewound against the optimiser's own count is refused.
  if (run.optimizer->updates() >= 0) {
    const std::int64_t expected = counters.step - counters.scaler_skipped - counters.nonfinite_total;
    TL_CHECK(run.optimizer->updates() == expected,
             owner + " is inconsistent: step " + std::to_string(counters.step) + " with " +
                 std::to_string(counters.scaler_skipped + counters.nonfinite_total) +
                 " skipped, but the optimizer has applied " + std::to_string(run.optimizer->updates()) + " updates");
  }
  return counters;
}

void check_position(std::int64_t step, std::int64_t accumulate, std::int64_t loader_batches, std::int64_t schedule_step,
                    const std::string& owner) {
  TL_CHECK(loader_batches == step * accumulate && schedule_step == step,
           owner + " is inconsistent: step " + std::to_string(step) + " of " + std::to_string(accumulate) +
               " micro-steps, but the loader has consumed " + std::to_string(loader_batches) +
               " batches and the schedule is at step " + std::to_string(schedule_step));
}

TrainConfig checkpoint_config(const Checkpoint& checkpoint, const std::string& owner) {
  std::set<std::string> known;
  for (const auto& field : config_fields()) known.insert(field.key);
  TrainConfig config;
  for (const auto& [name, value] : checkpoint.trainer.strings) {
    if (name.rfind("config.", 0) != 0 || value.empty()) continue;
    const std::string key = name.substr(7);
    if (known.count(key) == 0) continue;
    apply_config_value(config, key, value, owner + " (state.json " + name + ")");
  }
  return config;
}

void validate_checkpoint(const Checkpoint& checkpoint, const std::string& dir) {
  const std::string owner = "checkpoint '" + dir + "'";
  TrainConfig config = checkpoint_config(checkpoint, owner);
  // Rebuilt where any machine can: the reference backend (it runs every dtype and layout), no
  // device-only modes, no data set opened, nothing written.
  config.execution.backend = "reference";
  config.execution.pin_memory = false;
  config.execution.tf32 = false;
  config.execution.cuda_graph = false;
  config.execution.threads = 1;
  config.checkpoint.allow_nonfinite_checkpoint = false;
  const std::string model = checkpoint.trainer.strings.count("model") ? checkpoint.trainer.strings.at("model") : "";
  TrainTask task;
  const ModelDef* def = nullptr;
  for (const ModelDef* registered : registered_models()) {
    if (model.empty() ? registered->name == config.model.name
                      : (registered->title == model || registered->name == model))
      def = registered;
  }
  if (def != nullptr) {
    // A registered model: rebuilt for the input its tensors say (its default input where they do
    // not: loading then names what differs).
    const bool fused = config.execution.fuse;
    const ModelOptions options = config.model.options;
    std::optional<ModelInput> input = def->input_of ? def->input_of(checkpoint.model, options) : std::nullopt;
    const ModelInput built_for = input.value_or(default_input_for(*def, config.model.options));
    task.make_model = [def, fused, options, built_for](const InitOptions& init) {
      std::shared_ptr<Module> m = build_model(*def, init, built_for, options);
      m->set_fused(fused);
      return m;
    };
  } else {
    const NamedTensors& saved = checkpoint.model;
    task.make_model = [&saved](const InitOptions& init) { return std::make_shared<RecordedModel>(saved, init); };
  }
  Generator generator(config.seed);
  RunParts run = make_run(config, task, generator);
  const ResumedCounters counters = restore_run(checkpoint, owner, config, run, generator);
  TL_CHECK(counters.step <= config.steps, owner + " is at step " + std::to_string(counters.step) + ", beyond the " +
                                              std::to_string(config.steps) + " steps its run was configured for");
  // The loader position, against the run it records (the data set itself is not opened).
  const StateDict& loader = checkpoint.loader;
  const std::string loader_owner = owner + ": data loader state";
  const std::string problem = loader_state_problem(loader);
  TL_CHECK(problem.empty(), loader_owner + ": " + problem);
  const std::int64_t batch = loader.integer("batch_size", loader_owner);
  TL_CHECK(batch == config.batch, loader_owner + ": batch_size " + std::to_string(batch) + " is not the run's batch " +
                                      std::to_string(config.batch));
  const std::int64_t size = loader.integer("dataset_size", loader_owner);
  TL_CHECK(size <= config.data.train_samples, loader_owner + ": dataset_size " + std::to_string(size) +
                                                  " is more than the run's train_samples " +
                                                  std::to_string(config.data.train_samples));
  for (const char* flag : {"shuffle", "drop_last"}) {
    const std::int64_t value = loader.integer(flag, loader_owner);
    TL_CHECK(value == 0 || value == 1, loader_owner + ": " + flag + " " + std::to_string(value) + " is not 0 or 1");
  }
  const std::string& seed = loader.string("seed", loader_owner);
  TL_CHECK(seed == std::to_string(config.seed),
           loader_owner + ": seed " + quote_value(seed) + " is not the run's seed " + std::to_string(config.seed));
  check_position(counters.step, config.execution.accumulate, loader_state_batches(loader), run.scheduler->last_step(),
                 owner);
}

}  // namespace trainlab
