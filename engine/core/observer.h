// The engine core (tensor, autograd, autocast, the ops) and what watches it. The core emits
// events; memory accounting (engine/instrument/memory_usage.h), the precision audit
// (engine/instrument/precision_audit.h) and the profiler (engine/instrument/profiler.h) subscribe to them, so the core
// includes none of them (tests/check_layers.py checks it). A subscriber registers once for the process's lifetime (the
// three above do when libtrainlab loads); with nothing to do it costs a virtual call per event.
//
//   allocation  a storage was allocated, freed, or given a role the core knows (a gradient, a
//               low-precision working copy of a parameter)
//   op          an op was recorded on the tape (name, inputs, output); an op's forward or backward,
//               or another span of the core's work, ran from start to end
//   recompute   activation recomputation runs a forward again inside backward
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/backend.h"

namespace trainlab {

class Tensor;

// What the core knows of why a storage holds its bytes: nothing (the allocating thread's context
// decides, e.g. the step's phase), or a role it assigns.
enum class StorageRole : std::uint8_t { gradient, working_copy };

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // `tag` is one byte the core keeps with each storage for its observers: set at allocation,
  // handed back at free and at a role change (memory accounting keeps the storage's category in it,
  // and is the only subscriber that uses it).
  virtual void on_allocate(DeviceType /*device*/, std::int64_t /*bytes*/, std::uint8_t& /*tag*/) {}
  virtual void on_free(DeviceType /*device*/, std::int64_t /*bytes*/, std::uint8_t /*tag*/) {}
  virtual void on_role(DeviceType /*device*/, std::int64_t /*bytes*/, std::uint8_t& /*tag*/, StorageRole /*role*/) {}
  // An op recorded on the tape (called before its node is made; also for ops no gradient flows to).
  virtual void on_op(std::string_view /*name*/, const std::vector<Tensor>& /*inputs*/, const Tensor& /*output*/) {}
  // Spans: asked before timing one, so that nothing is timed when no subscriber wants it.
  virtual bool wants_spans() const { return false; }
  virtual void on_span(std::string_view /*name*/, std::int64_t /*start_ns*/, std::int64_t /*end_ns*/) {}
  // A forward run again inside backward (activation recomputation), on this thread.
  virtual void on_recompute_begin() {}
  virtual void on_recompute_end() {}
};

// For the process's lifetime (a subscriber is never removed).
void subscribe(EngineObserver& observer);

// ---- what the core calls ----
namespace observe {
void allocated(DeviceType device, std::int64_t bytes, std::uint8_t& tag);
void freed(DeviceType device, std::int64_t bytes, std::uint8_t tag);
void role(const Tensor& tensor, StorageRole role);
void op(std::string_view name, const std::vector<Tensor>& inputs, const Tensor& output);
bool spans_wanted();
void span(std::string_view name, std::int64_t start_ns, std::int64_t end_ns);
std::int64_t now_ns();  // the steady clock spans are in
}  // namespace observe

// A span from construction to destruction, when a subscriber wants spans.
class CoreSpan {
 public:
  explicit CoreSpan(const char* name) : name_(name), start_ns_(observe::spans_wanted() ? observe::now_ns() : -1) {}
  ~CoreSpan() {
    if (start_ns_ >= 0) observe::span(name_, start_ns_, observe::now_ns());
  }
  CoreSpan(const CoreSpan&) = delete;
  CoreSpan& operator=(const CoreSpan&) = delete;

 private:
  const char* name_;
  std::int64_t start_ns_;
};

// Activation recomputation's forward, from construction to destruction.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  // Whether a recomputation's forward is running on this thread: an op with effects beyond its
  // output (batch norm's running statistics) leaves them alone the second time.
  static bool active();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;
};

#define TL_SPAN_CONCAT_INNER(a, b) a##b
#define TL_SPAN_CONCAT(a, b) TL_SPAN_CONCAT_INNER(a, b)
#define TL_SPAN(name) ::trainlab::CoreSpan TL_SPAN_CONCAT(tl_core_span_, __LINE__)(name)

}  // namespace trainlab
