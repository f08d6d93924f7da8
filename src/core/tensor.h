// Tensor: shape + dtype + device + shared storage. Row-major, contiguous, PyTorch/HF order
// (a Linear weight is [out, in]). Views (reshape, mmap'd data) share storage; nothing is copied
// implicitly. Kernels take raw pointers and sizes; Tensor is the owner and the shape bookkeeper.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"

namespace ar {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, Context& ctx);
  static Tensor zeros(const Shape& shape, DType dtype, Context& ctx);
  // Non-owning view of external memory kept alive by `owner` (e.g. an mmap'd file).
  static Tensor external(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner,
                         Device device = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }

  void* raw() { return static_cast<char*>(storage_.get()) + offset_; }
  const void* raw() const { return static_cast<const char*>(storage_.get()) + offset_; }
  template <class T> T* data() { return static_cast<T*>(raw()); }
  template <class T> const T* data() const { return static_cast<const T*>(raw()); }
  float* f32();
  const float* f32() const;

  Tensor reshape(const Shape& shape) const;  // same storage; numel must match
  Tensor slice(int64_t first, int64_t n) const;  // elements [first, first + n) as [n], same storage
  Tensor to(DType dtype, Context& ctx) const;  // converted copy (fp32 <-> bf16/fp16)
  Tensor clone(Context& ctx) const;

 private:
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
  std::shared_ptr<void> storage_;
  size_t offset_ = 0;
};

}  // namespace ar
