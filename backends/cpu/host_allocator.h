// Host memory for the CPU backends: 64-byte aligned, counted, and optionally cached. A training
// step asks for the same sizes every time, so with caching on, a freed block is kept on a free
// list for its exact (rounded) size and the next request of that size reuses it: after the first
// step, a steady-state step makes no system allocation (AllocatorStats::allocations stops
// growing). The reference backend runs uncached, so AddressSanitizer sees every buffer's life.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"

namespace trainlab::cpu {

class HostAllocator {
 public:
  explicit HostAllocator(bool caching) : caching_(caching) {}
  ~HostAllocator();
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;

  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes) noexcept;
  AllocatorStats stats() const;
  std::int64_t cached_bytes() const;

 private:
  static std::size_t rounded(std::size_t bytes);
  bool caching_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists_;  // rounded size -> blocks
  std::int64_t cached_bytes_ = 0;
  std::atomic<std::int64_t> allocations_{0}, bytes_in_use_{0}, peak_bytes_{0};
};

}  // namespace trainlab::cpu
