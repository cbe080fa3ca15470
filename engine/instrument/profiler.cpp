#include "engine/instrument/profiler.h"

#include <chrono>

#include "engine/core/observer.h"

namespace trainlab {

Profiler& Profiler::instance() {
  static Profiler profiler;
  return profiler;
}

namespace {
// Spans are kept in ns since the profiler's epoch (the first use, at the latest when libtrainlab
// loads); the core's spans come in ns of the steady clock.
std::int64_t epoch_ns() {
  static const std::int64_t epoch = observe::now_ns();
  return epoch;
}

// The profiler as a subscriber of the engine core's spans (an op's forward and backward, a
// reorder, a recomputation): recorded while it is enabled.
class CoreSpans final : public EngineObserver {
 public:
  bool wants_spans() const override { return Profiler::instance().enabled(); }
  void on_span(std::string_view name, std::int64_t start_ns, std::int64_t end_ns) override {
    Profiler::instance().record(std::string(name), start_ns - epoch_ns(), end_ns - epoch_ns());
  }
};
CoreSpans core_spans;
const bool core_spans_subscribed = (epoch_ns(), subscribe(core_spans), true);
}  // namespace

std::int64_t Profiler::now_ns() { return observe::now_ns() - epoch_ns(); }

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
