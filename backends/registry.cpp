#include "backends/registry.h"

#include "backends/host_memory.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "backends/error.h"

namespace trainlab {
namespace {

struct Entry {
  BackendInfo info;
  BackendFactory factory;
  std::unique_ptr<Backend> instance;
};

// Function-local statics: registrations run during static initialisation of other files.
std::map<std::string, Entry>& entries() {
  static std::map<std::string, Entry> map;
  return map;
}
// Recursive: a backend's factory may look up another backend (one backend built over another).
std::recursive_mutex& registry_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

}  // namespace

void Backend::sgd_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& step) {
  for (const OptimizerSlot& slot : slots) {
    SgdStep one = step;
    one.first_step = slot.first_step;
    sgd_step(dtype, slot.n, slot.param, slot.grad, slot.state1, one);
    if (slot.working != nullptr) cast(dtype, slot.param, slot.working_dtype, slot.working, slot.n);
  }
}

void Backend::adamw_step_all(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamWStep& step) {
  for (const OptimizerSlot& slot : slots) {
    AdamWStep one = step;
    one.step = slot.step;
    adamw_step(dtype, slot.n, slot.param, slot.grad, slot.state1, slot.state2, one);
    if (slot.working != nullptr) cast(dtype, slot.param, slot.working_dtype, slot.working, slot.n);
  }
}

bool Backend::relu_bias_backward(DType dtype, const void* y, const void* dy, void* dx, void*, std::int64_t outer,
                                 std::int64_t channels, std::int64_t inner) {
  relu_backward(dtype, y, dy, dx, outer * channels * inner);
  return false;
}

std::uint64_t Backend::memory_available_bytes() const { return host_memory_available_bytes(); }

std::map<std::string, std::int64_t> Backend::counters() const {
  const AllocatorStats stats = allocator_stats();
  return {{"allocations", stats.allocations},
          {"bytes_in_use", stats.bytes_in_use},
          {"peak_bytes_in_use", stats.peak_bytes_in_use}};
}

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda";
  }
  return "invalid";
}

BackendRegistration::BackendRegistration(BackendInfo info, BackendFactory factory) {
  std::lock_guard lock(registry_mutex());
  std::string name = info.name;
  entries()[name] = Entry{std::move(info), std::move(factory), nullptr};
}

Backend& get_backend(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  auto it = entries().find(name);
  if (it == entries().end()) {
    std::string allowed;
    for (const auto& [key, entry] : entries()) allowed += (allowed.empty() ? "" : ", ") + key;
    throw Error("unknown backend '" + name + "' (registered: " + allowed + ")");
  }
  if (!it->second.instance) it->second.instance = it->second.factory();
  return *it->second.instance;
}

std::vector<BackendInfo> registered_backends() {
  std::lock_guard lock(registry_mutex());
  std::vector<BackendInfo> infos;
  for (const auto& [key, entry] : entries()) infos.push_back(entry.info);
  return infos;
}

std::string registered_backend_names() {
  std::string names;
  for (const auto& info : registered_backends()) names += (names.empty() ? "" : ", ") + info.name;
  return names;
}

std::string default_backend_name() {
  auto infos = registered_backends();
  const BackendInfo* best = nullptr;
  for (const auto& info : infos) {
    if (info.device_type == DeviceType::cpu && (!best || info.priority > best->priority)) best = &info;
  }
  TL_CHECK(best != nullptr, "no CPU backend is registered");
  return best->name;
}

}  // namespace trainlab
