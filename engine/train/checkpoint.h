// Checkpoints: the complete training state in one directory.
//
//   DIR/model.safetensors      model weights (readable by PyTorch's safetensors)
//   DIR/optimizer.safetensors  optimiser buffers (momentum, Adam moments)
//   DIR/state.json             everything else: step, optimiser and schedule scalars, RNG states,
//                              loader position, the run's config
//   DIR/COMPLETE               written last: format version, each file's size and CRC-32, and the
//                              marker's own CRC-32 (format version 2; version 1 is still read)
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

#include "engine/core/state_dict.h"

namespace trainlab {

struct Checkpoint {
  NamedTensors model;
  StateDict optimizer;
  StateDict scheduler;  // no tensors
  StateDict loader;     // no tensors
  StateDict trainer;    // no tensors
};

inline constexpr int kCheckpointFormatVersion = 2;

// Throws Error unless save_checkpoint could write `dir`: absent (its nearest existing ancestor a
// directory) or a directory holding only checkpoint files; a symlink is followed (the directory it
// points to is replaced, the link stays). For refusing a bad --save before a run, not after it.
void check_checkpoint_dir(const std::string& dir);
// Also removes staging directories beside `dir` left by saves whose process has gone.
void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint);
// Throws Error naming the file and the problem: missing directory or marker, truncation,
// checksum mismatch, malformed header or JSON, unknown format version, a file that is not a
// regular file (a FIFO, /dev/zero) or whose size differs from the marker's record (checked before
// any byte is read).
Checkpoint load_checkpoint(const std::string& dir, Backend& backend);

}  // namespace trainlab
