#include "engine/profiler.h"

#include <chrono>

namespace trainlab {

Profiler& Profiler::instance() {
  static Profiler profiler;
  return profiler;
}

std::int64_t Profiler::now_ns() {
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch).count();
}

std::uint32_t Profiler::thread_index() {
  static std::atomic<std::uint32_t> next{0};
  thread_local const std::uint32_t index = next.fetch_add(1);
  return index;
}

void Profiler::name_this_thread(const std::string& name) {
  const std::uint32_t thread = thread_index();
  std::lock_guard lock(mutex_);
  thread_names_[thread] = name;
}

std::map<std::uint32_t, std::string> Profiler::thread_names() const {
  std::lock_guard lock(mutex_);
  return thread_names_;
}

void Profiler::record(std::string name, std::int64_t start_ns, std::int64_t end_ns) {
  const std::uint32_t thread = thread_index();
  std::lock_guard lock(mutex_);
  spans_.push_back(ProfileSpan{std::move(name), start_ns, end_ns, thread});
}

std::vector<ProfileSpan> Profiler::spans() const {
  std::lock_guard lock(mutex_);
  return spans_;
}

std::vector<ProfileSpan> Profiler::take() {
  std::lock_guard lock(mutex_);
  std::vector<ProfileSpan> out;
  out.swap(spans_);
  return out;
}

void Profiler::clear() {
  std::lock_guard lock(mutex_);
  spans_.clear();
}

}  // namespace trainlab
