#include "engine/core/observer.h"

#include <chrono>
#include <mutex>

#include "engine/core/tensor.h"

namespace trainlab {

namespace {
// Subscribers register at load (static initialisers) and are never removed, so the list is read
// without a lock once loading is done; registration itself is serialised.
std::vector<EngineObserver*>& observers() {
  static std::vector<EngineObserver*> list;
  return list;
}
std::mutex& registration() {
  static std::mutex m;
  return m;
}
}  // namespace

void subscribe(EngineObserver& observer) {
  std::lock_guard lock(registration());
  observers().push_back(&observer);
}

namespace observe {
void allocated(DeviceType device, std::int64_t bytes, std::uint8_t& tag) {
  for (EngineObserver* o : observers()) o->on_allocate(device, bytes, tag);
}
void freed(DeviceType device, std::int64_t bytes, std::uint8_t tag) {
  for (EngineObserver* o : observers()) o->on_free(device, bytes, tag);
}
void role(const Tensor& tensor, StorageRole role) {
  if (!tensor.defined() || tensor.impl()->storage->released()) return;
  Storage& storage = *tensor.impl()->storage;
  for (EngineObserver* o : observers())
    o->on_role(storage.backend().device_type(), static_cast<std::int64_t>(storage.bytes()), storage.observer_tag(),
               role);
}
void op(std::string_view name, const std::vector<Tensor>& inputs, const Tensor& output) {
  for (EngineObserver* o : observers()) o->on_op(name, inputs, output);
}
bool spans_wanted() {
  for (const EngineObserver* o : observers())
    if (o->wants_spans()) return true;
  return false;
}
void span(std::string_view name, std::int64_t start_ns, std::int64_t end_ns) {
  for (EngineObserver* o : observers())
    if (o->wants_spans()) o->on_span(name, start_ns, end_ns);
}
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace observe

namespace {
thread_local int recompute_depth = 0;
}  // namespace

RecomputeScope::RecomputeScope() {
  ++recompute_depth;
  for (EngineObserver* o : observers()) o->on_recompute_begin();
}
RecomputeScope::~RecomputeScope() {
  --recompute_depth;
  for (EngineObserver* o : observers()) o->on_recompute_end();
}
bool RecomputeScope::active() { return recompute_depth > 0; }

}  // namespace trainlab
