#include "backends/cpu/host_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/error.h"

namespace trainlab::cpu {

HostAllocator::~HostAllocator() {
  for (auto& [size, blocks] : free_lists_) {
    for (void* p : blocks) std::free(p);
  }
}

std::size_t HostAllocator::rounded(std::size_t bytes) {
  // Small blocks to 64 bytes, large ones to 4 KiB: few distinct sizes, little waste.
  const std::size_t unit = bytes <= 65536 ? 64 : 4096;
  return std::max<std::size_t>(unit, (bytes + unit - 1) / unit * unit);
}

void* HostAllocator::allocate(std::size_t bytes) {
  const std::size_t size = rounded(bytes);
  void* ptr = nullptr;
  if (caching_) {
    std::lock_guard lock(mutex_);
    auto it = free_lists_.find(size);
    if (it != free_lists_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= static_cast<std::int64_t>(size);
    }
  }
  if (!ptr) {
    ptr = std::aligned_alloc(64, size);
    if (!ptr) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    allocations_.fetch_add(1, std::memory_order_relaxed);
  }
  const auto in_use = bytes_in_use_.fetch_add(static_cast<std::int64_t>(bytes)) + static_cast<std::int64_t>(bytes);
  auto peak = peak_bytes_.load();
  while (in_use > peak && !peak_bytes_.compare_exchange_weak(peak, in_use)) {
  }
  return ptr;
}

void HostAllocator::deallocate(void* ptr, std::size_t bytes) noexcept {
  if (!ptr) return;
  bytes_in_use_.fetch_sub(static_cast<std::int64_t>(bytes));
  if (!caching_) {
    std::free(ptr);
    return;
  }
  const std::size_t size = rounded(bytes);
  std::lock_guard lock(mutex_);
  try {
    free_lists_[size].push_back(ptr);
    cached_bytes_ += static_cast<std::int64_t>(size);
  } catch (...) {
    std::free(ptr);  // could not record it: give it back rather than leak
  }
}

AllocatorStats HostAllocator::stats() const { return {allocations_.load(), bytes_in_use_.load(), peak_bytes_.load()}; }

std::int64_t HostAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

}  // namespace trainlab::cpu
