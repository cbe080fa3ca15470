#include "models/mlp/mlp.h"

#include <optional>

#include "engine/core/ops.h"

namespace trainlab {

Mlp::Mlp(const InitOptions& init, std::int64_t inputs, std::int64_t hidden, std::int64_t classes) {
  fc1 = std::make_shared<Linear>(inputs, hidden, init);
  fc2 = std::make_shared<Linear>(hidden, classes, init);
  add("flatten", std::make_shared<Flatten>());
  add("fc1", fc1);
  add("relu", std::make_shared<ReLU>());
  add("fc2", fc2);
}

Tensor Mlp::forward(const Tensor& x) {
  TL_CHECK(x.dim() >= 2 && x.numel() / x.size(0) == fc1->weight.size(1),
           "MLP: input must be [N, ...] with " + std::to_string(fc1->weight.size(1)) + " values per sample, got " +
               shape_str(x.shape()));
  return (*fc2)(relu((*fc1)(x.dim() == 2 ? x : x.flatten(1))));
}

void Mlp::split_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  fc1->split(LinearSplit::columns, group, "fc1");
  fc2->split(LinearSplit::rows, group, "fc2");
}

double Mlp::flop_per_sample(bool forward_only) const {
  const double forward = 2.0 * static_cast<double>(fc1->weight.numel() + fc2->weight.numel());
  // backward: the weights' gradients of both layers, the data gradient of fc2 only
  return forward_only ? forward : forward + forward + 2.0 * static_cast<double>(fc2->weight.numel());
}

namespace {

std::int64_t flat(const ModelInput& input) {
  std::int64_t n = 1;
  for (std::int64_t d : input.sample) n *= d;
  return n;
}

}  // namespace

ModelDef mlp_model() {
  ModelDef def;
  def.name = "mlp";
  def.title = "MLP";
  def.description = "the sample flattened, one hidden layer (ReLU), a linear head";
  def.keys = {{"hidden", "128", "1..65536", "hidden units"}};
  def.default_input = ModelInput{{3, 32, 32}, 10};
  def.check = [](const ModelInput& input, const ModelOptions& options) {
    (void)model_option_int(mlp_model(), options, "hidden", 1, 65536);
    TL_CHECK(!input.sample.empty() && flat(input) >= 1 && flat(input) <= (std::int64_t{1} << 26),
             "MLP needs samples of 1..67108864 values");
    TL_CHECK(input.classes >= 2 && input.classes <= (std::int64_t{1} << 24), "MLP needs 2..16777216 classes");
  };
  def.make = [](const InitOptions& init, const ModelInput& input, const ModelOptions& options) {
    const std::int64_t hidden = model_option_int(mlp_model(), options, "hidden", 1, 65536);
    return std::make_shared<Mlp>(init, flat(input), hidden, input.classes);
  };
  def.input_of = [](const NamedTensors& tensors, const ModelOptions&) -> std::optional<ModelInput> {
    const Tensor *fc1 = nullptr, *fc2 = nullptr;
    for (const auto& [name, t] : tensors) {
      if (name == "fc1.weight" && t.dim() == 2) fc1 = &t;
      if (name == "fc2.weight" && t.dim() == 2) fc2 = &t;
    }
    if (fc1 == nullptr || fc2 == nullptr) return std::nullopt;
    return ModelInput{{fc1->size(1)}, fc2->size(0)};
  };
  def.torch_twin = "mlp";
  return def;
}

}  // namespace trainlab
