// DDP's buckets in a window the host's ranks share, reduced by the single-copy all-reduce
// (comm/single_copy_allreduce.h): the gradients are written there by backward (they are the
// buckets' views) and averaged where they lie, S read and S written per rank, where the ring moves
// about 3.5 S. Plain DDP (zero 0) without compression, on a CPU backend, over a communicator that can
// map host memory (MPI with every rank on one host); `single_copy` puts every bucket there, `auto`
// those from the thresholds' single_copy_from. Anywhere else the buckets stay in the backend's
// memory and describe() says why.
#include <fmt/format.h>

#include <exception>

#include "comm/ddp.h"

namespace trainlab::comm {

namespace {

constexpr std::int64_t kWindowAlign = 64;  // each bucket on a cache line of its own

}  // namespace

void Ddp::open_window() {
  const bool asked = options_.allreduce == Algorithm::single_copy;
  if (!asked && options_.allreduce != Algorithm::automatic) return;
  if (comm_.size() == 1) return;  // nothing to reduce
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype_));
  std::int64_t bytes = 0;
  int chosen = 0;
  for (Bucket& bucket : buckets_) {
    const std::int64_t size = bucket.numel * elem;
    if (!asked && size < thresholds_.single_copy_from) continue;
    bucket.window_offset = bytes;
    bytes += (size + kWindowAlign - 1) / kWindowAlign * kWindowAlign;
    ++chosen;
  }
  if (chosen == 0) return;  // auto: no bucket is large enough (the same on every rank: verify_thresholds)
  std::string why_not;      // the same answer on every rank (the same options, backend and communicator)
  if (options_.zero != 0) {
    why_not = fmt::format("ZeRO-{} reduce-scatters its buckets", options_.zero);
  } else if (options_.grad_compress != GradCompression::none) {
    why_not = std::string("the buckets travel compressed to ") + dtype_name(wire_dtype());
  } else if (!direct_ || backend_->device_type() != DeviceType::cpu) {
    why_not = "the buckets are in " + std::string(device_type_name(backend_->device_type())) + " memory";
  }
  std::unique_ptr<SingleCopyAllreduce> window;
  if (why_not.empty()) {
    window = std::make_unique<SingleCopyAllreduce>(comm_, static_cast<std::size_t>(bytes));  // a collective
    if (!window->shared()) why_not = window->describe();
  }
  if (!why_not.empty()) {
    for (Bucket& bucket : buckets_) bucket.window_offset = -1;
    if (asked) window_note_ = "single_copy: " + why_not + "; the ring reduces them";
    return;
  }
  window_ = std::move(window);
  window_note_ =
      fmt::format("{} of {} bucket{} single-copy ({}, {:.2f} MiB per rank)", chosen, buckets_.size(),
                  buckets_.size() == 1 ? "" : "s", window_->describe(), static_cast<double>(bytes) / (1 << 20));
}

void Ddp::close_window() {
  if (window_ == nullptr) return;
  // The gradients outlive DDP (they are the buckets' views): their memory becomes this process's.
  for (Bucket& bucket : buckets_)
    if (bucket.window_offset >= 0 && bucket.buffer.defined()) bucket.buffer.own_data();
  // Freeing the window is a collective. A rank leaving by an error does not wait there for the
  // others (they may never come): the window stays mapped until the process ends.
  if (std::uncaught_exceptions() > 0) {
    (void)window_.release();
    return;
  }
  window_.reset();
}

}  // namespace trainlab::comm
