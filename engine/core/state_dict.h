// State that survives a checkpoint: named tensors plus exact scalars and strings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace trainlab {

// Ordered (name, tensor) pairs, PyTorch state-dict style ("conv1.weight", ...).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct StateDict {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> numbers;  // stored exactly (checkpoints round-trip doubles bit for bit)
  std::map<std::string, std::string> strings;

  // Accessors that throw Error naming the missing key and `owner` (e.g. "SGD state").
  std::int64_t integer(const std::string& key, const std::string& owner) const;
  double number(const std::string& key, const std::string& owner) const;
  const std::string& string(const std::string& key, const std::string& owner) const;
};

}  // namespace trainlab
