#include "engine/optim/grad_scaler.h"

#include <cmath>
#include <string>

#include "backends/error.h"
#include "engine/core/autograd.h"
#include "engine/core/ops.h"
#include "engine/instrument/profiler.h"

namespace trainlab {

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options), scale_(options.init_scale) {
  TL_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0,
           "GradScaler: init_scale must be finite and > 0, got " + std::to_string(options.init_scale));
  TL_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1");
  TL_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1)");
  TL_CHECK(options.growth_interval >= 1, "GradScaler: growth_interval must be >= 1");
}

Tensor GradScaler::scale(const Tensor& loss) const { return loss * scale_; }

bool GradScaler::step(Optimizer& optimizer) {
  TL_PROFILE_SCOPE("grad_scaler.unscale");
  bool finite = true;
  {
    NoGradGuard no_grad;
    const double inv = 1.0 / scale_;
    for (const auto& [name, param] : optimizer.params()) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      TL_CHECK(grad.is_contiguous() || grad.is_contiguous(MemoryFormat::channels_last),
               "GradScaler: the gradient of " + name + " is not dense");
      // Every gradient is unscaled, even after one is found non-finite (PyTorch does the same).
      finite = grad.backend().unscale_and_check_finite(grad.dtype(), grad.raw_data(), grad.numel(), inv) && finite;
    }
  }
  if (finite) {
    optimizer.step();
    if (++growth_tracker_ >= options_.growth_interval) {
      scale_ *= options_.growth_factor;
      growth_tracker_ = 0;
    }
  } else {
    ++skipped_;
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  }
  return finite;
}

StateDict GradScaler::state_dict() const {
  StateDict state;
  state.numbers["scale"] = scale_;
  state.integers["growth_tracker"] = growth_tracker_;
  state.integers["skipped_steps"] = skipped_;
  state.integers["growth_interval"] = options_.growth_interval;
  return state;
}

void GradScaler::load_state_dict(const StateDict& state) {
  const std::string owner = "grad scaler state";
  const double scale = state.number("scale", owner);
  TL_CHECK(std::isfinite(scale) && scale > 0, owner + ": scale " + std::to_string(scale) + " is not a finite positive");
  scale_ = scale;
  growth_tracker_ = state.integer("growth_tracker", owner);
  skipped_ = state.integer("skipped_steps", owner);
}

}  // namespace trainlab
