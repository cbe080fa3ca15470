#include "bench/measure/memory_report.h"

#include <fmt/format.h>

#include "backends/host_memory.h"
#include "engine/train/trainer.h"

namespace trainlab::bench {

StepMemoryReport measure_step_memory(TrainConfig config, const TrainTask& task, std::int64_t warmup) {
  TL_CHECK(warmup >= 1, fmt::format("memory: at least one warm-up step is needed (the optimiser's state and working "
                                    "copies are made by the first), got {}",
                                    warmup));
  config.steps = warmup + 1;
  config.stop_at = 0;
  config.reporting.warmup = warmup;
  config.reporting.eval_every = 0;
  config.reporting.eval_at_end = false;
  config.checkpoint.save.clear();
  config.checkpoint.save_every = 0;
  config.checkpoint.resume.clear();
  config.reporting.trace.clear();
  config.data.train_samples =
      std::max(config.data.train_samples, config.batch * config.steps * config.execution.accumulate);
  Trainer trainer(config, task);
  const TrainResult result = trainer.train(nullptr);

  StepMemoryReport r;
  r.config = config;
  r.model = task.model_name;
  r.parameters = trainer.model().num_parameters();
  TL_CHECK(r.parameters > 0, "memory: the model " + task.model_name + " has no parameters to train");
  r.measured = result.memory;
  r.device = result.memory_device;
  r.backend = trainer.backend().name();
  const DType param_dtype = trainer.model().parameters().front().dtype();  // f32 masters under autocast
  ChainShape shape;
  shape.batch = config.batch;
  shape.dtype = config.execution.dtype;
  shape.channels_last = config.execution.layout == MemoryFormat::channels_last;
  const std::vector<ChainOp> chain = trainer.model().memory_chain(shape, trainer.backend());
  r.described = !chain.empty();
  r.estimate = estimate_training_memory(r.parameters, param_dtype, config.execution.dtype,
                                        optimizer_name(config.optimizer.kind), config.optimizer.momentum, chain);
  // The model's buffers (batch norm's running statistics) live with its parameters and count as them.
  for (const auto& [name, buffer] : trainer.model().named_buffers())
    r.estimate.parameters += static_cast<double>(buffer.numel() * dtype_size(buffer.dtype()));
  return r;
}

std::string step_memory_table(const StepMemoryReport& r) {
  auto mib = [](double bytes) { return fmt::format("{:.2f}", bytes / (1024.0 * 1024.0)); };
  auto row = [&](MemoryCategory c, double estimated, bool estimable) {
    const double measured = static_cast<double>(r.measured.peak_of(c));
    std::string diff = "-";
    if (estimable && measured > 0) diff = fmt::format("{:+.1f}%", 100.0 * (estimated - measured) / measured);
    if (estimable && measured == 0) diff = estimated == 0 ? "exact" : "measured none";
    return fmt::format("| {} | {} | {} | {} |\n", memory_category_name(c), estimable ? mib(estimated) : "-",
                       mib(measured), diff);
  };
  const TrainingMemoryEstimate& e = r.estimate;
  std::string out = fmt::format(
      "{} ({} parameters) on {}, batch {}, {}, {}{}{}, optimizer {}: one training step after {} warm-up steps, "
      "tensor bytes by category (MiB; measured: each category's own peak over the step)\n\n",
      r.model, r.parameters, r.backend, r.config.batch, dtype_name(r.config.execution.dtype),
      memory_format_name(r.config.execution.layout), r.config.execution.fuse ? ", fused" : "",
      r.config.execution.recompute != Recompute::none
          ? std::string(", recompute ") + recompute_name(r.config.execution.recompute)
          : "",
      optimizer_name(r.config.optimizer.kind), r.config.reporting.warmup);
  out += "| category | estimated | measured peak | estimate vs measured |\n|---|---|---|---|\n";
  out += row(MemoryCategory::parameters, e.parameters, true);
  out += row(MemoryCategory::gradients, e.gradients, true);
  out += row(MemoryCategory::optimizer_state, e.optimizer_state, true);
  out += row(MemoryCategory::working_copies, e.working_copies, true);
  out += row(MemoryCategory::activations, e.chain.activation_peak, r.described);
  out += row(MemoryCategory::workspaces, e.chain.workspace_peak, r.described);
  out += row(MemoryCategory::communication, 0, false);
  out += row(MemoryCategory::data, 0, false);
  out += row(MemoryCategory::other, 0, false);
  const auto data_at_peak =
      static_cast<double>(r.measured.at_peak[static_cast<std::size_t>(index(MemoryCategory::data))]);
  const double measured_peak = static_cast<double>(r.measured.total_peak) - data_at_peak;
  out += "\n";
  if (r.described) {
    out += fmt::format(
        "step peak without the input batches: estimated {} MiB in {} (at {}), measured {} MiB in {} ({:+.1f}%)\n",
        mib(e.peak()), e.peak_phase(),
        e.chain.backward_peak > e.chain.forward_peak ? e.chain.backward_peak_at : e.chain.forward_peak_at,
        mib(measured_peak), memory_phase_name(r.measured.peak_phase),
        measured_peak > 0 ? 100.0 * (e.peak() - measured_peak) / measured_peak : 0.0);
    out += fmt::format(
        "activations: {} MiB saved for backward when the forward ends (measured {} MiB), {} MiB at most during it "
        "(at {}); backward workspaces at most at {}\n",
        mib(e.chain.saved), mib(static_cast<double>(r.measured.activations_after_forward)), mib(e.chain.forward_peak),
        e.chain.forward_peak_at, e.chain.workspace_peak_at);
    if (r.config.execution.recompute != Recompute::none) {
      out += fmt::format(
          "recompute {}: the recomputed blocks keep only their inputs after the forward and are made again in "
          "backward; activations at most {} MiB over the step\n",
          recompute_name(r.config.execution.recompute), mib(e.chain.activation_peak));
    }
  } else {
    out += fmt::format(
        "{} does not describe its forward (Module::memory_chain): activations and workspaces are "
        "measured only; step peak measured {} MiB in {}\n",
        r.model, mib(measured_peak), memory_phase_name(r.measured.peak_phase));
  }
  out +=
      "not counted: backend-internal scratch (oneDNN scratchpads, cuBLAS workspaces), the allocator's caching "
      "and fragmentation\n";
  return out;
}

}  // namespace trainlab::bench
