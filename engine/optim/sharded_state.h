// Sharded optimiser state (ZeRO-1), as the engine sees it. A data-parallel run with `zero: 1`
// gives each rank pieces of the parameters to update: contiguous element ranges (in row-major
// order) of the flattened parameters, named "fc1.weight[0:131072]". The rank's optimiser is built
// over views of those pieces, so its state (momentum, AdamW's moments) covers only them.
//
// Checkpoints hold the whole state, as an unsharded run writes it: the shards are merged on save
// and cut again on load, so a run resumes at any world size, with or without sharding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/state_dict.h"

namespace trainlab {

struct ParameterPiece {
  std::string parameter;   // the parameter's name
  std::int64_t begin = 0;  // first element (row-major)
  std::int64_t count = 0;
  std::string name() const;  // "fc1.weight[0:131072]"
};

// Views of the pieces (1-D, sharing the parameters' storage), leaves that require a gradient,
// named as the pieces: what a sharded optimiser is built over.
NamedTensors piece_views(const NamedTensors& parameters, const std::vector<ParameterPiece>& pieces);

// A whole optimiser state cut to `pieces`: each per-parameter tensor ("kind.param") sliced into
// "kind.<piece>", each per-parameter integer ("has_state.param", AdamW's "step.param") copied to
// each piece; everything else as it is.
StateDict shard_optimizer_state(const StateDict& full, const NamedTensors& parameters,
                                const std::vector<ParameterPiece>& pieces);

// The inverse: the shards of every rank (in rank order, with each rank's pieces) merged into the
// state an unsharded optimiser over `parameters` would have. A piece missing from the shards, two
// shards that disagree on a shared value, or pieces that disagree on a parameter's integer are
// errors naming the key.
StateDict merge_optimizer_shards(const std::vector<StateDict>& shards,
                                 const std::vector<std::vector<ParameterPiece>>& pieces,
                                 const NamedTensors& parameters);

// A state dict as bytes (safetensors, with the scalars in its metadata, doubles exact), to send
// between ranks; decode errors name `source`.
std::vector<unsigned char> encode_state_dict(const StateDict& state);
StateDict decode_state_dict(const unsigned char* data, std::size_t size, const std::string& source, Backend& backend);

}  // namespace trainlab
