#include "bench/measure/grad_dump.h"

#include "engine/io/fileio.h"

#include "backends/registry.h"
#include "engine/core/autocast.h"
#include "engine/io/safetensors.h"

namespace trainlab::bench {

namespace {
const Tensor& find(const NamedTensors& tensors, const std::string& name, const std::string& where) {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return tensor;
  }
  throw Error(where + ": no tensor named '" + name + "'");
}
}  // namespace

NamedTensors model_gradients(const NamedTensors& weights, const NamedTensors& batch, const GradDumpOptions& options,
                             StepPlan* plan) {
  Backend& backend = get_backend(options.backend.empty() ? default_backend_name() : options.backend);
  const DType dtype = options.dtype;
  const std::string dtype_text = dtype_name(dtype);
  TL_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64,
           "grad-dump: dtype must be f32, bf16 or f64, got " + dtype_text);
  const DType param_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;

  // The batch: 'images' f32 [N, sample...] and 'labels' i64 [N] for an image model; 'tokens' i64
  // [N, T] and 'labels' i64 [N, T] (the next token at every position) for a token model.
  const ModelDef& def = find_model(options.model);
  const bool tokens = def.context != nullptr;
  const Tensor& inputs = find(batch, tokens ? "tokens" : "images", "batch");
  const Tensor& labels = find(batch, "labels", "batch");
  if (tokens) {
    TL_CHECK(inputs.dtype() == DType::i64 && inputs.dim() == 2, "batch: 'tokens' must be i64 [N, T], got " +
                                                                    std::string(dtype_name(inputs.dtype())) + " " +
                                                                    shape_str(inputs.shape()));
    TL_CHECK(labels.dtype() == DType::i64 && labels.shape() == inputs.shape(),
             "batch: 'labels' must be i64 " + shape_str(inputs.shape()) + " (the next token at every position), got " +
                 std::string(dtype_name(labels.dtype())) + " " + shape_str(labels.shape()));
  } else {
    TL_CHECK(inputs.dtype() == DType::f32 && inputs.dim() >= 2, "batch: 'images' must be f32 [N, ...sample], got " +
                                                                    std::string(dtype_name(inputs.dtype())) + " " +
                                                                    shape_str(inputs.shape()));
    TL_CHECK(labels.dtype() == DType::i64 && labels.dim() == 1 && labels.size(0) == inputs.size(0),
             "batch: 'labels' must be i64 [" + std::to_string(inputs.size(0)) + "], got " +
                 std::string(dtype_name(labels.dtype())) + " " + shape_str(labels.shape()));
  }

  // The model for the batch's sample shape and the classes its weights were trained for.
  ModelInput input = def.default_input;
  if (def.input_of) {
    if (auto saved = def.input_of(weights, options.model_options)) input = *saved;
  }
  input.sample = Shape(inputs.shape().begin() + 1, inputs.shape().end());
  Generator unused(0);  // the weights are loaded, not drawn
  std::shared_ptr<Module> built =
      build_model(def, InitOptions{&unused, param_dtype, &backend}, input, options.model_options);
  Module& model = *built;
  model.set_fused(options.fuse);
  StepOptions planned;
  planned.dtype = dtype;
  planned.layout = options.layout;
  const StepPlan planned_ops = plan_step(backend, model, planned);  // refuses what the backend cannot run
  if (plan != nullptr) *plan = planned_ops;
  NamedTensors moved;
  for (const auto& [name, tensor] : weights) moved.emplace_back(name, tensor.to(backend));
  model.load_state_dict(moved);

  Tensor loss;
  {
    AutocastGuard autocast(dtype == DType::bf16 ? DType::bf16 : DType::f32);
    if (tokens) {
      loss = cross_entropy(model.forward(inputs.to(backend)), labels.to(backend).reshape({-1}));
    } else {
      Tensor x = inputs.to(backend).contiguous(options.layout);
      if (param_dtype != DType::f32) x = x.to(param_dtype);
      loss = cross_entropy(model.forward(x), labels.to(backend));
    }
  }
  loss.backward();
  NamedTensors out{{"loss", loss.detach().to(param_dtype == DType::f64 ? DType::f64 : DType::f32)}};
  for (const auto& [name, param] : model.named_parameters()) {
    TL_CHECK(param.grad().defined(), "grad-dump: no gradient reached '" + name + "'");
    out.emplace_back(name, param.grad());
  }
  return out;
}

std::size_t grad_dump(const std::string& weights_path, const std::string& batch_path, const std::string& out_path,
                      const GradDumpOptions& options) {
  check_output_file(out_path, "grad-dump --out");
  Backend& host = get_backend("reference");  // files are read to the host, then moved
  const NamedTensors weights = read_safetensors(weights_path, host).tensors;
  const NamedTensors batch = read_safetensors(batch_path, host).tensors;
  NamedTensors result;
  StepPlan plan;
  try {
    result = model_gradients(weights, batch, options, &plan);
  } catch (const Unsupported&) {
    throw;  // about the backend, not the files
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (weights '" + weights_path + "', batch '" + batch_path + "')");
  }
  write_safetensors(out_path, result,
                    {{"tool", "trainlab grad-dump"},
                     {"model", find_model(options.model).name},
                     {"backend", options.backend.empty() ? default_backend_name() : options.backend},
                     {"dtype", dtype_name(options.dtype)},
                     {"layout", memory_format_name(options.layout)},
                     {"fuse", options.fuse ? "true" : "false"},
                     {"isa", plan.isa},
                     {"emulated", plan.emulated()}});
  return result.size() - 1;
}

}  // namespace trainlab::bench
