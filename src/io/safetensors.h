// safetensors: [u64 LE header length N][N bytes JSON header][data]. Header maps tensor name ->
// {dtype, shape, data_offsets [begin, end)} relative to the data section; "__metadata__" holds
// string pairs. The reader validates every entry (unique names, known dtype, sizes agree with
// shapes, offsets in bounds, no overlaps: a zero-size tensor may sit at a boundary, never inside
// another tensor's bytes) before anything is read, and names the file and tensor in each error.
// Materialized tensors are checked to be finite (NaN/Inf refused naming the tensor and element).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/mapped_file.h"

namespace ar {

struct StTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin = 0, end = 0;  // offsets into the data section
};

struct StHeader {
  std::vector<StTensorInfo> tensors;  // in file order of offsets
  std::map<std::string, std::string> metadata;
  size_t data_start = 0;  // absolute offset of the data section
};

// Parses and validates a safetensors image held in memory. `what` names the file in errors.
StHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& what);

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  const std::string& path() const { return file_->path(); }
  const StHeader& header() const { return header_; }
  const StTensorInfo* find(const std::string& name) const;
  // Raw bytes of a tensor (possibly unaligned; read with memcpy or convert_to_f32).
  const uint8_t* bytes(const StTensorInfo& t) const { return file_->data() + header_.data_start + t.begin; }
  // Materializes a tensor as fp32 on ctx's device; a NaN or Inf in it is refused (InvalidInput).
  Tensor load_f32(const std::string& name, Context& ctx) const;
  // Elements [offset, offset + numel(shape)) of a tensor, as fp32 of `shape` (a slice of a stacked tensor);
  // a range past the tensor's end is refused.
  Tensor load_f32_range(const std::string& name, int64_t offset, const Shape& shape, Context& ctx) const;
  // Scans a stored F32/BF16/F16 tensor for NaN/Inf without converting it (exponent bits all ones)
  // and refuses one naming the file, tensor and element; other dtypes are not scanned.
  void check_finite_stored(const StTensorInfo& t) const;

 private:
  void check_finite(const Tensor& t, const std::string& name) const;
  std::shared_ptr<MappedFile> file_;
  StHeader header_;
  std::map<std::string, size_t> index_;
};

struct StEntry {
  std::string name;
  Tensor tensor;  // written in its own dtype
};
// Writes a safetensors file atomically (temp file in the same directory, fsync, rename).
void write_safetensors(const std::string& path, const std::vector<StEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ar
