// The onednn backend's linear: inner product, bias and ReLU fused when asked (backends/onednn/onednn_backend.h).
#include "backends/onednn/onednn_backend.h"

namespace trainlab::onednn {

void OnednnBackend::linear_forward_into(DType dtype, const void* x, const void* weight, const void* bias, bool relu,
                                        void* y, std::int64_t batch, std::int64_t in, std::int64_t out,
                                        std::shared_ptr<const PreparedWeight>* keep) {
  check(dtype, BackendOp::linear, false);
  guarded("linear_forward", [&] {
    Scratch scratch(*this);
    const bool inference = frozen() && !operands_are_activations_;
    const auto prop = inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    const std::string k = key(dtype, batch, in, out, bias != nullptr, relu);
    Entry& e = entry(inference ? "ip_inference" : "ip_fwd", k, dtype, Family::inner_product, [&](Entry& fresh, dt c) {
      const auto d = data_type(dtype);
      const memory::desc src({batch, in}, c, tag::nc), dst({batch, out}, c, tag::nc);
      const memory::desc weights_any({out, in}, c, tag::any), bias_md({out}, c, tag::x);
      const auto desc = bias ? dnnl::inner_product_forward::desc(prop, src, weights_any, bias_md, dst)
                             : dnnl::inner_product_forward::desc(prop, src, weights_any, dst);
      const dnnl::inner_product_forward::primitive_desc pd(desc, relu_attr(relu), engine_);
      fresh.operands = {operand({{batch, in}, d, tag::nc}, src, true),
                        operand({{out, in}, d, tag::oi}, pd.weights_desc(), true),
                        operand({{out}, d, tag::x}, bias_md, true), operand({{batch, out}, d, tag::nc}, dst, false)};
      fresh.primitive = dnnl::inner_product_forward(pd);
      note_impl(pd.impl_info_str(), dtype, c);
    });
    bind_in(e.operands[0], x, scratch);
    if (keep != nullptr && !inference && (e.operands[1].reordered || e.operands[1].widened))
      *keep = prepare_weight(e.operands[1], weight);
    else
      bind_weights(e.operands[1], weight, inference ? "ip|" + k : "", scratch);
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

void OnednnBackend::linear_backward_data_prepared(DType dtype, const void* dy, const void* weight,
                                                  const PreparedWeight* prepared, void* dx, std::int64_t batch,
                                                  std::int64_t in, std::int64_t out) {
  check(dtype, BackendOp::linear, false);
  guarded("linear_backward_data", [&] {
    Scratch scratch(*this);
    Entry& e = entry("ip_bwd_data", key(dtype, batch, in, out), dtype, Family::inner_product, [&](Entry& fresh, dt c) {
      const auto d = data_type(dtype);
      const memory::desc src({batch, in}, c, tag::nc), dst({batch, out}, c, tag::nc);
      const memory::desc weights_any({out, in}, c, tag::any);
      const dnnl::inner_product_forward::primitive_desc hint(
          dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, dst), engine_);
      const dnnl::inner_product_backward_data::primitive_desc pd(
          dnnl::inner_product_backward_data::desc(src, weights_any, dst), engine_, hint);
      fresh.operands = {operand({{batch, out}, d, tag::nc}, dst, true),
                        operand({{out, in}, d, tag::oi}, pd.weights_desc(), true),
                        operand({{batch, in}, d, tag::nc}, src, false)};
      fresh.primitive = dnnl::inner_product_backward_data(pd);
      note_impl(pd.impl_info_str(), dtype, c);
    });
    bind_in(e.operands[0], dy, scratch);
    const auto* kept = dynamic_cast<const KeptWeight*>(prepared);
    const void* copy = kept != nullptr && (e.operands[1].reordered || e.operands[1].widened)
                           ? kept->find(e.operands[1].inner.get_desc())
                           : nullptr;
    if (copy != nullptr) {
      bind(e.operands[1], weight);
      e.operands[1].inner.set_data_handle(const_cast<void*>(copy));
      ++kept_weight_reads_;
    } else {
      if (e.operands[1].reordered || e.operands[1].widened) ++backward_weight_reorders_;
      bind_in(e.operands[1], weight, scratch);
    }
    bind_out(e.operands[2], dx, scratch);
    e.primitive.execute(stream_, {{DNNL_ARG_DIFF_DST, e.operands[0].inner},
                                  {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                  {DNNL_ARG_DIFF_SRC, e.operands[2].inner}});
    finish_out(e.operands[2]);
    stream_.wait();
  });
}

void OnednnBackend::linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                                            std::int64_t batch, std::int64_t in, std::int64_t out) {
  check(dtype, BackendOp::linear, false);
  guarded("linear_backward_weights", [&] {
    Scratch scratch(*this);
    Entry& e = entry(
        "ip_bwd_weights", key(dtype, batch, in, out, dbias != nullptr), dtype, Family::inner_product,
        [&](Entry& fresh, dt c) {
          const auto d = data_type(dtype);
          const memory::desc src({batch, in}, c, tag::nc), dst({batch, out}, c, tag::nc);
          const memory::desc weights_any({out, in}, c, tag::any), bias_md({out}, c, tag::x);
          const dnnl::inner_product_forward::primitive_desc hint(
              dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, bias_md, dst),
              engine_);
          // A large weight's gradient in the parameter's own layout (oi) where a kernel writes it:
          // a blocked one costs a reorder back every step (fc1, 256x4096 f32 on AVX-512: brgemm
          // 1.39-1.42 ms + 0.59-0.63 reorder against gemm 1.39-1.68; docs/RESULTS.md). A small one
          // keeps the primitive's choice (fc2, 10x256: gemm 0.38-0.51 ms against 0.04 in all).
          const bool plain_gradient = out * in >= kPlainGradientElements;
          auto make_pd = [&](const memory::desc& weights) {
            const auto desc = dbias ? dnnl::inner_product_backward_weights::desc(src, weights, bias_md, dst)
                                    : dnnl::inner_product_backward_weights::desc(src, weights, dst);
            return dnnl::inner_product_backward_weights::primitive_desc(desc, engine_, hint);
          };
          dnnl::inner_product_backward_weights::primitive_desc pd;
          try {
            pd = make_pd(plain_gradient ? memory::desc({out, in}, c, tag::oi) : weights_any);
            if (plain_gradient && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) pd = make_pd(weights_any);
          } catch (const dnnl::error&) {
            if (!plain_gradient) throw;
            pd = make_pd(weights_any);
          }
          fresh.operands = {operand({{batch, in}, d, tag::nc}, src, true),
                            operand({{batch, out}, d, tag::nc}, dst, true),
                            operand({{out, in}, d, tag::oi}, pd.diff_weights_desc(), false),
                            operand({{out}, d, tag::x}, bias_md, false)};
          fresh.primitive = dnnl::inner_product_backward_weights(pd);
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

void OnednnBackend::matmul(DType dtype, const MatmulShape& shape, const void* a, const void* b, void* y) {
  operands_are_activations_ = true;
  try {
    CpuBackend::matmul(dtype, shape, a, b, y);
  } catch (...) {
    operands_are_activations_ = false;
    throw;
  }
  operands_are_activations_ = false;
}

}  // namespace trainlab::onednn
