// Memory in use, by what it holds (issue 13's measured breakdown; PyTorch users know it from
// torch.cuda.memory_summary). Every tensor storage carries a category, set when it is allocated
// from the innermost MemoryCategoryScope of the allocating thread and moved when the engine learns
// more (a parameter registered by a module, a gradient handed to its leaf). The step sets the scopes:
// the forward's allocations are activations (what autograd saves for backward, and the transients
// around it), the backward's are workspaces (activation gradients and temporaries) until a leaf
// takes one as its gradient, the optimiser's state and low-precision working copies are their own.
// A communicator's buffers are counted here too. Backend-internal scratch (cuBLAS workspaces,
// oneDNN scratchpads) is not a tensor and is not in it: the backend's allocator counters are the
// check on the total.
//
//   reset_memory_peaks(DeviceType::cpu);    // peaks := what is live now
//   runner.step(next);                      // the step to be measured
//   MemoryUsage m = memory_usage(DeviceType::cpu);
//   m.peak[index(MemoryCategory::activations)], m.total_peak, m.peak_phase
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "backends/backend.h"

namespace trainlab {

class Tensor;

enum class MemoryCategory : int {
  parameters,
  gradients,
  optimizer_state,
  working_copies,  // bf16/f16 copies of f32 parameters
  activations,
  workspaces,
  communication,
  data,   // input batches made by the loader
  other,  // allocated outside every scope (a checkpoint being read, a test's tensors)
};
inline constexpr int kMemoryCategories = 9;
constexpr int index(MemoryCategory c) { return static_cast<int>(c); }
const char* memory_category_name(MemoryCategory category);  // "optimizer_state", ...
MemoryCategory parse_memory_category(const std::string& name);

// Where in a step the process is (set by the step runner for the whole process).
enum class MemoryPhase : int { outside_step, data_wait, forward, backward, optimizer, evaluation };
const char* memory_phase_name(MemoryPhase phase);  // "forward", ...

// Allocations made by this thread while the scope lives are counted in `category`.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};
MemoryCategory current_memory_category();  // this thread's; `other` outside every scope

// The step's phase now (process-wide).
MemoryPhase current_memory_phase();

// The step's phase while the scope lives (process-wide; the step runs on one thread).
class MemoryPhaseScope {
 public:
  explicit MemoryPhaseScope(MemoryPhase phase);
  ~MemoryPhaseScope();
  MemoryPhaseScope(const MemoryPhaseScope&) = delete;
  MemoryPhaseScope& operator=(const MemoryPhaseScope&) = delete;

 private:
  MemoryPhase previous_;
};

struct MemoryUsage {  // bytes, of one device type
  std::array<std::int64_t, kMemoryCategories> live{};
  std::array<std::int64_t, kMemoryCategories> peak{};     // each category's own peak
  std::array<std::int64_t, kMemoryCategories> at_peak{};  // the breakdown when the total peaked
  std::int64_t total_live = 0, total_peak = 0;
  MemoryPhase peak_phase = MemoryPhase::outside_step;  // where the total peaked
  // Activations live when a forward ended (what is held for backward), the largest since the
  // peaks were reset: what recomputation lowers even when it cannot lower the peak.
  std::int64_t activations_after_forward = 0;
  std::int64_t peak_of(MemoryCategory c) const { return peak[static_cast<std::size_t>(index(c))]; }
  std::int64_t live_of(MemoryCategory c) const { return live[static_cast<std::size_t>(index(c))]; }
};
MemoryUsage memory_usage(DeviceType device);
// Every peak (per category and total) set to what is live now, so the next peaks are a step's own.
void reset_memory_peaks(DeviceType device);
// Called by the step when a forward has ended: updates activations_after_forward.
void note_forward_end(DeviceType device);

// The bookkeeping, for code that allocates outside tensors (a communicator's buffers): an
// allocation counted here must be freed here with the same device, category and bytes.
void memory_allocated(DeviceType device, MemoryCategory category, std::int64_t bytes);
void memory_freed(DeviceType device, MemoryCategory category, std::int64_t bytes) noexcept;

// Counts the tensor's storage (all of it: every view shares it) in `category` from now on.
void set_memory_category(const Tensor& tensor, MemoryCategory category);

// One JSON object: {"device":"cpu","total_peak_bytes":..,"peak_phase":"backward",
// "peak_bytes":{"parameters":..,...},"at_peak_bytes":{...}}.
std::string memory_usage_json(const MemoryUsage& usage, DeviceType device);
// "memory (tensors on cpu): peak 42.1 MiB in backward = activations 12.0 MiB + workspaces ...",
// the categories that held bytes at the peak, largest first.
std::string memory_summary_line(const MemoryUsage& usage, DeviceType device);

}  // namespace trainlab
