#include "engine/optim/sharded_state.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "engine/core/autograd.h"
#include "engine/io/safetensors.h"

namespace trainlab {

namespace {

// Splits "kind.<name>" where <name> is a key of `names` (names may contain dots, kinds do not
// need to): the first split whose suffix is known wins.
template <typename T>
const T* split_key(const std::string& key, const std::map<std::string, T>& names, std::string* kind) {
  for (std::size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
    auto it = names.find(key.substr(dot + 1));
    if (it != names.end()) {
      *kind = key.substr(0, dot);
      return &it->second;
    }
  }
  return nullptr;
}

std::map<std::string, const Tensor*> by_name(const NamedTensors& parameters) {
  std::map<std::string, const Tensor*> names;
  for (const auto& [name, tensor] : parameters) names[name] = &tensor;
  return names;
}

}  // namespace

std::string ParameterPiece::name() const { return fmt::format("{}[{}:{}]", parameter, begin, begin + count); }

NamedTensors piece_views(const NamedTensors& parameters, const std::vector<ParameterPiece>& pieces) {
  const auto names = by_name(parameters);
  NamedTensors views;
  for (const ParameterPiece& piece : pieces) {
    auto it = names.find(piece.parameter);
    TL_CHECK(it != names.end(), "zero: piece " + piece.name() + " of a parameter the model does not have");
    const Tensor& p = *it->second;
    TL_CHECK(p.is_contiguous(), "zero: parameter " + piece.parameter + " is not contiguous");
    TL_CHECK(piece.begin >= 0 && piece.count > 0 && piece.begin + piece.count <= p.numel(),
             "zero: piece " + piece.name() + " is outside " + piece.parameter + " (" + std::to_string(p.numel()) +
                 " elements)");
    Tensor view = p.detach().flatten().narrow(0, piece.begin, piece.count);
    view.set_requires_grad(true);
    view.set_name(piece.name());
    views.emplace_back(piece.name(), view);
  }
  return views;
}

StateDict shard_optimizer_state(const StateDict& full, const NamedTensors& parameters,
                                const std::vector<ParameterPiece>& pieces) {
  std::map<std::string, std::vector<const ParameterPiece*>> mine;
  for (const auto& [name, p] : parameters) mine[name];
  const auto names = by_name(parameters);
  for (const ParameterPiece& piece : pieces) mine[piece.parameter].push_back(&piece);
  StateDict shard;
  shard.numbers = full.numbers;
  shard.strings = full.strings;
  NoGradGuard no_grad;
  for (const auto& [key, tensor] : full.tensors) {
    std::string kind;
    const auto* owned = split_key(key, mine, &kind);
    if (owned == nullptr) {
      shard.tensors[key] = tensor;
      continue;
    }
    // The whole state as an unsharded optimiser would load it: each buffer the shape and dtype of
    // its parameter (a transposed moment has the right element count and the wrong meaning).
    const Tensor& parameter = *names.at(key.substr(kind.size() + 1));
    TL_CHECK(tensor.shape() == parameter.shape() && tensor.dtype() == parameter.dtype(),
             "optimizer state '" + key + "' is " + shape_str(tensor.shape()) + " " + dtype_name(tensor.dtype()) +
                 ", parameter '" + key.substr(kind.size() + 1) + "' is " + shape_str(parameter.shape()) + " " +
                 dtype_name(parameter.dtype()));
    for (const ParameterPiece* piece : *owned) {
      TL_CHECK(piece->begin + piece->count <= tensor.numel(),
               "optimizer state '" + key + "' has " + std::to_string(tensor.numel()) + " elements, fewer than piece " +
                   piece->name() + " needs");
      shard.tensors[kind + "." + piece->name()] =
          tensor.contiguous().flatten().narrow(0, piece->begin, piece->count).contiguous().clone();
    }
  }
  for (const auto& [key, value] : full.integers) {
    std::string kind;
    const auto* owned = split_key(key, mine, &kind);
    if (owned == nullptr) {
      shard.integers[key] = value;
      continue;
    }
    for (const ParameterPiece* piece : *owned) shard.integers[kind + "." + piece->name()] = value;
  }
  return shard;
}

StateDict merge_optimizer_shards(const std::vector<StateDict>& shards,
                                 const std::vector<std::vector<ParameterPiece>>& pieces,
                                 const NamedTensors& parameters) {
  TL_CHECK(!shards.empty() && shards.size() == pieces.size(),
           fmt::format("zero: {} optimizer shards for {} ranks' pieces", shards.size(), pieces.size()));
  const auto names = by_name(parameters);
  std::map<std::string, const ParameterPiece*> all;
  std::map<std::string, int> pieces_per_parameter;
  for (const auto& rank_pieces : pieces) {
    for (const ParameterPiece& piece : rank_pieces) {
      TL_CHECK(names.count(piece.parameter) != 0, "zero: piece " + piece.name() + " of an unknown parameter");
      all[piece.name()] = &piece;
      ++pieces_per_parameter[piece.parameter];
    }
  }
  StateDict full = shards.front();
  full.tensors.clear();
  full.integers.clear();
  struct Assembly {
    std::vector<unsigned char> bytes;
    DType dtype = DType::f32;
    std::int64_t covered = 0;
    std::string parameter;
  };
  std::map<std::string, Assembly> tensors;
  std::map<std::string, int> integer_pieces;
  for (std::size_t r = 0; r < shards.size(); ++r) {
    const StateDict& shard = shards[r];
    for (const auto& [key, value] : shard.numbers) {
      auto it = full.numbers.find(key);
      TL_CHECK(it != full.numbers.end() && std::memcmp(&it->second, &value, sizeof value) == 0,
               fmt::format("zero: rank {}'s optimizer state has {} = {}, rank 0's {}", r, key, value,
                           it == full.numbers.end() ? std::string("none") : fmt::format("{}", it->second)));
    }
    TL_CHECK(shard.numbers.size() == full.numbers.size() && shard.strings == full.strings,
             fmt::format("zero: rank {}'s optimizer state differs from rank 0's in its settings", r));
    for (const auto& [key, tensor] : shard.tensors) {
      std::string kind;
      const ParameterPiece* const* piece = split_key(key, all, &kind);
      TL_CHECK(piece != nullptr,
               fmt::format("zero: rank {}'s optimizer state has '{}', which is not a piece's", r, key));
      const Tensor& parameter = *names.at((*piece)->parameter);
      const std::string full_key = kind + "." + (*piece)->parameter;
      Assembly& a = tensors[full_key];
      const std::size_t elem = dtype_size(tensor.dtype());
      if (a.bytes.empty()) {
        a.bytes.assign(static_cast<std::size_t>(parameter.numel()) * elem, 0);
        a.dtype = tensor.dtype();
        a.parameter = (*piece)->parameter;
      }
      TL_CHECK(tensor.dtype() == a.dtype && tensor.numel() == (*piece)->count,
               fmt::format("zero: rank {}'s '{}' is {} {} elements, the piece {} elements of {}", r, key,
                           tensor.numel(), dtype_name(tensor.dtype()), (*piece)->count, dtype_name(a.dtype)));
      tensor.contiguous().copy_to_host(a.bytes.data() + static_cast<std::size_t>((*piece)->begin) * elem);
      a.covered += (*piece)->count;
    }
    for (const auto& [key, value] : shard.integers) {
      std::string kind;
      const ParameterPiece* const* piece = split_key(key, all, &kind);
      const std::string full_key = piece != nullptr ? kind + "." + (*piece)->parameter : key;
      auto [it, inserted] = full.integers.emplace(full_key, value);
      TL_CHECK(inserted || it->second == value,
               fmt::format("zero: the optimizer shards disagree on {} ({} on rank {}, {} elsewhere)", full_key, value,
                           r, it->second));
      if (piece != nullptr) ++integer_pieces[full_key];
    }
  }
  for (auto& [key, a] : tensors) {
    const Tensor& parameter = *names.at(a.parameter);
    TL_CHECK(a.covered == parameter.numel(),
             fmt::format("zero: the optimizer shards hold {} of {}'s {} elements (a rank's piece is missing)",
                         a.covered, key, parameter.numel()));
    full.tensors[key] = Tensor::from_host(a.bytes.data(), parameter.shape(), a.dtype, parameter.backend());
  }
  for (const auto& [key, count] : integer_pieces) {
    std::string kind;
    const Tensor* const* parameter = split_key(key, names, &kind);
    const std::string parameter_name = key.substr(kind.size() + 1);
    TL_CHECK(parameter != nullptr && count == pieces_per_parameter[parameter_name],
             fmt::format("zero: {} is recorded by {} of {}'s {} pieces", key, count, parameter_name,
                         pieces_per_parameter[parameter_name]));
  }
  return full;
}

std::vector<unsigned char> encode_state_dict(const StateDict& state) {
  NamedTensors tensors(state.tensors.begin(), state.tensors.end());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : state.integers) metadata["i:" + key] = std::to_string(value);
  for (const auto& [key, value] : state.numbers) metadata["n:" + key] = fmt::format("{:a}", value);
  for (const auto& [key, value] : state.strings) metadata["s:" + key] = value;
  return encode_safetensors(tensors, metadata);
}

StateDict decode_state_dict(const unsigned char* data, std::size_t size, const std::string& source, Backend& backend) {
  SafetensorsContents contents = decode_safetensors(data, size, source, backend);
  StateDict state;
  for (auto& [name, tensor] : contents.tensors) state.tensors[name] = tensor;
  for (const auto& [key, value] : contents.metadata) {
    TL_CHECK(key.size() > 2 && key[1] == ':', source + ": metadata key '" + key + "' is not i:, n: or s:");
    const std::string name = key.substr(2);
    if (key[0] == 'i') {
      state.integers[name] = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key[0] == 'n') {
      state.numbers[name] = std::strtod(value.c_str(), nullptr);
    } else if (key[0] == 's') {
      state.strings[name] = value;
    } else {
      throw Error(source + ": metadata key '" + key + "' is not i:, n: or s:");
    }
  }
  return state;
}

}  // namespace trainlab
