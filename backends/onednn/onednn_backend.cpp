// The onednn backend: oneDNN primitives for convolution (forward, backward-data,
// backward-weights), inner product (each with bias and ReLU fused when asked) and the f32 <-> bf16
// casts, in f32 and bf16. ReLU and max-pool on their own are the shared CPU loops: oneDNN's
// versions drop NaN, which PyTorch (and the reference) carry.
//
// Primitives are created once per shape and cached with everything they need (memory objects,
// reorder primitives, the buffers their reorders write into), so a training step after warm-up
// creates no primitive and allocates nothing; counters() reports primitives_created to prove it.
//
// Layouts: a channels_last activation is handed to oneDNN as nhwc and used in place. An NCHW
// activation lets oneDNN choose its preferred (blocked) layout and is reordered in and out inside
// the op; that cost is counted in the op's time, which is what the layout knob measures. Weights
// are [O, I, kH, kW] in the engine and reordered to the primitive's layout on every call (they
// change every step).
#include <omp.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/registry.h"

namespace trainlab::onednn {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    default:
      return "other";
  }
}

// A user buffer bound to a memory object, and, when the primitive wants another layout, the
// reorder into (or out of) a buffer of that layout. That buffer lives only while the op runs: it
// comes from the backend's caching allocator on each call, so ops share one pool of blocks
// instead of every cached primitive holding its own.
struct Operand {
  memory user;   // the engine's layout; its data handle is set on every call
  memory inner;  // the primitive's layout (the same object as `user` when no reorder)
  dnnl::reorder to_inner, to_user;
  bool reordered = false;
  std::size_t inner_bytes = 0;
};

class OnednnBackend final : public cpu::CpuBackend {
 public:
  OnednnBackend() : CpuBackend("onednn", /*caching=*/true), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    omp_set_num_threads(threads_);
  }

  bool supports(DType dtype) const override { return dtype == DType::f32 || dtype == DType::bf16; }

  void set_num_threads(int threads) override {
    CpuBackend::set_num_threads(threads);
    omp_set_num_threads(threads);  // oneDNN (Debian's build) runs on OpenMP
  }

  // ---- casts between f32 and bf16 through oneDNN's reorder (native bf16 conversion) ----
  void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n) override {
    const bool native =
        (src_dtype == DType::f32 && dst_dtype == DType::bf16) || (src_dtype == DType::bf16 && dst_dtype == DType::f32);
    if (!native || n == 0) {
      CpuBackend::cast(src_dtype, src, dst_dtype, dst, n);
      return;
    }
    guarded("cast", [&] {
      Entry& e = entry("cast", key(src_dtype, dst_dtype, n), [&](Entry& fresh) {
        const memory::desc in({n}, data_type(src_dtype), tag::a), out({n}, data_type(dst_dtype), tag::a);
        fresh.operands.resize(2);
        fresh.operands[0].user = memory(in, engine_, DNNL_MEMORY_NONE);
        fresh.operands[1].user = memory(out, engine_, DNNL_MEMORY_NONE);
        fresh.primitive = dnnl::reorder(fresh.operands[0].user, fresh.operands[1].user);
      });
      bind(e.operands[0], src);
      bind(e.operands[1], dst);
      e.primitive.execute(stream_, {{DNNL_ARG_FROM, e.operands[0].user}, {DNNL_ARG_TO, e.operands[1].user}});
      stream_.wait();
    });
  }

  // ---- ReLU: the shared CPU loops (cpu_backend.cpp). oneDNN's eltwise_relu computes
  // max(x, 0), which turns NaN into 0; PyTorch's relu carries it, and so must we. ----

  // ---- linear: inner product, bias and ReLU fused when asked ----
  void linear_forward(DType dtype, const void* x, const void* weight, const void* bias, bool relu, void* y,
                      std::int64_t batch, std::int64_t in, std::int64_t out) override {
    check(dtype, "linear_forward");
    guarded("linear_forward", [&] {
      Scratch scratch(*this);
      Entry& e = entry("ip_fwd", key(dtype, batch, in, out, bias != nullptr, relu), [&](Entry& fresh) {
        const auto d = data_type(dtype);
        const memory::desc src({batch, in}, d, tag::nc), dst({batch, out}, d, tag::nc);
        const memory::desc weights_any({out, in}, d, tag::any), bias_md({out}, d, tag::x);
        const auto desc =
            bias ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, bias_md, dst)
                 : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, dst);
        const dnnl::inner_product_forward::primitive_desc pd(desc, relu_attr(relu), engine_);
        fresh.operands = {plain(src), operand({{out, in}, d, tag::oi}, pd.weights_desc(), true), plain(bias_md),
                          plain(dst)};
        fresh.primitive = dnnl::inner_product_forward(pd);
        note_impl(pd.impl_info_str());
      });
      bind(e.operands[0], x);
      bind_in(e.operands[1], weight, scratch);
      if (bias) bind(e.operands[2], bias);
      bind(e.operands[3], y);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].user},
                                           {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                           {DNNL_ARG_DST, e.operands[3].user}};
      if (bias) args[DNNL_ARG_BIAS] = e.operands[2].user;
      e.primitive.execute(stream_, args);
      stream_.wait();
    });
  }

  void linear_backward_data(DType dtype, const void* dy, const void* weight, void* dx, std::int64_t batch,
                            std::int64_t in, std::int64_t out) override {
    check(dtype, "linear_backward_data");
    guarded("linear_backward_data", [&] {
      Scratch scratch(*this);
      Entry& e = entry("ip_bwd_data", key(dtype, batch, in, out), [&](Entry& fresh) {
        const auto d = data_type(dtype);
        const memory::desc src({batch, in}, d, tag::nc), dst({batch, out}, d, tag::nc);
        const memory::desc weights_any({out, in}, d, tag::any);
        const dnnl::inner_product_forward::primitive_desc hint(
            dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, dst), engine_);
        const dnnl::inner_product_backward_data::primitive_desc pd(
            dnnl::inner_product_backward_data::desc(src, weights_any, dst), engine_, hint);
        fresh.operands = {plain(dst), operand({{out, in}, d, tag::oi}, pd.weights_desc(), true), plain(src)};
        fresh.primitive = dnnl::inner_product_backward_data(pd);
        note_impl(pd.impl_info_str());
      });
      bind(e.operands[0], dy);
      bind_in(e.operands[1], weight, scratch);
      bind(e.operands[2], dx);
      e.primitive.execute(stream_, {{DNNL_ARG_DIFF_DST, e.operands[0].user},
                                    {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                    {DNNL_ARG_DIFF_SRC, e.operands[2].user}});
      stream_.wait();
    });
  }

  void linear_backward_weights(DType dtype, const void* dy, const void* x, void* dweight, void* dbias,
                               std::int64_t batch, std::int64_t in, std::int64_t out) override {
    check(dtype, "linear_backward_weights");
    guarded("linear_backward_weights", [&] {
      Scratch scratch(*this);
      Entry& e = entry("ip_bwd_weights", key(dtype, batch, in, out, dbias != nullptr), [&](Entry& fresh) {
        const auto d = data_type(dtype);
        const memory::desc src({batch, in}, d, tag::nc), dst({batch, out}, d, tag::nc);
        const memory::desc weights_any({out, in}, d, tag::any), bias_md({out}, d, tag::x);
        const dnnl::inner_product_forward::primitive_desc hint(
            dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights_any, bias_md, dst),
            engine_);
        const auto desc = dbias ? dnnl::inner_product_backward_weights::desc(src, weights_any, bias_md, dst)
                                : dnnl::inner_product_backward_weights::desc(src, weights_any, dst);
        const dnnl::inner_product_backward_weights::primitive_desc pd(desc, engine_, hint);
        fresh.operands = {plain(src), plain(dst), operand({{out, in}, d, tag::oi}, pd.diff_weights_desc(), false),
                          plain(bias_md)};
        fresh.primitive = dnnl::inner_product_backward_weights(pd);
        note_impl(pd.impl_info_str());
      });
      bind(e.operands[0], x);
      bind(e.operands[1], dy);
      bind_out(e.operands[2], dweight, scratch);
      if (dbias) bind(e.operands[3], dbias);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].user},
                                           {DNNL_ARG_DIFF_DST, e.operands[1].user},
                                           {DNNL_ARG_DIFF_WEIGHTS, e.operands[2].inner}};
      if (dbias) args[DNNL_ARG_DIFF_BIAS] = e.operands[3].user;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[2]);
      stream_.wait();
    });
  }

  // ---- convolution ----
  void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* weight, const void* bias, bool relu,
                      void* y) override {
    check(dtype, "conv2d_forward");
    guarded("conv2d_forward", [&] {
      Scratch scratch(*this);
      Entry& e = entry("conv_fwd", key(dtype, s, bias != nullptr, relu), [&](Entry& fresh) {
        const ConvDescs c = conv_descs(dtype, s);
        const auto desc = bias ? dnnl::convolution_forward::desc(
                                     dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, c.src_any,
                                     c.weights_any, c.bias, c.dst_any, c.strides, c.padding, c.padding)
                               : dnnl::convolution_forward::desc(
                                     dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, c.src_any,
                                     c.weights_any, c.dst_any, c.strides, c.padding, c.padding);
        const dnnl::convolution_forward::primitive_desc pd(desc, relu_attr(relu), engine_);
        fresh.operands = {operand(c.src, pd.src_desc(), true), operand(c.weights, pd.weights_desc(), true),
                          plain(c.bias), operand(c.dst, pd.dst_desc(), false)};
        fresh.primitive = dnnl::convolution_forward(pd);
        note_impl(pd.impl_info_str());
      });
      bind_in(e.operands[0], x, scratch);
      bind_in(e.operands[1], weight, scratch);
      if (bias) bind(e.operands[2], bias);
      bind_out(e.operands[3], y, scratch);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                           {DNNL_ARG_WEIGHTS, e.operands[1].inner},
                                           {DNNL_ARG_DST, e.operands[3].inner}};
      if (bias) args[DNNL_ARG_BIAS] = e.operands[2].user;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[3]);
      stream_.wait();
    });
  }

  void conv2d_backward_data(DType dtype, const Conv2dShape& s, const void* dy, const void* weight, void* dx) override {
    check(dtype, "conv2d_backward_data");
    guarded("conv2d_backward_data", [&] {
      Scratch scratch(*this);
      Entry& e = entry("conv_bwd_data", key(dtype, s), [&](Entry& fresh) {
        const ConvDescs c = conv_descs(dtype, s);
        const dnnl::convolution_forward::primitive_desc hint(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            c.src_any, c.weights_any, c.dst_any, c.strides, c.padding, c.padding),
            engine_);
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, c.src_any, c.weights_any,
                                                  c.dst_any, c.strides, c.padding, c.padding),
            engine_, hint);
        fresh.operands = {operand(c.dst, pd.diff_dst_desc(), true), operand(c.weights, pd.weights_desc(), true),
                          operand(c.src, pd.diff_src_desc(), false)};
        fresh.primitive = dnnl::convolution_backward_data(pd);
        note_impl(pd.impl_info_str());
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

  void conv2d_backward_weights(DType dtype, const Conv2dShape& s, const void* dy, const void* x, void* dweight,
                               void* dbias) override {
    check(dtype, "conv2d_backward_weights");
    guarded("conv2d_backward_weights", [&] {
      Scratch scratch(*this);
      Entry& e = entry("conv_bwd_weights", key(dtype, s, dbias != nullptr), [&](Entry& fresh) {
        const ConvDescs c = conv_descs(dtype, s);
        const dnnl::convolution_forward::primitive_desc hint(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            c.src_any, c.weights_any, c.bias, c.dst_any, c.strides, c.padding,
                                            c.padding),
            engine_);
        const auto desc =
            dbias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, c.src_any,
                                                             c.weights_any, c.bias, c.dst_any, c.strides, c.padding,
                                                             c.padding)
                  : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, c.src_any,
                                                             c.weights_any, c.dst_any, c.strides, c.padding, c.padding);
        const dnnl::convolution_backward_weights::primitive_desc pd(desc, engine_, hint);
        fresh.operands = {operand(c.src, pd.src_desc(), true), operand(c.dst, pd.diff_dst_desc(), true),
                          operand(c.weights, pd.diff_weights_desc(), false), plain(c.bias)};
        fresh.primitive = dnnl::convolution_backward_weights(pd);
        note_impl(pd.impl_info_str());
      });
      bind_in(e.operands[0], x, scratch);
      bind_in(e.operands[1], dy, scratch);
      bind_out(e.operands[2], dweight, scratch);
      if (dbias) bind(e.operands[3], dbias);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.operands[0].inner},
                                           {DNNL_ARG_DIFF_DST, e.operands[1].inner},
                                           {DNNL_ARG_DIFF_WEIGHTS, e.operands[2].inner}};
      if (dbias) args[DNNL_ARG_DIFF_BIAS] = e.operands[3].user;
      e.primitive.execute(stream_, args);
      finish_out(e.operands[2]);
      stream_.wait();
    });
  }

  // ---- max-pool: the shared CPU loops (cpu_backend.cpp). oneDNN's max pooling drops NaN and
  // gives -FLT_MAX for a window of -inf; PyTorch propagates NaN and returns -inf. ----

  std::string describe() const override {
    std::lock_guard lock(mutex_);
    const auto v = dnnl::version();
    std::string impls;
    for (const auto& impl : impls_) impls += (impls.empty() ? "" : ", ") + impl;
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           ", ISA " + isa_name(dnnl::get_effective_cpu_isa()) + ", " + std::to_string(primitives_created_) +
           " primitives" + (impls.empty() ? "" : " (implementations: " + impls + ")");
  }

  std::map<std::string, std::int64_t> counters() const override {
    std::lock_guard lock(mutex_);
    auto out = CpuBackend::counters();
    out["primitives_created"] = primitives_created_;
    return out;
  }

 private:
  struct Entry {
    dnnl::primitive primitive;
    std::vector<Operand> operands;
  };

  struct ConvDescs {
    memory::desc src, weights, bias, dst;        // the engine's layouts
    memory::desc src_any, weights_any, dst_any;  // what the primitive may choose
    memory::dims strides, padding;
  };

  static dt data_type(DType dtype) { return dtype == DType::bf16 ? dt::bf16 : dt::f32; }

  void check(DType dtype, const char* op) const {
    if (!supports(dtype)) cpu::unsupported(op_name(op).c_str(), dtype, "f32, bf16");
  }

  template <typename Fn>
  void guarded(const char* op, Fn&& fn) {
    try {
      fn();
    } catch (const dnnl::error& e) {
      throw Error("onednn: " + std::string(op) + ": " + e.what() + " (dnnl status " + std::to_string(e.status) + ")");
    }
  }

  static std::string key_part(std::int64_t v) { return std::to_string(v) + ","; }
  template <typename... Args>
  static std::string key(DType dtype, Args... args) {
    std::string k = std::string(dtype_name(dtype)) + ":";
    ((k += key_part(static_cast<std::int64_t>(args))), ...);
    return k;
  }
  static std::string key(DType dtype, const Conv2dShape& s, bool a = false, bool b = false) {
    return key(dtype, s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h,
               s.stride_w, s.pad_h, s.pad_w, s.channels_last, a, b);
  }

  // The cached entry for (kind, key), built by `build` on first use.
  template <typename Build>
  Entry& entry(const char* kind, const std::string& k, Build&& build) {
    const std::string full = std::string(kind) + "|" + k;
    std::lock_guard lock(mutex_);
    auto it = cache_.find(full);
    if (it != cache_.end()) return *it->second;
    auto fresh = std::make_unique<Entry>();
    build(*fresh);
    ++primitives_created_;
    return *cache_.emplace(full, std::move(fresh)).first->second;
  }

  ConvDescs conv_descs(DType dtype, const Conv2dShape& s) const {
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
                     memory::desc(src_dims, d, act_choice),
                     memory::desc(w_dims, d, tag::any),
                     memory::desc(dst_dims, d, act_choice),
                     {s.stride_h, s.stride_w},
                     {s.pad_h, s.pad_w}};
  }

  static dnnl::primitive_attr relu_attr(bool relu) {
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      // ReLU as ELU with alpha 0: x > 0 ? x : 0 * (exp(x) - 1). oneDNN's eltwise_relu with alpha 0
      // is max(x, 0), which turns NaN into 0; this form carries NaN (0 * NaN is NaN), as PyTorch's
      // relu does. A negative x gives -0, which compares and adds as 0.
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_elu, 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    return attr;
  }

  Operand plain(const memory::desc& md) {
    Operand op;
    op.user = memory(md, engine_, DNNL_MEMORY_NONE);
    op.inner = op.user;
    return op;
  }

  // An operand whose primitive layout may differ from the engine's: the inner buffer and the
  // reorder (engine -> primitive for inputs, primitive -> engine for outputs) are made once here.
  Operand operand(const memory::desc& user_md, const memory::desc& inner_md, bool input) {
    Operand op;
    op.user = memory(user_md, engine_, DNNL_MEMORY_NONE);
    if (inner_md == user_md) {
      op.inner = op.user;
      return op;
    }
    op.inner = memory(inner_md, engine_, DNNL_MEMORY_NONE);  // bound to scratch on each call
    op.inner_bytes = inner_md.get_size();
    op.reordered = true;
    if (input) {
      op.to_inner = dnnl::reorder(op.user, op.inner);
    } else {
      op.to_user = dnnl::reorder(op.inner, op.user);
    }
    return op;
  }

  static void bind(Operand& op, const void* ptr) { op.user.set_data_handle(const_cast<void*>(ptr)); }

  // Binds an input and, when the primitive wants another layout, reorders it into scratch.
  void bind_in(Operand& op, const void* ptr, Scratch& scratch) {
    bind(op, ptr);
    if (!op.reordered) return;
    op.inner.set_data_handle(scratch.get(op.inner_bytes));
    op.to_inner.execute(stream_, op.user, op.inner);
  }

  // Binds an output; when the primitive writes another layout it writes scratch, and finish_out
  // reorders that back.
  void bind_out(Operand& op, void* ptr, Scratch& scratch) {
    bind(op, ptr);
    if (op.reordered) op.inner.set_data_handle(scratch.get(op.inner_bytes));
  }

  // After the primitive ran: reorders an output back to the engine's layout when needed.
  void finish_out(Operand& op) {
    if (op.reordered) op.to_user.execute(stream_, op.inner, op.user);
  }

  void note_impl(const char* impl) { impls_.insert(impl); }  // called with mutex_ held (from entry())

  dnnl::engine engine_;
  dnnl::stream stream_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> cache_;
  std::set<std::string> impls_;
  std::int64_t primitives_created_ = 0;
};

const BackendRegistration registration{
    BackendInfo{"onednn", "oneDNN primitives (conv, inner product, reorders) in f32 and bf16, NCHW and channels-last",
                DeviceType::cpu, 20},
    [] { return std::make_unique<OnednnBackend>(); }};

}  // namespace
}  // namespace trainlab::onednn
