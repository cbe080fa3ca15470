// What a measurement trained on, for its ledger row: SyntheticImages (the default generator) or a
// data set on disk (trainlab make-dataset), named by its source and identified by its manifest's
// CRC-32, so two rows compare only when they read the same data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "bench/measure/knobs.h"
#include "engine/data/loader.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/optim.h"
#include "engine/train/config.h"

namespace trainlab::bench {

struct DataSource {
  std::string name;      // "SyntheticImages", or the source's last path component ("fashion-mnist")
  std::string source;    // "idx:/usr/share/datasets/fashion-mnist" (empty for SyntheticImages)
  std::string dir;       // the data set's directory (empty for SyntheticImages)
  std::string content;   // the CRC-32 of its files' list, 8 hex digits (empty for SyntheticImages)
  std::string manifest;  // its manifest's CRC-32 (rows of 2026-12-02 before `content` carry only this)
  bool synthetic() const { return dir.empty(); }
  // "SyntheticImages" | "fashion-mnist (idx:/usr/share/datasets/fashion-mnist, data CRC-32 1a2b3c4d)"
  std::string label() const;
  template <class F>
  void fields(F& f) {
    f("name", name);
    f.optional("source", source);
    f.optional("dir", dir);
    f.optional("content", content);
    f.optional("manifest", manifest);
  }
};

// The data a configuration trains on: SyntheticImages, or SyntheticTokens for a token model (one whose
// ModelDef has a context); reads the manifest of a data set on disk (throws Error naming the directory
// when it has none).
DataSource data_source_of(const DataConfig& data, const ModelConfig& model = {});
DataSource data_source_of_dir(const std::string& dir);

// A study's base pointed at a data set on disk (a study file's top-level `data:` key, a driver's
// --data): the base's `data` set to `dir` and SyntheticImages' decode_cost stand-in dropped, since
// the decoding is now real. An empty `dir` changes nothing.
void use_data_set(KnobMap& base, const std::string& dir);

// An endless source of random batches of `batch` samples for a model's input, drawn from `seed`:
// images uniform in [-1, 1) with labels below input.classes, or (tokens) windows of token indices
// with the next tokens as labels. What the parallelism benches train on.
std::function<Batch()> synthetic_batches(const ModelInput& input, bool tokens, std::int64_t batch, Backend& be,
                                         std::uint64_t seed);

// One plain training step on a batch, as the parallelism benches time it: zero the gradients,
// forward, cross entropy against the labels (flattened), backward, the update. Returns the loss.
double plain_train_step(Module& model, Optimizer& optimizer, const Batch& batch);

}  // namespace trainlab::bench
