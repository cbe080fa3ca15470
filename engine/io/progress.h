// A long job's progress line (make-dataset's checks and writes): handed to the caller's sink at
// most every two seconds, and always for the last item, so a run of millions of images says where
// it is without printing a line per image.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace trainlab {

class ThrottledProgress {
 public:
  using Sink = std::function<void(const std::string&)>;
  explicit ThrottledProgress(const Sink& sink) : sink_(sink) {}

  // Says the line `line()` builds when one is due for `done` of `total` (the last always is).
  template <class Line>
  void tick(std::int64_t done, std::int64_t total, const Line& line) {
    if (!sink_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    sink_(line());
  }

 private:
  const Sink& sink_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace trainlab
