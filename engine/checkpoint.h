// Checkpoints: the complete training state in one directory.
//
//   DIR/model.safetensors      model weights (readable by PyTorch's safetensors)
//   DIR/optimizer.safetensors  optimiser buffers (momentum, Adam moments)
//   DIR/state.json             everything else: step, optimiser and schedule scalars, RNG states,
//                              loader position, the run's config
//   DIR/COMPLETE               written last: format version and each file's size and CRC-32
//
// Each file is written atomically (temp file, fsync, rename) and the marker last; re-saving into
// a directory first removes its marker. A crash at any point therefore leaves a directory that
// either loads as the old checkpoint, the new one, or is refused, never a mixture. Loading checks
// the marker, every file's size and CRC, and every header before using any byte.
#pragma once

#include <string>

#include "engine/state_dict.h"

namespace trainlab {

struct Checkpoint {
  NamedTensors model;
  StateDict optimizer;
  StateDict scheduler;  // no tensors
  StateDict loader;     // no tensors
  StateDict trainer;    // no tensors
};

inline constexpr int kCheckpointFormatVersion = 1;

void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint);
// Throws Error naming the file and the problem: missing directory or marker, truncation,
// checksum mismatch, malformed header or JSON, unknown format version.
Checkpoint load_checkpoint(const std::string& dir, Backend& backend);

}  // namespace trainlab
