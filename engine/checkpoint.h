// Checkpoints: the complete training state in one directory.
//
//   DIR/model.safetensors      model weights (readable by PyTorch's safetensors)
//   DIR/optimizer.safetensors  optimiser buffers (momentum, Adam moments)
//   DIR/state.json             everything else: step, optimiser and schedule scalars, RNG states,
//                              loader position, the run's config
//   DIR/COMPLETE               written last: format version and each file's size and CRC-32
//
// A save writes the complete new checkpoint into a hidden staging directory beside DIR (each file
// to a temp name, fsync, rename; the marker last), then swaps it in with one atomic rename
// (renameat2 RENAME_EXCHANGE; on a filesystem without it, two renames, and a load in between names
// the complete copies). A crash at any point leaves the previous complete checkpoint or the new
// one, never a mixture and never nothing. A directory holding anything but checkpoint files is
// never replaced. Loading checks the marker, every file's size and CRC, and every header before
// using any byte.
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
