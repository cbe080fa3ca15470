// A small profiler: named spans on a steady clock, per thread. Recording costs one relaxed load
// when disabled. The trainer times its phases through it; a later layer exports Chrome traces.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace trainlab {

struct ProfileSpan {
  std::string name;
  std::int64_t start_ns;  // since the profiler's epoch (process start)
  std::int64_t end_ns;
  std::uint32_t thread;  // small per-thread index, 0 for the first thread that recorded
};

class Profiler {
 public:
  static Profiler& instance();
  static std::int64_t now_ns();
  static std::uint32_t thread_index();

  // Names the calling thread's track in traces ("main", "loader worker 1", ...).
  void name_this_thread(const std::string& name);
  std::map<std::uint32_t, std::string> thread_names() const;

  void set_enabled(bool enabled) { enabled_.store(enabled, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void record(std::string name, std::int64_t start_ns, std::int64_t end_ns);
  std::vector<ProfileSpan> spans() const;
  std::vector<ProfileSpan> take();  // returns the spans and clears them
  void clear();

 private:
  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  std::vector<ProfileSpan> spans_;
  std::map<std::uint32_t, std::string> thread_names_;
};

// Records a span from construction to destruction when the profiler is enabled.
class ScopedSpan {
 public:
  explicit ScopedSpan(const char* name) : name_(name), active_(Profiler::instance().enabled()) {
    if (active_) start_ns_ = Profiler::now_ns();
  }
  ~ScopedSpan() {
    if (active_) Profiler::instance().record(name_, start_ns_, Profiler::now_ns());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  const char* name_;
  bool active_;
  std::int64_t start_ns_ = 0;
};

#define TL_PROFILE_CONCAT_INNER(a, b) a##b
#define TL_PROFILE_CONCAT(a, b) TL_PROFILE_CONCAT_INNER(a, b)
#define TL_PROFILE_SCOPE(name) ::trainlab::ScopedSpan TL_PROFILE_CONCAT(tl_profile_span_, __LINE__)(name)

}  // namespace trainlab
