// The memory rule of device graphs (CUDA graphs; see Backend::begin_capture). A recorded graph
// reads and writes the very addresses its capture was given, at every replay, so:
//  - a block allocated while capturing belongs to the graphs for good: when it is freed (during
//    the capture or later) it comes back here, never to the eager free lists;
//  - a block freed while capturing may be one that the recorded work touches: it comes here too;
//  - a capture reuses blocks from here (its own earlier frees, or an earlier capture's), which is
//    safe because graphs replay in the order they were captured, on one stream.
// Eager work never receives one of these blocks, so it cannot clobber what a replay writes.
// Not thread-safe: the owning allocator holds its lock around every call.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace trainlab {

class GraphPool {
 public:
  bool capturing() const { return capturing_; }
  void begin_capture() { capturing_ = true; }
  void end_capture() { capturing_ = false; }

  // While capturing: a pooled block of exactly `size` bytes, or null (then the allocator makes a
  // new block and hands it to adopt()).
  void* take(std::size_t size) {
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  void adopt(void* p) { owned_.insert(p); }

  // Whether the pool takes this freed block (a graph block, or any block freed while capturing);
  // false: it is an ordinary block and goes to the allocator's own free list.
  bool give_back(void* p, std::size_t size) {
    if (!capturing_ && owned_.count(p) == 0) return false;
    owned_.insert(p);
    free_[size].push_back(p);
    return true;
  }

  std::size_t blocks() const { return owned_.size(); }

  // Every pooled block, for an owner that is going away and frees them (none may be in use).
  std::vector<void*> drain() {
    std::vector<void*> out;
    for (auto& [size, list] : free_) out.insert(out.end(), list.begin(), list.end());
    free_.clear();
    owned_.clear();
    return out;
  }

 private:
  bool capturing_ = false;
  std::unordered_set<void*> owned_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
};

}  // namespace trainlab
