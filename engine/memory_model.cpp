#include "engine/memory_model.h"

#include <fmt/format.h>
#include <cmath>

#include "backends/error.h"

namespace trainlab {

PersistentState persistent_state(double parameters, int workers, int zero_stage, const StateBytes& bytes) {
  TL_CHECK(parameters > 0 && std::isfinite(parameters),
           fmt::format("memory: parameters must be > 0, got {}", parameters));
  TL_CHECK(workers >= 1, fmt::format("memory: workers must be >= 1, got {}", workers));
  TL_CHECK(zero_stage >= 0 && zero_stage <= 3,
           fmt::format("memory: ZeRO stage must be 0, 1, 2 or 3, got {}", zero_stage));
  for (double b : {bytes.param, bytes.grad, bytes.master, bytes.moments})
    TL_CHECK(b >= 0 && std::isfinite(b), fmt::format("memory: bytes per parameter must be >= 0, got {}", b));
  const double w = workers;
  PersistentState s;
  s.params = parameters * bytes.param / (zero_stage >= 3 ? w : 1.0);
  s.grads = parameters * bytes.grad / (zero_stage >= 2 ? w : 1.0);
  s.optimizer = parameters * bytes.optimizer() / (zero_stage >= 1 ? w : 1.0);
  return s;
}

StateBytes trainlab_state_bytes(const std::string& optimizer, double momentum) {
  TL_CHECK(optimizer == "sgd" || optimizer == "adamw",
           "memory: optimizer must be sgd or adamw, got '" + optimizer + "'");
  StateBytes b;
  b.param = 4;
  b.grad = 4;
  b.master = 0;
  b.moments = optimizer == "adamw" ? 8 : (momentum > 0 ? 4 : 0);
  return b;
}

}  // namespace trainlab
