#include "comm/watchdog.h"

#include <fmt/format.h>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace trainlab::comm {

namespace {

class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog watchdog;
    return watchdog;
  }
  void add(DeadlineGuard* guard) {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    guards_.push_back(guard);
  }
  void remove(DeadlineGuard* guard) {
    std::lock_guard lock(mutex_);
    guards_.erase(std::find(guards_.begin(), guards_.end(), guard));
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(50));
      const auto now = std::chrono::steady_clock::now();
      for (DeadlineGuard* guard : guards_) {
        const double waited = std::chrono::duration<double>(now - guard->start).count();
        if (waited <= guard->comm.timeout()) continue;
        const std::string message = fmt::format(
            "timed out after {:.1f} s waiting for {} (rank {} of {} in this communicator): that peer is stalled or "
            "dead; ending the job (--comm-timeout {})",
            waited, guard->what(), guard->comm.rank(), guard->comm.size(), guard->comm.timeout());
        guard->comm.abort(message, 3);  // does not return
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<DeadlineGuard*> guards_;
  std::thread thread_;
  bool stopping_ = false;
};

}  // namespace

DeadlineGuard::DeadlineGuard(Communicator& c, std::function<std::string()> w)
    : comm(c), what(std::move(w)), start(std::chrono::steady_clock::now()) {
  Watchdog::instance().add(this);
}

DeadlineGuard::~DeadlineGuard() { Watchdog::instance().remove(this); }

}  // namespace trainlab::comm
