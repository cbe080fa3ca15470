#include "engine/instrument/memory_usage.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "backends/error.h"
#include "backends/host_memory.h"
#include "engine/core/observer.h"
#include "engine/core/tensor.h"

namespace trainlab {

namespace {

constexpr const char* kCategoryNames[kMemoryCategories] = {"parameters",     "gradients",   "optimizer_state",
                                                           "working_copies", "activations", "workspaces",
                                                           "communication",  "data",        "other"};

thread_local MemoryCategory current_category = MemoryCategory::other;
std::atomic<int> current_phase{static_cast<int>(MemoryPhase::outside_step)};

constexpr int kDevices = 2;  // DeviceType::cpu, DeviceType::cuda

struct Book {
  std::mutex mutex;
  MemoryUsage usage[kDevices];
};

Book& book() {
  static Book* b = new Book();  // never destroyed: storages freed during static destruction still count
  return *b;
}

std::size_t slot(MemoryCategory c) { return static_cast<std::size_t>(index(c)); }
int device_slot(DeviceType d) { return d == DeviceType::cuda ? 1 : 0; }

// Called with the mutex held, after `live` changed.
void note_peaks(MemoryUsage& u, MemoryCategory c) {
  u.peak[slot(c)] = std::max(u.peak[slot(c)], u.live[slot(c)]);
  if (u.total_live > u.total_peak) {
    u.total_peak = u.total_live;
    u.at_peak = u.live;
    u.peak_phase = static_cast<MemoryPhase>(current_phase.load(std::memory_order_relaxed));
  }
}

}  // namespace

const char* memory_category_name(MemoryCategory category) {
  const int i = index(category);
  return i >= 0 && i < kMemoryCategories ? kCategoryNames[i] : "?";
}

MemoryCategory parse_memory_category(const std::string& name) {
  std::string allowed;
  for (int i = 0; i < kMemoryCategories; ++i) {
    if (name == kCategoryNames[i]) return static_cast<MemoryCategory>(i);
    if (i > 0) allowed += ", ";
    allowed += kCategoryNames[i];
  }
  throw Error("unknown memory category '" + name + "' (allowed: " + allowed + ")");
}

const char* memory_phase_name(MemoryPhase phase) {
  switch (phase) {
    case MemoryPhase::outside_step:
      return "outside_step";
    case MemoryPhase::data_wait:
      return "data_wait";
    case MemoryPhase::forward:
      return "forward";
    case MemoryPhase::backward:
      return "backward";
    case MemoryPhase::optimizer:
      return "optimizer";
    case MemoryPhase::evaluation:
      return "evaluation";
  }
  return "?";
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(current_category) {
  current_category = category;
}
MemoryCategoryScope::~MemoryCategoryScope() { current_category = previous_; }
MemoryCategory current_memory_category() { return current_category; }

MemoryPhase current_memory_phase() { return static_cast<MemoryPhase>(current_phase.load()); }

MemoryPhaseScope::MemoryPhaseScope(MemoryPhase phase)
    : previous_(static_cast<MemoryPhase>(current_phase.exchange(static_cast<int>(phase)))) {}
MemoryPhaseScope::~MemoryPhaseScope() { current_phase.store(static_cast<int>(previous_)); }

MemoryUsage memory_usage(DeviceType device) {
  Book& b = book();
  std::lock_guard lock(b.mutex);
  return b.usage[device_slot(device)];
}

void reset_memory_peaks(DeviceType device) {
  Book& b = book();
  std::lock_guard lock(b.mutex);
  MemoryUsage& u = b.usage[device_slot(device)];
  u.peak = u.live;
  u.at_peak = u.live;
  u.total_peak = u.total_live;
  u.peak_phase = static_cast<MemoryPhase>(current_phase.load());
  u.activations_after_forward = 0;
}

void note_forward_end(DeviceType device) {
  Book& b = book();
  std::lock_guard lock(b.mutex);
  MemoryUsage& u = b.usage[device_slot(device)];
  u.activations_after_forward = std::max(u.activations_after_forward, u.live[slot(MemoryCategory::activations)]);
}

void memory_allocated(DeviceType device, MemoryCategory category, std::int64_t bytes) {
  Book& b = book();
  std::lock_guard lock(b.mutex);
  MemoryUsage& u = b.usage[device_slot(device)];
  u.live[slot(category)] += bytes;
  u.total_live += bytes;
  note_peaks(u, category);
}

void memory_freed(DeviceType device, MemoryCategory category, std::int64_t bytes) noexcept {
  Book& b = book();
  std::lock_guard lock(b.mutex);
  MemoryUsage& u = b.usage[device_slot(device)];
  u.live[slot(category)] -= bytes;
  u.total_live -= bytes;
}

namespace {
// Moves a storage's bytes from the category its tag holds to `category`.
void move_bytes(DeviceType device, std::int64_t bytes, std::uint8_t& tag, MemoryCategory category) {
  const auto from = static_cast<MemoryCategory>(tag);
  if (from == category) return;
  {
    Book& b = book();
    std::lock_guard lock(b.mutex);
    MemoryUsage& u = b.usage[device_slot(device)];
    u.live[slot(from)] -= bytes;
    u.live[slot(category)] += bytes;
    note_peaks(u, category);
  }
  tag = static_cast<std::uint8_t>(category);
}

// Memory accounting as a subscriber of the engine core's events (engine/core/observer.h): a storage is
// counted in the allocating thread's category (its tag keeps it), moved when the core gives it a
// role, and a recomputed forward's allocations are activations, as the forward's were.
class MemoryAccounting final : public EngineObserver {
 public:
  void on_allocate(DeviceType device, std::int64_t bytes, std::uint8_t& tag) override {
    const MemoryCategory category = current_category;
    tag = static_cast<std::uint8_t>(category);
    memory_allocated(device, category, bytes);
  }
  void on_free(DeviceType device, std::int64_t bytes, std::uint8_t tag) override {
    memory_freed(device, static_cast<MemoryCategory>(tag), bytes);
  }
  void on_role(DeviceType device, std::int64_t bytes, std::uint8_t& tag, StorageRole role) override {
    move_bytes(device, bytes, tag,
               role == StorageRole::gradient ? MemoryCategory::gradients : MemoryCategory::working_copies);
  }
  void on_recompute_begin() override {
    recompute_previous.push_back(current_category);
    current_category = MemoryCategory::activations;
  }
  void on_recompute_end() override {
    current_category = recompute_previous.back();
    recompute_previous.pop_back();
  }

 private:
  static thread_local std::vector<MemoryCategory> recompute_previous;
};
thread_local std::vector<MemoryCategory> MemoryAccounting::recompute_previous;

MemoryAccounting accounting;
const bool accounting_subscribed = (subscribe(accounting), true);
}  // namespace

void set_memory_category(const Tensor& tensor, MemoryCategory category) {
  if (!tensor.defined() || !tensor.impl()->storage || tensor.impl()->storage->released()) return;
  Storage& storage = *tensor.impl()->storage;
  move_bytes(storage.backend().device_type(), static_cast<std::int64_t>(storage.bytes()), storage.observer_tag(),
             category);
}

std::string memory_summary_line(const MemoryUsage& u, DeviceType device) {
  std::vector<std::pair<std::int64_t, int>> parts;
  for (int i = 0; i < kMemoryCategories; ++i) {
    if (u.at_peak[static_cast<std::size_t>(i)] > 0) parts.emplace_back(u.at_peak[static_cast<std::size_t>(i)], i);
  }
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string line = std::string("memory (tensors on ") + (device == DeviceType::cuda ? "cuda" : "cpu") + "): peak " +
                     human_size(static_cast<std::uint64_t>(std::max<std::int64_t>(0, u.total_peak))) + " in " +
                     memory_phase_name(u.peak_phase);
  for (std::size_t k = 0; k < parts.size(); ++k) {
    line += k == 0 ? " = " : " + ";
    line += std::string(kCategoryNames[parts[k].second]) + " " + human_size(static_cast<std::uint64_t>(parts[k].first));
  }
  return line;
}

std::string memory_usage_json(const MemoryUsage& u, DeviceType device) {
  nlohmann::json peak = nlohmann::json::object(), at_peak = nlohmann::json::object();
  for (int i = 0; i < kMemoryCategories; ++i) {
    peak[kCategoryNames[i]] = u.peak[static_cast<std::size_t>(i)];
    at_peak[kCategoryNames[i]] = u.at_peak[static_cast<std::size_t>(i)];
  }
  const nlohmann::json j = {{"device", device == DeviceType::cuda ? "cuda" : "cpu"},
                            {"total_peak_bytes", u.total_peak},
                            {"peak_phase", memory_phase_name(u.peak_phase)},
                            {"activations_after_forward_bytes", u.activations_after_forward},
                            {"peak_bytes", peak},
                            {"at_peak_bytes", at_peak}};
  return j.dump();
}

}  // namespace trainlab
