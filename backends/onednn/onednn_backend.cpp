// The onednn backend's infrastructure (backends/onednn/onednn_backend.h says what each file holds).
#include "backends/onednn/onednn_backend.h"

#include <omp.h>

#include "backends/registry.h"

namespace trainlab::onednn {

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

// oneDNN's 2-D weight blocks for `inner` from the plain `outer` ([rows][cols], row-major), when
// they are the kind pack_weight_blocks writes: blocks of row_block rows and word_block 32-bit
// words of columns, blocks in row-block-major order, inside a block the words' column-major
// order ([word][row][the word's 1 or 2 elements]): AB16b64a for f32, AB8b64a2b for bf16 (the
// VNNI pairs); no padding. Else rows == 0. (AVX2's transposed weight, ba, stays with oneDNN's
// reorder: this loop over every row measured no faster there.)
Operand::Pack pack_plan(const memory::desc& outer, const memory::desc& inner) {
  Operand::Pack none;
  const dnnl_memory_desc_t& o = outer.data;
  const dnnl_memory_desc_t& i = inner.data;
  if (o.ndims != 2 || i.ndims != 2 || o.data_type != i.data_type || o.format_kind != dnnl_blocked ||
      i.format_kind != dnnl_blocked || o.offset0 != 0 || i.offset0 != 0)
    return none;
  const std::int64_t rows = o.dims[0], cols = o.dims[1];
  const auto& ob = o.format_desc.blocking;
  if (ob.inner_nblks != 0 || ob.strides[0] != cols || ob.strides[1] != 1) return none;
  const auto& ib = i.format_desc.blocking;
  const int pair = i.data_type == dnnl_bf16 || i.data_type == dnnl_f16 ? 2 : (i.data_type == dnnl_f32 ? 1 : 0);
  if (pair == 0) return none;
  std::int64_t col_block = 0, row_block = 0;
  if (pair == 1 && ib.inner_nblks == 2 && ib.inner_idxs[0] == 1 && ib.inner_idxs[1] == 0) {
    col_block = ib.inner_blks[0];
    row_block = ib.inner_blks[1];
  } else if (pair == 2 && ib.inner_nblks == 3 && ib.inner_idxs[0] == 1 && ib.inner_idxs[1] == 0 &&
             ib.inner_idxs[2] == 1 && ib.inner_blks[2] == 2) {
    col_block = ib.inner_blks[0] * 2;
    row_block = ib.inner_blks[1];
  } else {
    return none;
  }
  if (row_block <= 0 || col_block <= 0 || rows % row_block != 0 || cols % col_block != 0) return none;
  if (i.padded_dims[0] != rows || i.padded_dims[1] != cols) return none;
  const std::int64_t block = row_block * col_block, col_blocks = cols / col_block;
  if (ib.strides[1] != block || ib.strides[0] != col_blocks * block) return none;
  return {rows, cols / pair, row_block, col_block / pair};
}

// The plan's layout from the plain matrix, bit for bit: each block is a strided tile of
// row_block x word_block words, stored transposed.
void pack_weight_blocks(const Operand::Pack& p, const void* plain, void* blocked, int threads) {
  const auto* in = static_cast<const std::uint32_t*>(plain);
  auto* out = static_cast<std::uint32_t*>(blocked);
  const std::int64_t word_blocks = p.words / p.word_block, blocks = p.rows / p.row_block * word_blocks;
  const std::int64_t size = p.row_block * p.word_block;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t r0 = b / word_blocks * p.row_block, w0 = b % word_blocks * p.word_block;
    const std::uint32_t* tile = in + r0 * p.words + w0;
    std::uint32_t* dst = out + b * size;
    for (std::int64_t r = 0; r < p.row_block; ++r) {
      const std::uint32_t* row = tile + r * p.words;
      // The next blocks of a thread read further along the same rows: a stream per row, more than
      // the hardware prefetcher follows (cold weights: 0.55 -> 0.33 ms for fc1's f32 in a test loop).
      __builtin_prefetch(row + 64);
      for (std::int64_t w = 0; w < p.word_block; ++w) dst[w * p.row_block + r] = row[w];
    }
  }
}

OpSupport OnednnBackend::matrix_op_support(BackendOp op, DType dtype, bool) const {
  if (dtype == DType::f32) return OpSupport::native("oneDNN f32 primitives");
  const Family family = op == BackendOp::conv2d ? Family::conv : Family::inner_product;
  if (native(dtype, family)) return OpSupport::native(std::string("oneDNN ") + dtype_name(dtype) + " primitives");
  return OpSupport::emulated(emulation_reason(dtype, family));
}

void OnednnBackend::thaw() noexcept {
  std::lock_guard lock(mutex_);
  if (frozen_depth_ > 0 && --frozen_depth_ > 0) return;
  for (auto& [where, kept] : kept_) allocator_.deallocate(kept.data, kept.bytes);
  kept_.clear();
}

std::string OnednnBackend::describe() const {
  std::lock_guard lock(mutex_);
  const auto v = dnnl::version();
  std::string impls;
  for (const auto& impl : impls_) impls += (impls.empty() ? "" : ", ") + impl;
  std::string out = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                    std::to_string(v->patch) + ", ISA " + isa_name(dnnl::get_effective_cpu_isa());
  // The low-precision paths, so that a bf16 run says why it is as fast (or slow) as it is.
  for (DType low : {DType::bf16, DType::f16}) {
    const bool conv = native_locked(low, Family::conv), ip = native_locked(low, Family::inner_product);
    out += std::string(", ") + dtype_name(low) + " " +
           (conv && ip     ? "native"
            : !conv && !ip ? "emulated (f32 primitives)"
            : conv         ? "native conv2d, emulated linear"
                           : "emulated conv2d, native linear");
  }
  out += ", f32 3x3 channels_last convolutions " + cpu::winograd::policy();
  out += ", " + std::to_string(primitives_created_) + " primitives";
  if (frozen_depth_ > 0) out += ", inference on frozen weights (" + std::to_string(kept_.size()) + " kept in layout)";
  if (shape_fallbacks_ > 0) out += " (" + std::to_string(shape_fallbacks_) + " emulated for want of a native one)";
  if (!impls.empty()) out += " (implementations: " + impls + ")";
  return out;
}

std::map<std::string, std::int64_t> OnednnBackend::counters() const {
  std::lock_guard lock(mutex_);
  auto out = CpuBackend::counters();
  out["primitives_created"] = primitives_created_;
  out["weight_reorders"] = weight_reorders_;
  out["kept_weight_reads"] = kept_weight_reads_;
  out["backward_weight_reorders"] = backward_weight_reorders_;
  out["frozen_weights_kept"] = static_cast<std::int64_t>(kept_.size());
  out["frozen_weights_changed"] = frozen_weights_changed_;
  return out;
}

bool OnednnBackend::native_locked(DType dtype, Family family) const {
  if (dtype == DType::f32) return true;
  if (!probed_) {
    for (DType low : {DType::bf16, DType::f16}) {
      native_[index(low, Family::conv)] = probe_conv(data_type(low));
      native_[index(low, Family::inner_product)] = probe_inner_product(data_type(low));
    }
    probed_ = true;
  }
  return native_[index(dtype, family)];
}

bool OnednnBackend::probe_conv(dt d) const {
  try {
    const memory::desc src({2, 8, 8, 8}, d, tag::any), w({8, 8, 3, 3}, d, tag::any), dst({2, 8, 8, 8}, d, tag::any),
        b({8}, d, tag::x);
    const dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, w,
                                        b, dst, {1, 1}, {1, 1}, {1, 1}),
        engine_);
    const dnnl::convolution_backward_data::primitive_desc bwd_data(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src, w, dst, {1, 1}, {1, 1}, {1, 1}),
        engine_, fwd);
    const dnnl::convolution_backward_weights::primitive_desc bwd_weights(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, w, b, dst, {1, 1}, {1, 1},
                                                 {1, 1}),
        engine_, fwd);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

bool OnednnBackend::probe_inner_product(dt d) const {
  try {
    const memory::desc src({4, 16}, d, tag::nc), w({8, 16}, d, tag::any), dst({4, 8}, d, tag::nc), b({8}, d, tag::x);
    const dnnl::inner_product_forward::primitive_desc fwd(
        dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, w, b, dst), engine_);
    const dnnl::inner_product_backward_data::primitive_desc bwd_data(
        dnnl::inner_product_backward_data::desc(src, w, dst), engine_, fwd);
    const dnnl::inner_product_backward_weights::primitive_desc bwd_weights(
        dnnl::inner_product_backward_weights::desc(src, w, b, dst), engine_, fwd);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string OnednnBackend::emulation_reason(DType dtype, Family family) const {
  const std::string what = family == Family::conv ? "convolution" : "inner product";
  const std::string needs = dtype == DType::bf16 ? "avx512_core" : "avx512_core_fp16";
  return std::string("f32 primitives on widened ") + dtype_name(dtype) + " operands, outputs rounded once: oneDNN " +
         "2.6 has no " + dtype_name(dtype) + " " + what + " below " + needs + " (this ISA: " + isa() + ")";
}

dnnl::primitive_attr OnednnBackend::relu_attr(bool relu) {
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

Operand OnednnBackend::operand(const memory::desc& user_md, const memory::desc& inner_md, bool input) {
  Operand op;
  op.user = memory(user_md, engine_, DNNL_MEMORY_NONE);
  memory::desc outer_md = user_md;  // what the reorder to or from the primitive's layout sees
  if (user_md.data.data_type != inner_md.data.data_type) {
    TL_CHECK(inner_md.data.data_type == dnnl_f32, "onednn: an emulated operand's primitive must be f32");
    op.widened = true;
    op.storage = user_md.data.data_type == dnnl_bf16 ? DType::bf16 : DType::f16;
    outer_md.data.data_type = dnnl_f32;  // the same dims and strides, in f32
    op.elements = static_cast<std::int64_t>(user_md.get_size() / dtype_size(op.storage));
    op.staged_bytes = outer_md.get_size();
    op.staged = memory(outer_md, engine_, DNNL_MEMORY_NONE);
  }
  const memory& outer = op.widened ? op.staged : op.user;
  if (inner_md == outer_md) {
    op.inner = outer;
    return op;
  }
  op.inner = memory(inner_md, engine_, DNNL_MEMORY_NONE);  // bound to scratch on each call
  op.inner_bytes = inner_md.get_size();
  op.reordered = true;
  if (input) {
    op.to_inner = dnnl::reorder(outer, op.inner);
    op.pack = pack_plan(outer_md, inner_md);
  } else {
    op.to_user = dnnl::reorder(op.inner, outer);
  }
  return op;
}

void OnednnBackend::reorder_in(Operand& op) {
  memory& from = op.widened ? op.staged : op.user;
  // The pack reads 32-bit words: a bf16 view starting at an odd element takes oneDNN's reorder.
  const bool aligned = reinterpret_cast<std::uintptr_t>(from.get_data_handle()) % alignof(std::uint32_t) == 0;
  if (op.pack.rows > 0 && aligned) {
    pack_weight_blocks(op.pack, from.get_data_handle(), op.inner.get_data_handle(), threads_);
  } else {
    op.to_inner.execute(stream_, from, op.inner);
  }
}

void OnednnBackend::bind_in(Operand& op, const void* ptr, Scratch& scratch) {
  bind(op, ptr);
  if (op.widened) {
    void* staged = scratch.get(op.staged_bytes);
    op.staged.set_data_handle(staged);
    CpuBackend::cast(op.storage, ptr, DType::f32, staged, op.elements);
  }
  if (!op.reordered) return;
  op.inner.set_data_handle(scratch.get(op.inner_bytes));
  reorder_in(op);
}

std::shared_ptr<const PreparedWeight> OnednnBackend::prepare_weight(Operand& op, const void* ptr) {
  auto kept = std::make_shared<KeptWeight>(allocator_);
  bind(op, ptr);
  if (op.widened) {  // `staged` is `inner` itself when there is no reorder
    void* staged = kept->add(op.staged.get_desc());
    op.staged.set_data_handle(staged);
    CpuBackend::cast(op.storage, ptr, DType::f32, staged, op.elements);
  }
  if (op.reordered) {
    op.inner.set_data_handle(kept->add(op.inner.get_desc()));
    reorder_in(op);
  }
  ++weight_reorders_;
  return kept;
}

void OnednnBackend::bind_weights(Operand& op, const void* ptr, const std::string& kept_key, Scratch& scratch) {
  if (!op.reordered && !op.widened) {
    bind(op, ptr);
    return;
  }
  if (kept_key.empty()) {
    bind_in(op, ptr, scratch);
    ++weight_reorders_;
    return;
  }
  bind(op, ptr);
  const std::size_t bytes = op.reordered ? op.inner_bytes : op.staged_bytes;
  const std::string sample = weight_sample(ptr, op.user.get_desc().get_size());
  Kept* kept = nullptr;
  bool derive = false;
  {
    std::lock_guard lock(mutex_);
    auto [it, fresh] = kept_.try_emplace({ptr, kept_key});
    kept = &it->second;
    if (fresh) {
      kept->data = allocator_.allocate(bytes);
      kept->bytes = bytes;
    } else if (kept->sample != sample) {
      ++frozen_weights_changed_;
    }
    derive = fresh || kept->sample != sample;
    kept->sample = sample;
  }
  // The primitive reads the kept buffer: the reorder's target, or (widened only) the f32 copy.
  (op.reordered ? op.inner : op.staged).set_data_handle(kept->data);
  if (!derive) return;
  ++weight_reorders_;
  if (op.widened) {
    void* staged = op.reordered ? scratch.get(op.staged_bytes) : kept->data;
    op.staged.set_data_handle(staged);
    CpuBackend::cast(op.storage, ptr, DType::f32, staged, op.elements);
  }
  if (op.reordered) {
    reorder_in(op);
    stream_.wait();
  }
}

std::string OnednnBackend::weight_sample(const void* ptr, std::size_t bytes) {
  const auto* p = static_cast<const char*>(ptr);
  if (bytes <= 256) return std::string(p, bytes);
  std::string out;
  out.reserve(256);
  for (std::size_t i = 0; i < 32; ++i) out.append(p + (bytes - 8) * i / 31, 8);
  return out;
}

void OnednnBackend::finish_out(Operand& op) {
  if (op.reordered) op.to_user.execute(stream_, op.inner, op.widened ? op.staged : op.user);
  if (op.widened) {
    stream_.wait();
    CpuBackend::cast(DType::f32, op.staged.get_data_handle(), op.storage, op.user.get_data_handle(), op.elements);
  }
}

namespace {

const BackendRegistration registration{
    BackendInfo{"onednn",
                "oneDNN primitives (conv, inner product, reorders) in f32, bf16 and f16 (emulated through f32 where "
                "the ISA has none), NCHW and channels-last",
                DeviceType::cpu, 20},
    [] { return std::make_unique<OnednnBackend>(); }};

}  // namespace
}  // namespace trainlab::onednn
