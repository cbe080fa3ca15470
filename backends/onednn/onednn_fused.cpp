// The onednn backend's the fused patterns (backends/fusion.h): the conv block in one call
// (backends/onednn/onednn_backend.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/onednn/onednn_backend.h"

namespace trainlab::onednn {

OpSupport OnednnBackend::supports_fused(const FusedPattern& pattern, DType dtype, bool channels_last,
                                        const FusedShapes& shapes) const {
  if (pattern.anchor == FusedAnchor::conv2d && pattern.folded_norm && !pattern.training && !pattern.bias &&
      !pattern.max_pool) {
    const OpSupport conv = supports_op(BackendOp::conv2d, dtype, channels_last);
    if (!conv.runs()) return conv;
    if (!(dtype == DType::f32 || (dtype == DType::bf16 && native(dtype, Family::conv))))
      return OpSupport::unsupported("the folded convolution runs in f32, and in bf16 where the convolution is native");
    if (!channels_last)
      return OpSupport::unsupported("the folded convolution runs channels_last (its output is the residual's buffer)");
    return OpSupport::native(
        "batch norm folded into the oneDNN convolution (scaled weights, f32 bias), the residual "
        "a sum post-op, the ReLU an eltwise one");
  }
  if (!(pattern.anchor == FusedAnchor::conv2d && pattern.max_pool && pattern.activation == Activation::relu))
    return CpuBackend::supports_fused(pattern, dtype, channels_last, shapes);
  const OpSupport conv = supports_op(BackendOp::conv2d, dtype, channels_last);
  if (!conv.runs()) return conv;
  if (!pattern.training) {
    if (conv.level != Support::native) return conv;
    if (shapes.conv != nullptr && cpu::winograd::chosen(dtype, *shapes.conv, cpu::winograd::Pass::inference))
      return OpSupport::native(
          "trainlab's Winograd F(4x4,3x3) into scratch (TRAINLAB_CONV_ALGO), a slice of the batch at a time, "
          "then the shared 2x2 pool loops");
    return OpSupport::native(
        "oneDNN convolution into scratch, a slice of the batch at a time, then the shared 2x2 pool loops");
  }
  if (!(dtype == DType::f32 || (dtype == DType::bf16 && native(dtype, Family::conv))))
    return OpSupport::unsupported("training's fused block runs in f32, and in bf16 where the convolution is native");
  if (shapes.conv == nullptr || shapes.pool == nullptr)
    return OpSupport::native("first-layer shapes only (few input channels, no input gradient)");
  if (!(cpu::conv_few::applies(dtype, *shapes.conv) && cpu::conv_few::pools_2x2(*shapes.conv, *shapes.pool) &&
        shapes.pool->relu))
    return OpSupport::unsupported("training's fused block takes first-layer shapes only (few input channels)");
  return OpSupport::native("oneDNN convolution, the pool's places kept; backward unpools into the weight gradient");
}

void OnednnBackend::conv2d_pool_forward(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                        const void* weight, const void* bias, void* y, std::uint8_t* places) {
  if (places != nullptr) {
    const OpSupport fused = supports_fused(FusedPattern::conv_block(true), dtype, s.channels_last, {&s, &p});
    TL_CHECK(fused.runs(), "onednn: conv2d_pool_forward in training: " + fused.how);
  }
  conv_pool(dtype, s, p, x, weight, bias, y, places);
}

void OnednnBackend::conv2d_pool_backward_weights(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                                 const void* dy, const std::uint8_t* places, void* dweight,
                                                 void* dbias) {
  const OpSupport fused = supports_fused(FusedPattern::conv_block(true), dtype, s.channels_last, {&s, &p});
  TL_CHECK(fused.runs(), "onednn: conv2d_pool_backward_weights: " + fused.how);
  guarded("conv2d_pool_backward_weights", [&] {
    Scratch scratch(*this);
    void* workspace = scratch.get(cpu::conv_few::pooled_workspace_bytes(dtype, s, p, threads_));
    cpu::conv_few::backward_weights_pooled(dtype, s, p, x, dy, places, dweight, dbias, threads_, workspace);
  });
}

void OnednnBackend::conv_pool(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                              const void* weight, const void* bias, void* y, std::uint8_t* places) {
  check(dtype, BackendOp::conv2d, s.channels_last);
  TL_CHECK(cpu::conv_few::pools_2x2(s, p),
           "onednn: conv2d_pool_forward pools the convolution's output with 2x2 windows, "
           "stride 2, no padding");
  // A slice of the batch at a time, so that the convolution's output is still in this core's
  // cache when the pool reads it: slices of about kSliceBytes of it (the last one shorter).
  const auto per_sample =
      static_cast<std::int64_t>(s.out_channels * s.out_h() * s.out_w()) * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t slice = std::clamp<std::int64_t>(kSliceBytes / per_sample, 1, s.batch);
  if (places == nullptr && conv_winograd(dtype, s, cpu::winograd::Pass::inference)) {
    guarded("conv2d_pool_forward", [&] { winograd_pool(s, p, slice, x, weight, bias, y); });
    return;
  }
  const std::size_t x_sample = dtype_size(dtype) * static_cast<std::size_t>(s.in_channels * s.in_h * s.in_w);
  const std::int64_t y_cells = p.channels * p.out_h() * p.out_w();
  const std::size_t y_sample = dtype_size(dtype) * static_cast<std::size_t>(y_cells);
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += slice) {
    Conv2dShape cs = s;
    Pool2dShape ps = p;
    cs.batch = ps.batch = std::min(slice, s.batch - n0);
    conv_pool_slice(dtype, cs, ps, static_cast<const char*>(x) + static_cast<std::size_t>(n0) * x_sample, weight, bias,
                    static_cast<char*>(y) + static_cast<std::size_t>(n0) * y_sample,
                    places != nullptr ? places + n0 * y_cells : nullptr);
  }
}

void OnednnBackend::winograd_pool(const Conv2dShape& s, const Pool2dShape& p, std::int64_t slice, const void* x,
                                  const void* weight, const void* bias, void* y) {
  Scratch scratch(*this);
  auto* u = scratch.get<float>(static_cast<std::int64_t>(cpu::winograd::weights_floats(s.in_channels, s.out_channels)));
  cpu::winograd::transform_weights(static_cast<const float*>(weight), s.out_channels, s.in_channels, false, u);
  void* workspace = scratch.get(cpu::winograd::workspace_bytes(s.in_channels, s.out_channels, threads_));
  const std::int64_t conv_sample = s.out_channels * s.out_h() * s.out_w();
  auto* conv_out = scratch.get<float>(std::min(slice, s.batch) * conv_sample);
  const std::int64_t x_sample = s.in_channels * s.in_h * s.in_w, y_sample = p.channels * p.out_h() * p.out_w();
  for (std::int64_t n0 = 0; n0 < s.batch; n0 += slice) {
    const std::int64_t count = std::min(slice, s.batch - n0);
    const float* xs = static_cast<const float*>(x) + n0 * x_sample;
    float* ys = static_cast<float*>(y) + n0 * y_sample;
    if (!cpu::winograd::convolve(xs, count, s.in_h, s.in_w, s.in_channels, u, s.out_channels,
                                 static_cast<const float*>(bias), /*relu=*/false, conv_out, threads_, workspace)) {
      // A NaN or an infinity, spread over its tile by the transforms: the slice again by the direct
      // convolution, whose outputs are NaN (or infinite) exactly where the sum's are.
      Conv2dShape cs = s;
      Pool2dShape ps = p;
      cs.batch = ps.batch = count;
      conv_pool_slice(DType::f32, cs, ps, xs, weight, bias, ys, nullptr);
      continue;
    }
    cpu::pool2x2::forward_blocked_relu(conv_out, count, s.out_channels, /*block=*/s.out_channels, s.out_h(), s.out_w(),
                                       ys, p.channels_last, nullptr, threads_);
  }
}

void OnednnBackend::conv_pool_slice(DType dtype, const Conv2dShape& s, const Pool2dShape& p, const void* x,
                                    const void* weight, const void* bias, void* y, std::uint8_t* places) {
  guarded("conv2d_pool_forward", [&] {
    Scratch scratch(*this);
    const std::string k = key(dtype, s, bias != nullptr, p.channels_last);
    Entry& e = entry("conv_pool_inference", k, dtype, Family::conv, [&](Entry& fresh, dt c) {
      const ConvDescs cd = conv_descs(dtype, c, s);
      const memory::dims dst_dims{s.batch, s.out_channels, s.out_h(), s.out_w()};
      // The block size of a layout the pool reads (channels_last: one block of them all), 0 for
      // others. Blocks of 8 or 16 in f32, and in the 16-bit types only where no nhwc output has a
      // kernel (`lenient`: their vector pool loops take 32 channels at a time).
      auto block_of = [&](const memory::desc& d, bool lenient) -> std::int64_t {
        if (d == memory::desc(dst_dims, c, tag::nhwc)) return s.out_channels;
        if (c != dt::f32 && !lenient) return 0;
        if (s.out_channels % 16 == 0 && d == memory::desc(dst_dims, c, tag::nChw16c)) return 16;
        if (s.out_channels % 8 == 0 && d == memory::desc(dst_dims, c, tag::nChw8c)) return 8;
        return 0;
      };
      // x in place with the output oneDNN likes; else with channels_last output; else x reordered
      // too: the first of these that has a kernel (not oneDNN's reference loops) and a layout the
      // pool reads.
      const memory::desc src_here(cd.src.dims(), c, s.channels_last ? tag::nhwc : tag::nchw);
      const memory::desc dst_nhwc(dst_dims, c, tag::nhwc);
      // Each as an inference primitive, then as a training one (the same values: oneDNN 2.6 has
      // some kernels only for training, bf16's first layer on avx512_core among them).
      struct Try {
        dnnl::prop_kind prop;
        memory::desc src, dst;
      };
      const auto inference = dnnl::prop_kind::forward_inference, training = dnnl::prop_kind::forward_training;
      const Try tries[] = {{inference, src_here, cd.dst_any}, {inference, src_here, dst_nhwc},
                           {inference, cd.src_any, dst_nhwc}, {training, src_here, cd.dst_any},
                           {training, src_here, dst_nhwc},    {training, cd.src_any, dst_nhwc}};
      auto pd_of = [&](const Try& t) {
        const auto desc =
            bias ? dnnl::convolution_forward::desc(t.prop, dnnl::algorithm::convolution_direct, t.src, cd.weights_any,
                                                   cd.bias_inner, t.dst, cd.strides, cd.padding, cd.padding)
                 : dnnl::convolution_forward::desc(t.prop, dnnl::algorithm::convolution_direct, t.src, cd.weights_any,
                                                   t.dst, cd.strides, cd.padding, cd.padding);
        return dnnl::convolution_forward::primitive_desc(desc, engine_);
      };
      auto take = [&](const dnnl::convolution_forward::primitive_desc& pd, std::int64_t block) {
        fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                          operand(cd.bias, cd.bias_inner, true)};
        fresh.dst_inner = pd.dst_desc();
        fresh.dst_block = block;
        fresh.primitive = dnnl::convolution_forward(pd);
        note_impl(pd.impl_info_str(), dtype, c);
      };
      for (bool lenient : {false, true}) {
        for (const Try& t : tries) {
          const auto pd = pd_of(t);
          const std::int64_t block = block_of(pd.dst_desc(), lenient);
          if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0 || block == 0) continue;
          take(pd, block);
          return;
        }
      }
      const auto pd = pd_of(tries[std::size(tries) - 1]);  // oneDNN's reference loops, nhwc out
      take(pd, block_of(pd.dst_desc(), true));
    });
    const bool inference = frozen();
    bind_in(e.operands[0], x, scratch);
    bind_weights(e.operands[1], weight, inference ? "conv_pool|" + k : "", scratch);
    if (bias) bind_in(e.operands[2], bias, scratch);
    memory dst(e.dst_inner, engine_, scratch.get(e.dst_inner.get_size()));
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, e.operands[0].inner}, {DNNL_ARG_WEIGHTS, e.operands[1].inner}, {DNNL_ARG_DST, dst}};
    if (bias) args[DNNL_ARG_BIAS] = e.operands[2].inner;
    e.primitive.execute(stream_, args);
    stream_.wait();
    // The pool, in the convolution's dtype (emulated: f32, narrowed to y's dtype after: rounding
    // commutes with max and ReLU, so this is the composed ops' result).
    const dt c = e.dst_inner.data_type();
    const std::int64_t outputs = p.batch * p.channels * p.out_h() * p.out_w();
    void* out = c == data_type(dtype) ? y : scratch.get(static_cast<std::size_t>(outputs) * sizeof(float));
    auto pool = [&](auto* in) {
      using S = std::remove_const_t<std::remove_pointer_t<decltype(in)>>;
      cpu::pool2x2::forward_blocked_relu(in, s.batch, s.out_channels, e.dst_block, s.out_h(), s.out_w(),
                                         static_cast<S*>(out), p.channels_last, places, threads_);
    };
    if (c == dt::bf16) {
      pool(static_cast<const bf16*>(dst.get_data_handle()));
    } else if (c == dt::f16) {
      pool(static_cast<const f16*>(dst.get_data_handle()));
    } else {
      pool(static_cast<const float*>(dst.get_data_handle()));
    }
    if (out != y) CpuBackend::cast(DType::f32, out, dtype, y, outputs);
  });
}

namespace {

// The folded affine per output channel from batch norm's running statistics: scale = gamma /
// sqrt(var + eps) (the weights' factor), shift = beta - mean scale (the bias), as batch norm's
// inference kernels compute them.
void fold(const BatchNormFold& n, std::int64_t channels, std::vector<float>& scale, std::vector<float>& shift) {
  const auto* gamma = static_cast<const float*>(n.gamma);
  const auto* beta = static_cast<const float*>(n.beta);
  const auto* mean = static_cast<const float*>(n.running_mean);
  const auto* var = static_cast<const float*>(n.running_var);
  scale.resize(static_cast<std::size_t>(channels));
  shift.resize(static_cast<std::size_t>(channels));
  for (std::int64_t c = 0; c < channels; ++c) {
    const double invstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + n.eps));
    const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
    scale[static_cast<std::size_t>(c)] = static_cast<float>(g * invstd);
    shift[static_cast<std::size_t>(c)] = static_cast<float>(b - static_cast<double>(mean[c]) * g * invstd);
  }
}

}  // namespace

void OnednnBackend::conv2d_norm_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight,
                                        const BatchNormFold& norm, const BatchNormEpilogue& epilogue, void* y) {
  const bool residual = epilogue.residual != nullptr;
  const FusedPattern pattern = FusedPattern::conv_norm(residual, epilogue.relu ? Activation::relu : Activation::none);
  const OpSupport fused = supports_fused(pattern, dtype, s.channels_last, {});
  if (!fused.runs()) throw Unsupported(name() + ": conv2d_norm_forward: " + fused.how);
  guarded("conv2d_norm_forward", [&] {
    Scratch scratch(*this);
    std::vector<float> scale, shift;
    fold(norm, s.out_channels, scale, shift);
    // The weights scaled per output channel, in f32, rounded once to the convolution's dtype.
    const std::int64_t per_out = s.in_channels * s.kernel_h * s.kernel_w, count = s.out_channels * per_out;
    float* scaled = scratch.get<float>(count);
    if (dtype == DType::bf16) {
      const auto* w = static_cast<const bf16*>(weight);
      for (std::int64_t i = 0; i < count; ++i)
        scaled[i] = static_cast<float>(w[i]) * scale[static_cast<std::size_t>(i / per_out)];
    } else {
      const auto* w = static_cast<const float*>(weight);
      for (std::int64_t i = 0; i < count; ++i) scaled[i] = w[i] * scale[static_cast<std::size_t>(i / per_out)];
    }
    void* w_conv = scaled;
    if (dtype == DType::bf16) {
      w_conv = scratch.get(static_cast<std::size_t>(count) * sizeof(bf16));
      CpuBackend::cast(DType::f32, scaled, DType::bf16, w_conv, count);
    }
    // The sum post-op adds what y holds: the residual, in place (channels_last: y is the primitive's
    // own output buffer).
    if (residual)
      std::memcpy(y, epilogue.residual,
                  static_cast<std::size_t>(s.batch * s.out_channels * s.out_h() * s.out_w()) * dtype_size(dtype));
    const std::string k = key(dtype, s, residual, epilogue.relu);
    Entry& e = entry("conv_norm", k, dtype, Family::conv, [&](Entry& fresh, dt c) {
      const ConvDescs cd = conv_descs(dtype, c, s);
      const memory::desc bias_f32({s.out_channels}, dt::f32, tag::x);
      const auto desc = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                        bias_f32, cd.dst_any, cd.strides, cd.padding, cd.padding);
      dnnl::post_ops ops;
      if (residual) ops.append_sum(1.f);
      // ReLU as ELU with alpha 0, as relu_attr: NaN passes.
      if (epilogue.relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_elu, 0.f, 0.f);
      dnnl::primitive_attr attr;
      attr.set_post_ops(ops);
      const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine_);
      TL_CHECK(pd.dst_desc() == cd.dst, "onednn: conv2d_norm_forward: the primitive wants another output layout");
      fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                        operand(bias_f32, bias_f32, true), operand(cd.dst, pd.dst_desc(), false)};
      fresh.primitive = dnnl::convolution_forward(pd);
      note_impl(pd.impl_info_str(), dtype, c);
    });
    bind_in(e.operands[0], x, scratch);
    bind_weights(e.operands[1], w_conv, "", scratch);
    bind_in(e.operands[2], shift.data(), scratch);
    bind_out(e.operands[3], y, scratch);
    e.primitive.execute(stream_, {{DNNL_ARG_SRC, e.operands[0].inner},
                                  {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                  {DNNL_ARG_BIAS, e.operands[2].inner},
                                  {DNNL_ARG_DST, e.operands[3].inner}});
    finish_out(e.operands[3]);
    stream_.wait();
  });
}

}  // namespace trainlab::onednn
