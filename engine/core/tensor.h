// Tensor: a strided view of a device buffer, with a dtype, a backend (which names the device) and
// the autograd metadata. Copying a Tensor copies a handle; views share storage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/dtype.h"
#include "backends/error.h"

namespace trainlab {

using Shape = std::vector<std::int64_t>;
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
std::int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

// How a 4-D [N, C, H, W] tensor is laid out in memory: row-major (NCHW), or channels_last (NHWC),
// as PyTorch's memory formats. Other ranks are always `contiguous`.
enum class MemoryFormat { contiguous, channels_last };
const char* memory_format_name(MemoryFormat format);        // "nchw" / "nhwc"
MemoryFormat parse_memory_format(const std::string& name);  // "nchw" | "nhwc"
Shape strides_for(const Shape& shape, MemoryFormat format);

// The backend new tensors go to when none is named: the best registered CPU backend unless
// set_default_backend() chose another.
Backend& default_backend();
void set_default_backend(const std::string& name);

class Generator;
class Tensor;
struct Node;
struct TensorImpl;

using GradReadyHook = std::function<void(const Tensor& param)>;

// A device allocation, freed through its backend when the last view of it goes away. Its
// allocation and free are events for the core's observers (engine/core/observer.h); observer_tag() is
// the byte they keep with it (memory accounting's category).
class Storage {
 public:
  Storage(Backend& backend, std::size_t bytes);
  // Over memory this process does not own (a host backend's: another's allocation, a window
  // shared with other processes): never freed here; own() copies it into the backend's memory.
  Storage(Backend& backend, void* borrowed, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // FSDP's storage resized to 0 and back: the memory freed (an observer event) while every handle
  // keeps this Storage, then allocated again at the same size (uninitialised, maybe elsewhere).
  void release();
  void restore();
  bool released() const { return released_; }
  bool borrowed() const { return borrowed_; }
  void own();  // borrowed memory copied into the backend's (every handle follows); else nothing
  Backend& backend() const { return *backend_; }
  std::uint8_t& observer_tag() { return observer_tag_; }

 private:
  Backend* backend_;
  void* data_;
  std::size_t bytes_;
  std::uint8_t observer_tag_ = 0;
  bool released_ = false;
  bool borrowed_ = false;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::i64;
}

// Counts writes to parameters (tensors that require grad) made through the Tensor API
// (copy_, fill_, zero_ and the like) or announced with note_parameter_write() by code that writes
// their memory directly. A derived copy of parameters (the optimiser's low-precision working
// copies) is current only while this count has not moved since the copy was written.
std::uint64_t parameter_write_epoch();
void note_parameter_write();

class Tensor {
 public:
  Tensor() = default;

  // ---- factories ----
  static Tensor empty(const Shape& shape, DType dtype, Backend& backend,
                      MemoryFormat format = MemoryFormat::contiguous);
  static Tensor empty(const Shape& shape, DType dtype = DType::f32) { return empty(shape, dtype, default_backend()); }
  static Tensor zeros(const Shape& shape, DType dtype, Backend& backend);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32) { return zeros(shape, dtype, default_backend()); }
  static Tensor full(const Shape& shape, double value, DType dtype, Backend& backend);
  // Copies host data (laid out row-major, of the given dtype) to a new tensor.
  static Tensor from_host(const void* data, const Shape& shape, DType dtype, Backend& backend);
  // A row-major tensor over `data`, memory a CPU backend can read that this process does not own
  // (DDP's buckets in a window shared with the other ranks of a host, comm/ddp.h): the caller keeps
  // it alive until own_data() has copied it into the backend's memory, or every handle is gone.
  static Tensor borrowed(void* data, const Shape& shape, DType dtype, Backend& backend);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Backend& backend) {
    TL_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
             "from_vector: " + std::to_string(values.size()) + " values do not fill shape " + shape_str(shape));
    return from_host(values.data(), shape, dtype_of<T>(), backend);
  }
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    return from_vector(values, shape, default_backend());
  }
  // Uniform in [lo, hi) and standard normal, drawn in row-major order from `generator`.
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator& generator, DType dtype, Backend& backend);
  static Tensor normal(const Shape& shape, Generator& generator, DType dtype, Backend& backend);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  std::int64_t offset() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const { return shape_numel(shape()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  DType dtype() const;
  Backend& backend() const;
  DeviceType device_type() const { return backend().device_type(); }
  bool is_contiguous() const;
  bool is_contiguous(MemoryFormat format) const;
  // channels_last when the tensor is dense in NHWC order and not also plain contiguous (a tensor
  // with C == 1 or H == W == 1 is both, and counts as contiguous), else contiguous.
  MemoryFormat memory_format() const;
  Layout layout() const { return Layout{shape(), strides(), offset()}; }
  // Same storage, offset and layout: `other` is this very view.
  bool same_view(const Tensor& other) const;
  std::string str(std::int64_t max_elements = 16) const;  // for messages and debugging

  // ---- data access ----
  void* raw_data() const;  // device pointer to the first element (the offset applied)
  // Memory handed around (ZeRO-3's sharded parameters, comm/ddp.h). set_data points this tensor at
  // `source`'s memory (the same shape and dtype, row-major; PyTorch's `param.data = ...`), keeping
  // what it is to autograd (its gradient, hooks and name) for every handle of it. release_data frees
  // its storage's memory (FSDP's resize to 0: every view of it, and every handle an op saved, loses
  // it together) and restore_data allocates it again, uninitialised; in between, reading any of
  // them is an error naming the tensor.
  void set_data(const Tensor& source);
  void release_data();
  void restore_data();
  bool has_data() const;
  void own_data();  // a borrowed() tensor's memory copied into the backend's, for every handle of it
  template <typename T>
  T* data() const {
    check_host_access(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  // A row-major host copy of the elements; T must match the dtype.
  template <typename T>
  std::vector<T> to_vector() const {
    TL_CHECK(dtype() == dtype_of<T>(), std::string("to_vector: tensor dtype is ") + dtype_name(dtype()) +
                                           ", asked for " + dtype_name(dtype_of<T>()));
    std::vector<T> out(static_cast<std::size_t>(numel()));
    copy_to_host(out.data());
    return out;
  }
  void copy_to_host(void* host_dst) const;  // row-major, numel() * dtype_size bytes
  double item() const;                      // the value of a one-element floating tensor

  // ---- conversions and views (differentiable) ----
  Tensor contiguous() const;
  // Dense in the given layout (a copy, recorded as a "reorder" span, when it is not already).
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Backend& backend) const;
  Tensor reshape(const Shape& shape) const;  // one dimension may be -1
  Tensor view(const Shape& shape) const;     // reshape that never copies; throws if it would have to
  Tensor flatten(std::int64_t start_dim = 0) const;
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;

  // ---- in-place, outside autograd (optimisers, loaders, checkpoints) ----
  // Refused on a tensor that requires grad while grad mode is on (use NoGradGuard).
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward reaches this leaf
  void set_grad(const Tensor& grad);
  // Zeroes the gradient in place (keeping its buffer); set_to_none drops it instead.
  void zero_grad(bool set_to_none = false);
  // A tensor sharing storage, cut from the graph.
  Tensor detach() const;
  const std::shared_ptr<Node>& grad_fn() const;
  // Reverse-mode backward from a one-element tensor (gradient 1), or from any tensor with an
  // explicit gradient of its shape. The graph is freed afterwards.
  void backward() const;
  void backward(const Tensor& gradient) const;
  // Called once per backward when this leaf's gradient for that backward is final.
  void add_grad_ready_hook(GradReadyHook hook);
  const std::string& name() const;
  Tensor& set_name(const std::string& name);

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

 private:
  void check_host_access(DType expected) const;
  void check_defined(const char* what) const;
  void* storage_data() const;  // the storage's start (checked: not released)
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  std::int64_t offset = 0;
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  Tensor grad;
  std::vector<GradReadyHook> grad_ready_hooks;
  std::string name;
};

}  // namespace trainlab
