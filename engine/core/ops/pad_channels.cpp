// The parameter-free shortcut of a residual network's downsampling block (He et al. 2016's
// option A): the input subsampled by `stride` in H and W (x[:, :, ::s, ::s]) and zero channels
// added around it, `before` of them first, up to `channels`.
//   forward    y = 0; y[:, before + c, h, w] = x[:, c, h s, w s]
//   backward   dx = 0; dx[:, c, h s, w s] = dy[:, before + c, h, w]
// Both are the backend's strided copy into a zeroed tensor, in the input's memory format.
#include "engine/core/ops.h"
#include "engine/core/ops/common.h"

namespace trainlab {

namespace {

// x viewed as [N, C, ceil(H/s), ceil(W/s)] every s-th row and column.
Layout subsampled(const Tensor& x, std::int64_t stride, const Shape& shape) {
  Layout l = x.layout();
  l.shape = shape;
  l.strides[2] *= stride;
  l.strides[3] *= stride;
  return l;
}

// y's channels [before, before + shape[1]) as a layout of `shape`.
Layout channel_window(const Tensor& y, std::int64_t before, const Shape& shape) {
  Layout l = y.layout();
  l.offset += before * l.strides[1];
  l.shape = shape;
  return l;
}

// The start of t's storage: a Layout's offset counts from there.
void* storage_of(const Tensor& t) { return t.impl()->storage->data(); }

}  // namespace

Tensor pad_channels(const Tensor& x_in, std::int64_t channels, std::int64_t stride, std::int64_t before) {
  TL_SPAN("pad_channels.forward");
  ops_detail::check_defined("pad_channels", "input", x_in);
  ops_detail::check_rank("pad_channels", "input", x_in, 4, "[N, C, H, W]");
  const std::int64_t in_channels = x_in.size(1);
  TL_CHECK(stride >= 1, "pad_channels: stride must be >= 1, got " + std::to_string(stride));
  TL_CHECK(before >= 0 && in_channels + before <= channels, "pad_channels: " + std::to_string(in_channels) +
                                                                " channels placed after " + std::to_string(before) +
                                                                " do not fit in " + std::to_string(channels));
  const MemoryFormat format = x_in.memory_format();
  const Tensor x = ops_detail::dense(x_in, format);
  const std::int64_t h = (x.size(2) - 1) / stride + 1, w = (x.size(3) - 1) / stride + 1;
  const Shape window{x.size(0), in_channels, h, w};
  Backend& be = x.backend();
  Tensor y = Tensor::empty({x.size(0), channels, h, w}, x.dtype(), be, format);
  be.fill(x.dtype(), y.raw_data(), y.numel(), 0.0);
  be.copy_strided(x.dtype(), storage_of(x), subsampled(x, stride, window), storage_of(y),
                  channel_window(y, before, window));
  const Shape in_shape = x.shape();
  return record(y, "pad_channels", {x_in}, [=](const Tensor& g, const std::vector<bool>&) {
    const Tensor dy = ops_detail::dense(g, format);
    Backend& backend = dy.backend();
    Tensor dx = Tensor::empty(in_shape, dy.dtype(), backend, format);
    backend.fill(dy.dtype(), dx.raw_data(), dx.numel(), 0.0);
    backend.copy_strided(dy.dtype(), storage_of(dy), channel_window(dy, before, window), storage_of(dx),
                         subsampled(dx, stride, window));
    return std::vector<Tensor>{dx};
  });
}

}  // namespace trainlab
