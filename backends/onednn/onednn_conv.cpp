// The onednn backend's convolution: forward, backward-data, backward-weights (backends/onednn/onednn_backend.h).
#include "backends/onednn/onednn_backend.h"

namespace trainlab::onednn {

void OnednnBackend::conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight,
                                   const void* bias, bool relu, void* y) {
  check(dtype, BackendOp::conv2d, s.channels_last);
  // Frozen weights: inference's forward, which no gradient goes through (its primitives are
  // oneDNN's inference ones). Winograd's outputs stand where they are all finite; elsewhere its
  // transforms have spread a NaN or an infinity over the tile, and the direct convolution below
  // computes the call again, NaN exactly where the sum has it.
  const auto pass = frozen() ? cpu::winograd::Pass::inference : cpu::winograd::Pass::forward;
  if (conv_winograd(dtype, s, pass)) {
    bool finite = false;
    guarded("conv2d_forward", [&] {
      finite = winograd(s.batch, s.in_h, s.in_w, s.in_channels, x, weight, s.out_channels, false, bias, relu, y);
    });
    if (finite) return;
  }
  guarded("conv2d_forward", [&] {
    Scratch scratch(*this);
    const bool inference = frozen();
    const auto prop = inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    const std::string k = key(dtype, s, bias != nullptr, relu);
    Entry& e = entry(inference ? "conv_inference" : "conv_fwd", k, dtype, Family::conv, [&](Entry& fresh, dt c) {
      const ConvDescs cd = conv_descs(dtype, c, s);
      const auto desc =
          bias ? dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                 cd.bias_inner, cd.dst_any, cd.strides, cd.padding, cd.padding)
               : dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                 cd.dst_any, cd.strides, cd.padding, cd.padding);
      const dnnl::convolution_forward::primitive_desc pd(desc, relu_attr(relu), engine_);
      fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                        operand(cd.bias, cd.bias_inner, true), operand(cd.dst, pd.dst_desc(), false)};
      fresh.primitive = dnnl::convolution_forward(pd);
      note_impl(pd.impl_info_str(), dtype, c);
    });
    bind_in(e.operands[0], x, scratch);
    bind_weights(e.operands[1], weight, inference ? "conv|" + k : "", scratch);
    if (bias) bind_in(e.operands[2], bias, scratch);
    bind_out(e.operands[3], y, scratch);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                         {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                         {DNNL_ARG_DST, e.operands[3].inner}};
    if (bias) args[DNNL_ARG_BIAS] = e.operands[2].inner;
    e.primitive.execute(stream_, args);
    finish_out(e.operands[3]);
    stream_.wait();
  });
}

void OnednnBackend::conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight,
                                         void* dx) {
  check(dtype, BackendOp::conv2d, s.channels_last);
  if (conv_winograd(dtype, s, cpu::winograd::Pass::backward_data)) {
    // The same convolution of dy with the kernel turned 180 degrees, its channels swapped; where a
    // NaN or an infinity came out (spread over its tile), the direct pass below again.
    bool finite = false;
    guarded("conv2d_backward_data", [&] {
      finite =
          winograd(s.batch, s.out_h(), s.out_w(), s.out_channels, dy, weight, s.in_channels, true, nullptr, false, dx);
    });
    if (finite) return;
  }
  guarded("conv2d_backward_data", [&] {
    Scratch scratch(*this);
    Entry& e = entry("conv_bwd_data", key(dtype, s), dtype, Family::conv, [&](Entry& fresh, dt c) {
      const ConvDescs cd = conv_descs(dtype, c, s);
      const dnnl::convolution_forward::primitive_desc hint(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                          cd.src_any, cd.weights_any, cd.dst_any, cd.strides, cd.padding, cd.padding),
          engine_);
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, cd.src_any, cd.weights_any,
                                                cd.dst_any, cd.strides, cd.padding, cd.padding),
          engine_, hint);
      fresh.operands = {operand(cd.dst, pd.diff_dst_desc(), true), operand(cd.weights, pd.weights_desc(), true),
                        operand(cd.src, pd.diff_src_desc(), false)};
      fresh.primitive = dnnl::convolution_backward_data(pd);
      note_impl(pd.impl_info_str(), dtype, c);
    });
    bind_in(e.operands[0], dy, scratch);
    bind_in(e.operands[1], weight, scratch);
    bind_out(e.operands[2], dx, scratch);
    e.primitive.execute(stream_, {{DNNL_ARG_DIFF_DST, e.operands[0].inner},
                                  {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                  {DNNL_ARG_DIFF_SRC, e.operands[2].inner}});
    finish_out(e.operands[2]);
    stream_.wait();
  });
}

void OnednnBackend::conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x,
                                            void* dweight, void* dbias) {
  check(dtype, BackendOp::conv2d, s.channels_last);
  if (conv_winograd(dtype, s, cpu::winograd::Pass::backward_weights)) {
    guarded("conv2d_backward_weights", [&] {
      Scratch scratch(*this);
      void* workspace =
          scratch.get(cpu::winograd::backward_weights_workspace_bytes(s.in_channels, s.out_channels, threads_));
      cpu::winograd::backward_weights(static_cast<const float*>(x), static_cast<const float*>(dy), s.batch, s.in_h,
                                      s.in_w, s.in_channels, s.out_channels, static_cast<float*>(dweight),
                                      static_cast<float*>(dbias), threads_, workspace);
    });
    return;
  }
  if (conv_few_channels(dtype, s)) {
    guarded("conv2d_backward_weights", [&] {
      Scratch scratch(*this);
      void* workspace = scratch.get(cpu::conv_few::workspace_bytes(dtype, s, threads_));
      cpu::conv_few::backward_weights(dtype, s, x, dy, dweight, dbias, threads_, workspace);
    });
    return;
  }
  guarded("conv2d_backward_weights", [&] {
    Scratch scratch(*this);
    Entry& e = entry("conv_bwd_weights", key(dtype, s, dbias != nullptr), dtype, Family::conv, [&](Entry& fresh, dt c) {
      const ConvDescs cd = conv_descs(dtype, c, s);
      const dnnl::convolution_forward::primitive_desc hint(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                          cd.src_any, cd.weights_any, cd.bias_inner, cd.dst_any, cd.strides, cd.padding,
                                          cd.padding),
          engine_);
      const auto desc = dbias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                                         cd.src_any, cd.weights_any, cd.bias_inner,
                                                                         cd.dst_any, cd.strides, cd.padding, cd.padding)
                              : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                                         cd.src_any, cd.weights_any, cd.dst_any,
                                                                         cd.strides, cd.padding, cd.padding);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, engine_, hint);
      fresh.operands = {operand(cd.src, pd.src_desc(), true), operand(cd.dst, pd.diff_dst_desc(), true),
                        operand(cd.weights, pd.diff_weights_desc(), false), operand(cd.bias, cd.bias_inner, false)};
      fresh.primitive = dnnl::convolution_backward_weights(pd);
      note_impl(pd.impl_info_str(), dtype, c);
    });
    bind_in(e.operands[0], x, scratch);
    bind_in(e.operands[1], dy, scratch);
    bind_out(e.operands[2], dweight, scratch);
    if (dbias) bind_out(e.operands[3], dbias, scratch);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                         {DNNL_ARG_DIFF_DST, e.operands[1].inner},
                                         {DNNL_ARG_DIFF_WEIGHTS, e.operands[2].inner}};
    if (dbias) args[DNNL_ARG_DIFF_BIAS] = e.operands[3].inner;
    e.primitive.execute(stream_, args);
    finish_out(e.operands[2]);
    if (dbias) finish_out(e.operands[3]);
    stream_.wait();
  });
}

OnednnBackend::ConvDescs OnednnBackend::conv_descs(DType dtype, dt c, const Conv2dShape& s) const {
  const auto d = data_type(dtype);
  const tag act = s.channels_last ? tag::nhwc : tag::nchw;
  // channels_last activations are used in place; NCHW ones may be reordered to what oneDNN likes.
  const tag act_choice = s.channels_last ? tag::nhwc : tag::any;
  const memory::dims src_dims{s.batch, s.in_channels, s.in_h, s.in_w};
  const memory::dims dst_dims{s.batch, s.out_channels, s.out_h(), s.out_w()};
  const memory::dims w_dims{s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
  return ConvDescs{memory::desc(src_dims, d, act),
                   memory::desc(w_dims, d, tag::oihw),
                   memory::desc({s.out_channels}, d, tag::x),
                   memory::desc(dst_dims, d, act),
                   memory::desc(src_dims, c, act_choice),
                   memory::desc(w_dims, c, tag::any),
                   memory::desc({s.out_channels}, c, tag::x),
                   memory::desc(dst_dims, c, act_choice),
                   {s.stride_h, s.stride_w},
                   {s.pad_h, s.pad_w}};
}

bool OnednnBackend::conv_winograd(DType dtype, const Conv2dShape& s, cpu::winograd::Pass pass) {
  if (!cpu::winograd::chosen(dtype, s, pass)) return false;
  static constexpr const char* kPass[] = {"forward", "backward-data", "backward-weights", "inference"};
  std::lock_guard lock(mutex_);
  impls_.insert(std::string("trainlab Winograd F(4x4,3x3) ") + kPass[static_cast<int>(pass)] +
                " for f32 3x3 convolutions, stride 1, channels_last");
  return true;
}

bool OnednnBackend::winograd(std::int64_t batch, std::int64_t h, std::int64_t w, std::int64_t in, const void* x,
                             const void* weight, std::int64_t out, bool backward_data, const void* bias, bool relu,
                             void* y) {
  Scratch scratch(*this);
  auto* u = scratch.get<float>(static_cast<std::int64_t>(cpu::winograd::weights_floats(in, out)));
  // The weight is [O, I, 3, 3] of the layer: the backward pass's input channels are its outputs.
  if (backward_data) {
    cpu::winograd::transform_weights(static_cast<const float*>(weight), in, out, true, u);
  } else {
    cpu::winograd::transform_weights(static_cast<const float*>(weight), out, in, false, u);
  }
  void* workspace = scratch.get(cpu::winograd::workspace_bytes(in, out, threads_));
  return cpu::winograd::convolve(static_cast<const float*>(x), batch, h, w, in, u, out, static_cast<const float*>(bias),
                                 relu, static_cast<float*>(y), threads_, workspace);
}

bool OnednnBackend::conv_few_channels(DType dtype, const Conv2dShape& s) {
  if (!cpu::conv_few::applies(dtype, s)) return false;
  std::lock_guard lock(mutex_);
  impls_.insert(std::string("trainlab conv_few_channels:") + cpu::cpu_isa_name(cpu::simd().isa) + " for " +
                dtype_name(dtype) + " first-layer weight gradients");
  return true;
}

}  // namespace trainlab::onednn
