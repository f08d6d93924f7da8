#include "core/tensor.h"

#include <cstring>

#include "core/error.h"

namespace ar {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Context& ctx) {
  for (auto d : shape)
    if (d < 0) fail(ErrorKind::InvalidInput, "negative dimension in shape " + shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = ctx.device();
  t.storage_ = ctx.allocator().allocate(size_t(shape_numel(shape)) * dtype_size(dtype));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Context& ctx) {
  Tensor t = empty(shape, dtype, ctx);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::external(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  // Aliasing constructor: points at `data`, keeps `owner` alive.
  t.storage_ = std::shared_ptr<void>(std::move(owner), data);
  return t;
}

float* Tensor::f32() {
  AR_CHECK(dtype_ == DType::F32, std::string("tensor is ") + dtype_name(dtype_) + ", not fp32");
  return data<float>();
}
const float* Tensor::f32() const {
  AR_CHECK(dtype_ == DType::F32, std::string("tensor is ") + dtype_name(dtype_) + ", not fp32");
  return data<float>();
}

Tensor Tensor::reshape(const Shape& shape) const {
  AR_CHECK(shape_numel(shape) == numel(), "reshape " + shape_str(shape_) + " -> " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t first, int64_t n) const {
  AR_CHECK(first >= 0 && n >= 0 && first + n <= numel(),
           "slice [" + std::to_string(first) + ", +" + std::to_string(n) + ") of " + shape_str(shape_));
  Tensor t = *this;
  t.shape_ = {n};
  t.offset_ += size_t(first) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::to(DType dtype, Context& ctx) const {
  Tensor out = empty(shape_, dtype, ctx);
  if (dtype == dtype_) {
    std::memcpy(out.raw(), raw(), nbytes());
  } else if (dtype == DType::F32) {
    convert_to_f32(raw(), dtype_, out.f32(), size_t(numel()));
  } else if (dtype_ == DType::F32) {
    convert_from_f32(f32(), out.raw(), dtype, size_t(numel()));
  } else {
    Tensor tmp = to(DType::F32, ctx);
    return tmp.to(dtype, ctx);
  }
  return out;
}

Tensor Tensor::clone(Context& ctx) const { return to(dtype_, ctx); }

}  // namespace ar
