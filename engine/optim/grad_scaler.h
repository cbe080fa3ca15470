// Dynamic loss scaling for f16 training, with PyTorch's GradScaler semantics: the loss is
// multiplied by the scale (start 2^16) before backward; before the optimiser step every gradient
// is unscaled and checked; a non-finite gradient skips the step and halves the scale, and after
// growth_interval (2000) consecutive good steps the scale doubles. bf16 needs none of this (it
// has f32's range) and f32 none at all.
#pragma once

#include <cstdint>

#include "engine/core/state_dict.h"
#include "engine/core/tensor.h"
#include "engine/optim/optim.h"

namespace trainlab {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});
  // loss * scale (differentiable).
  Tensor scale(const Tensor& loss) const;
  // Unscales every gradient of `optimizer`'s parameters and, when all are finite, steps it;
  // otherwise skips the step (the gradients are left for zero_grad). Then updates the scale.
  // Returns whether the step was taken.
  bool step(Optimizer& optimizer);

  double scale_value() const { return scale_; }
  std::int64_t skipped_steps() const { return skipped_; }
  std::int64_t good_steps_in_a_row() const { return growth_tracker_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace trainlab
