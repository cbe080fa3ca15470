#include "engine/core/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <sstream>

#include "backends/registry.h"
#include "engine/core/autograd.h"
#include "engine/core/observer.h"
#include "engine/core/rng.h"

namespace trainlab {

// ---------------------------------------------------------------------------------------------
// shapes and the default backend

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    TL_CHECK(d >= 0, "shape " + shape_str(shape) + " has a negative dimension");
    TL_CHECK(!__builtin_mul_overflow(n, d, &n), "shape " + shape_str(shape) + " has more elements than fit in 64 bits");
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

const char* memory_format_name(MemoryFormat format) { return format == MemoryFormat::channels_last ? "nhwc" : "nchw"; }

MemoryFormat parse_memory_format(const std::string& name) {
  if (name == "nchw") return MemoryFormat::contiguous;
  if (name == "nhwc") return MemoryFormat::channels_last;
  throw Error("unknown layout '" + name + "' (allowed: nchw, nhwc)");
}

Shape strides_for(const Shape& shape, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return contiguous_strides(shape);
  TL_CHECK(shape.size() == 4, "channels_last needs a 4-D [N, C, H, W] shape, got " + shape_str(shape));
  const std::int64_t c = std::max<std::int64_t>(shape[1], 1), h = std::max<std::int64_t>(shape[2], 1),
                     w = std::max<std::int64_t>(shape[3], 1);
  return {h * w * c, 1, w * c, c};
}

namespace {
std::mutex default_backend_mutex;
Backend* chosen_default_backend = nullptr;

std::int64_t wrap_dim(std::int64_t d, std::int64_t rank, const char* op) {
  const std::int64_t wrapped = d < 0 ? d + rank : d;
  TL_CHECK(wrapped >= 0 && wrapped < rank, std::string(op) + ": dimension " + std::to_string(d) +
                                               " is out of range for a tensor of rank " + std::to_string(rank));
  return wrapped;
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, std::int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}
}  // namespace

Backend& default_backend() {
  std::lock_guard lock(default_backend_mutex);
  if (!chosen_default_backend) chosen_default_backend = &get_backend(default_backend_name());
  return *chosen_default_backend;
}

void set_default_backend(const std::string& name) {
  Backend& backend = get_backend(name);
  std::lock_guard lock(default_backend_mutex);
  chosen_default_backend = &backend;
}

// ---------------------------------------------------------------------------------------------
// storage

Storage::Storage(Backend& backend, std::size_t bytes)
    : backend_(&backend), data_(backend.allocate(bytes)), bytes_(bytes) {
  observe::allocated(backend.device_type(), static_cast<std::int64_t>(bytes_), observer_tag_);
}

Storage::Storage(Backend& backend, void* borrowed, std::size_t bytes)
    : backend_(&backend), data_(borrowed), bytes_(bytes), borrowed_(true) {
  TL_CHECK(backend.device_type() == DeviceType::cpu,
           std::string("a tensor over borrowed memory needs a CPU backend; '") + backend.name() + "' is on " +
               device_type_name(backend.device_type()));
  TL_CHECK(borrowed != nullptr || bytes == 0, "a tensor over borrowed memory: the pointer is null");
  observe::allocated(backend.device_type(), static_cast<std::int64_t>(bytes_), observer_tag_);
}

Storage::~Storage() {
  if (released_) return;
  observe::freed(backend_->device_type(), static_cast<std::int64_t>(bytes_), observer_tag_);
  if (!borrowed_) backend_->deallocate(data_, bytes_);
}

void Storage::own() {
  if (!borrowed_) return;
  void* mine = backend_->allocate(bytes_);
  std::memcpy(mine, data_, bytes_);
  data_ = mine;
  borrowed_ = false;
}

void Storage::release() {
  TL_CHECK(!borrowed_, "release_data: the tensor's memory is borrowed (not this backend's to free)");
  if (released_) return;
  observe::freed(backend_->device_type(), static_cast<std::int64_t>(bytes_), observer_tag_);
  backend_->deallocate(data_, bytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::restore() {
  if (!released_) return;
  data_ = backend_->allocate(bytes_);
  released_ = false;
  observe::allocated(backend_->device_type(), static_cast<std::int64_t>(bytes_), observer_tag_);
}

// ---------------------------------------------------------------------------------------------
// factories

Tensor Tensor::empty(const Shape& shape, DType dtype, Backend& backend, MemoryFormat format) {
  std::size_t bytes = 0;
  TL_CHECK(!__builtin_mul_overflow(static_cast<std::size_t>(shape_numel(shape)), dtype_size(dtype), &bytes),
           "tensor shape " + shape_str(shape) + " needs more bytes than fit in 64 bits");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(backend, bytes);
  impl->shape = shape;
  impl->strides = strides_for(shape, format);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::borrowed(void* data, const Shape& shape, DType dtype, Backend& backend) {
  std::size_t bytes = 0;
  TL_CHECK(!__builtin_mul_overflow(static_cast<std::size_t>(shape_numel(shape)), dtype_size(dtype), &bytes),
           "tensor shape " + shape_str(shape) + " needs more bytes than fit in 64 bits");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(backend, data, bytes);
  impl->shape = shape;
  impl->strides = strides_for(shape, MemoryFormat::contiguous);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Backend& backend) { return full(shape, 0.0, dtype, backend); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Backend& backend) {
  Tensor t = empty(shape, dtype, backend);
  backend.fill(dtype, t.raw_data(), t.numel(), value);
  return t;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, Backend& backend) {
  Tensor t = empty(shape, dtype, backend);
  backend.copy_from_host(t.raw_data(), data, t.nbytes());
  return t;
}

static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype, Backend& backend) {
  Tensor host = Tensor::from_host(values.data(), shape, DType::f64, backend);
  return dtype == DType::f64 ? host : host.to(dtype);
}

Tensor Tensor::uniform(const Shape& shape, double lo, double hi, Generator& generator, DType dtype, Backend& backend) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = generator.uniform(lo, hi);
  return from_doubles(values, shape, dtype, backend);
}

Tensor Tensor::normal(const Shape& shape, Generator& generator, DType dtype, Backend& backend) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& v : values) v = generator.normal();
  return from_doubles(values, shape, dtype, backend);
}

// ---------------------------------------------------------------------------------------------
// metadata

void Tensor::check_defined(const char* what) const {
  if (!impl_) throw Error(std::string(what) + ": the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}
std::int64_t Tensor::offset() const {
  check_defined("offset");
  return impl_->offset;
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
Backend& Tensor::backend() const {
  check_defined("backend");
  return impl_->storage->backend();
}

std::int64_t Tensor::size(std::int64_t d) const {
  return shape()[static_cast<std::size_t>(wrap_dim(d, dim(), "size"))];
}

bool Tensor::is_contiguous() const { return is_contiguous(MemoryFormat::contiguous); }

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::channels_last && dim() != 4) return false;
  const Shape expected = strides_for(shape(), format);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (impl_->shape[i] != 1 && impl_->strides[i] != expected[i]) return false;
  }
  return true;
}

MemoryFormat Tensor::memory_format() const {
  return !is_contiguous() && is_contiguous(MemoryFormat::channels_last) ? MemoryFormat::channels_last
                                                                        : MemoryFormat::contiguous;
}

bool Tensor::same_view(const Tensor& other) const {
  return impl_ && other.impl_ && impl_->storage == other.impl_->storage && impl_->offset == other.impl_->offset &&
         impl_->shape == other.impl_->shape && impl_->strides == other.impl_->strides;
}

void* Tensor::storage_data() const {
  check_defined("raw_data");
  if (impl_->storage->released()) {
    const std::string name = impl_->name.empty() ? "a tensor " + shape_str(impl_->shape) : "tensor " + impl_->name;
    throw Error(name +
                " has no memory: it was released (ZeRO-3 keeps 1/W of each parameter between uses and "
                "gathers it for the forward and backward of the parts that read it; FullParameters for the rest)");
  }
  return impl_->storage->data();
}

void* Tensor::raw_data() const {
  return static_cast<unsigned char*>(storage_data()) +
         impl_->offset * static_cast<std::int64_t>(dtype_size(impl_->dtype));
}

void Tensor::set_data(const Tensor& source) {
  check_defined("set_data");
  TL_CHECK(
      source.defined() && source.shape() == shape() && source.dtype() == dtype() && source.is_contiguous() &&
          is_contiguous(),
      "set_data: " + name() + " " + shape_str(shape()) + " " + dtype_name(dtype()) +
          " (row-major) cannot take the memory of " +
          (source.defined() ? shape_str(source.shape()) + " " + dtype_name(source.dtype()) : "an undefined tensor"));
  impl_->storage = source.impl_->storage;
  impl_->offset = source.impl_->offset;
}

void Tensor::release_data() {
  check_defined("release_data");
  impl_->storage->release();
}

void Tensor::restore_data() {
  check_defined("restore_data");
  impl_->storage->restore();
}

bool Tensor::has_data() const { return defined() && !impl_->storage->released(); }

void Tensor::own_data() {
  check_defined("own_data");
  impl_->storage->own();
}

void Tensor::check_host_access(DType expected) const {
  check_defined("data");
  TL_CHECK(device_type() == DeviceType::cpu,
           std::string("data<T>() needs a CPU tensor; this one is on ") + device_type_name(device_type()));
  TL_CHECK(dtype() == expected,
           std::string("data<T>(): tensor dtype is ") + dtype_name(dtype()) + ", asked for " + dtype_name(expected));
}

void Tensor::copy_to_host(void* host_dst) const {
  const Tensor dense = is_contiguous() ? *this : detach().contiguous();
  dense.backend().copy_to_host(host_dst, dense.raw_data(), dense.nbytes());
}

double Tensor::item() const {
  TL_CHECK(numel() == 1, "item() needs a one-element tensor, got shape " + shape_str(shape()));
  const Tensor value = detach().to(DType::f64);
  double out;
  value.copy_to_host(&out);
  return out;
}

std::string Tensor::str(std::int64_t max_elements) const {
  if (!impl_) return "Tensor(undefined)";
  std::ostringstream out;
  out << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", backend=" << backend().name();
  if (dtype() != DType::i64) {
    NoGradGuard no_grad;
    const auto values = to(DType::f64).to_vector<double>();
    out << ", values=[";
    for (std::size_t i = 0; i < values.size() && static_cast<std::int64_t>(i) < max_elements; ++i) {
      out << (i ? ", " : "") << values[i];
    }
    if (static_cast<std::int64_t>(values.size()) > max_elements) out << ", ...";
    out << "]";
  }
  out << ")";
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// conversions and views

Tensor Tensor::contiguous() const { return contiguous(MemoryFormat::contiguous); }

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (is_contiguous(format)) return *this;
  TL_SPAN("reorder");
  Tensor out = empty(shape(), dtype(), backend(), format);
  backend().copy_strided(dtype(), storage_data(), layout(), out.raw_data(), Layout{out.shape(), out.strides(), 0});
  return record(out, "reorder", {*this},
                [](const Tensor& grad, const std::vector<bool>&) { return std::vector<Tensor>{grad}; });
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), backend());
  backend().copy_strided(dtype(), storage_data(), layout(), out.raw_data(),
                         Layout{shape(), contiguous_strides(shape()), 0});
  return record(out, "clone", {*this},
                [](const Tensor& grad, const std::vector<bool>&) { return std::vector<Tensor>{grad}; });
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  const MemoryFormat format = memory_format();  // a cast keeps the layout
  const Tensor dense = detach().contiguous(format);
  Tensor out = empty(shape(), target, backend(), format);
  backend().cast(dtype(), dense.raw_data(), target, out.raw_data(), numel());
  if (!is_floating(target) || !is_floating(dtype())) return out;
  const DType source = dtype();
  return record(out, "cast", {*this}, [source](const Tensor& grad, const std::vector<bool>&) {
    return std::vector<Tensor>{grad.to(source)};
  });
}

Tensor Tensor::to(Backend& target) const {
  if (&target == &backend()) return *this;
  const Tensor dense = contiguous();
  std::vector<unsigned char> host(dense.nbytes());
  dense.copy_to_host(host.data());
  Tensor out = from_host(host.data(), shape(), dtype(), target);
  Backend* source = &backend();
  return record(out, "to_backend", {*this}, [source](const Tensor& grad, const std::vector<bool>&) {
    return std::vector<Tensor>{grad.to(*source)};
  });
}

static Shape infer_shape(const Shape& requested, std::int64_t numel, const Shape& from) {
  Shape shape = requested;
  std::int64_t known = 1;
  int unknown = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TL_CHECK(unknown < 0, "reshape: only one dimension may be -1, got " + shape_str(requested));
      unknown = static_cast<int>(i);
    } else {
      TL_CHECK(shape[i] >= 0, "reshape: invalid dimension in " + shape_str(requested));
      known *= shape[i];
    }
  }
  if (unknown >= 0) {
    TL_CHECK(known > 0 && numel % known == 0,
             "reshape: cannot reshape " + shape_str(from) + " into " + shape_str(requested));
    shape[static_cast<std::size_t>(unknown)] = numel / known;
  }
  TL_CHECK(shape_numel(shape) == numel, "reshape: cannot reshape " + shape_str(from) + " (" + std::to_string(numel) +
                                            " elements) into " + shape_str(requested));
  return shape;
}

Tensor Tensor::view(const Shape& requested) const {
  const Shape new_shape = infer_shape(requested, numel(), shape());
  TL_CHECK(is_contiguous(), "view: a non-contiguous tensor of shape " + shape_str(shape()) + " cannot be viewed as " +
                                shape_str(requested) + " without a copy (use reshape)");
  Tensor out = make_view(*this, new_shape, contiguous_strides(new_shape), offset());
  const Shape original = shape();
  return record(out, "reshape", {*this}, [original](const Tensor& grad, const std::vector<bool>&) {
    return std::vector<Tensor>{grad.reshape(original)};
  });
}

Tensor Tensor::reshape(const Shape& requested) const {
  return is_contiguous() ? view(requested) : contiguous().view(requested);
}

Tensor Tensor::flatten(std::int64_t start_dim) const {
  const std::int64_t start = dim() == 0 ? 0 : wrap_dim(start_dim, dim(), "flatten");
  Shape new_shape(shape().begin(), shape().begin() + start);
  new_shape.push_back(-1);
  if (numel() == 0) {
    std::int64_t tail = 1;
    for (std::int64_t d = start; d < dim(); ++d) tail *= size(d);
    new_shape.back() = tail;
  }
  return reshape(new_shape);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  const std::int64_t rank = dim();
  TL_CHECK(static_cast<std::int64_t>(dims.size()) == rank,
           "permute: got " + std::to_string(dims.size()) + " dimensions for a tensor of rank " + std::to_string(rank));
  std::vector<std::int64_t> wrapped(dims.size()), inverse(dims.size(), -1);
  Shape new_shape(dims.size()), new_strides(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    wrapped[i] = wrap_dim(dims[i], rank, "permute");
    TL_CHECK(inverse[static_cast<std::size_t>(wrapped[i])] < 0,
             "permute: dimension " + std::to_string(dims[i]) + " repeats");
    inverse[static_cast<std::size_t>(wrapped[i])] = static_cast<std::int64_t>(i);
    new_shape[i] = shape()[static_cast<std::size_t>(wrapped[i])];
    new_strides[i] = strides()[static_cast<std::size_t>(wrapped[i])];
  }
  Tensor out = make_view(*this, new_shape, new_strides, offset());
  return record(out, "permute", {*this}, [inverse](const Tensor& grad, const std::vector<bool>&) {
    return std::vector<Tensor>{grad.permute(inverse)};
  });
}

Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const {
  std::vector<std::int64_t> dims(static_cast<std::size_t>(dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(wrap_dim(dim0, dim(), "transpose"))],
            dims[static_cast<std::size_t>(wrap_dim(dim1, dim(), "transpose"))]);
  return permute(dims);
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  const std::int64_t wd = wrap_dim(d, dim(), "narrow");
  const std::int64_t extent = shape()[static_cast<std::size_t>(wd)];
  TL_CHECK(start >= 0 && length >= 0 && start + length <= extent,
           "narrow: range [" + std::to_string(start) + ", " + std::to_string(start + length) + ") is outside [0, " +
               std::to_string(extent) + ") of dimension " + std::to_string(d));
  Shape new_shape = shape();
  new_shape[static_cast<std::size_t>(wd)] = length;
  Tensor out = make_view(*this, new_shape, strides(), offset() + start * strides()[static_cast<std::size_t>(wd)]);
  const Shape original = shape();
  const DType dt = dtype();
  Backend* be = &backend();
  return record(out, "narrow", {*this}, [=](const Tensor& grad, const std::vector<bool>&) {
    Tensor full_grad = Tensor::zeros(original, dt, *be);
    full_grad.narrow(wd, start, length).copy_(grad);
    return std::vector<Tensor>{full_grad};
  });
}

// ---------------------------------------------------------------------------------------------
// in-place

namespace {
std::atomic<std::uint64_t> parameter_writes{0};
}
std::uint64_t parameter_write_epoch() { return parameter_writes.load(std::memory_order_acquire); }
void note_parameter_write() { parameter_writes.fetch_add(1, std::memory_order_acq_rel); }

static void check_in_place(const Tensor& t, const char* op) {
  if (t.requires_grad()) note_parameter_write();
  TL_CHECK(!(GradMode::enabled() && t.requires_grad()),
           std::string(op) +
               ": in-place change of a tensor that requires grad while grad mode is on "
               "(wrap it in NoGradGuard)");
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_in_place(*this, "copy_");
  TL_CHECK(src.shape() == shape(),
           "copy_: source shape " + shape_str(src.shape()) + " differs from destination " + shape_str(shape()));
  Tensor source = src;
  if (&src.backend() != &backend()) source = src.detach().to(backend());
  if (source.dtype() != dtype()) source = source.detach().to(dtype());
  // Views of one storage may overlap: read from a private copy so no element is read after it was written.
  if (source.impl()->storage == impl_->storage && !source.same_view(*this)) source = source.detach().clone();
  backend().copy_strided(dtype(), source.storage_data(), source.layout(), storage_data(), layout());
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_in_place(*this, "fill_");
  if (is_contiguous()) {
    backend().fill(dtype(), raw_data(), numel(), value);
  } else {
    copy_(Tensor::full(shape(), value, dtype(), backend()));
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// autograd accessors

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad");
  TL_CHECK(is_leaf(), "set_requires_grad: only leaves can change requires_grad (this tensor comes from " +
                          impl_->grad_fn->name + ")");
  TL_CHECK(!requires_grad || is_floating(dtype()),
           std::string("set_requires_grad: a ") + dtype_name(dtype()) + " tensor cannot require grad");
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return impl_ && !impl_->grad_fn; }

Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->grad;
}

void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  if (grad.defined()) {
    TL_CHECK(grad.shape() == shape() && grad.dtype() == dtype(), "set_grad: gradient " + shape_str(grad.shape()) + " " +
                                                                     dtype_name(grad.dtype()) + " does not match " +
                                                                     shape_str(shape()) + " " + dtype_name(dtype()));
    TL_CHECK(grad.is_contiguous(), "set_grad: the gradient must be contiguous (call .contiguous() first)");
    TL_CHECK(&grad.backend() == &backend(),
             "set_grad: the gradient is on backend " + grad.backend().name() + ", the tensor on " + backend().name());
    observe::role(grad, StorageRole::gradient);
  }
  impl_->grad = grad;
}

void Tensor::zero_grad(bool set_to_none) {
  check_defined("zero_grad");
  if (!impl_->grad.defined()) return;
  if (set_to_none) {
    impl_->grad = Tensor();
  } else {
    NoGradGuard no_grad;
    impl_->grad.zero_();
  }
}

Tensor Tensor::detach() const {
  check_defined("detach");
  return make_view(*this, shape(), strides(), offset());
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  check_defined("grad_fn");
  return impl_->grad_fn;
}

void Tensor::backward() const {
  check_defined("backward");
  TL_CHECK(numel() == 1, "backward() without a gradient needs a one-element output, got shape " + shape_str(shape()) +
                             " (pass a gradient of that shape)");
  run_backward(*this, Tensor::full(shape(), 1.0, dtype(), backend()));
}

void Tensor::backward(const Tensor& gradient) const {
  check_defined("backward");
  TL_CHECK(gradient.defined() && gradient.shape() == shape(),
           "backward: the gradient's shape must be the output's " + shape_str(shape()));
  run_backward(*this, gradient.detach().to(dtype()));
}

void Tensor::add_grad_ready_hook(GradReadyHook hook) {
  check_defined("add_grad_ready_hook");
  TL_CHECK(is_leaf() && requires_grad(),
           "add_grad_ready_hook: only leaves that require grad have gradient-ready hooks");
  impl_->grad_ready_hooks.push_back(std::move(hook));
}

const std::string& Tensor::name() const {
  check_defined("name");
  return impl_->name;
}

Tensor& Tensor::set_name(const std::string& name) {
  check_defined("set_name");
  impl_->name = name;
  return *this;
}

}  // namespace trainlab
