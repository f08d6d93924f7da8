#include "io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/printable.h"
#include "io/atomic_file.h"
#include "io/json_unique.h"

namespace ar {

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MiB, as the reference implementation limits it

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  fail(ErrorKind::InvalidInput, what + ": " + msg);
}

size_t as_size(const nlohmann::json& v, const std::string& what, const std::string& ctx) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return size_t(v.get<int64_t>());
    bad(what, ctx + " must be a non-negative integer");
  }
  return size_t(v.get<uint64_t>());
}

// Byte ranges are disjoint: sorted by (begin, end), every tensor starts at or after the furthest end
// so far. A zero-size tensor may therefore sit at a boundary (where another tensor begins or ends, or
// beside another zero-size tensor) but never strictly inside another tensor's bytes.
void check_no_overlap(std::vector<StTensorInfo>& ts, const std::string& what) {
  std::sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t furthest = 0, owner = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i > 0 && ts[i].begin < furthest)
      bad(what, "tensors '" + printable(ts[owner].name) + "' and '" + printable(ts[i].name) + "' overlap (data bytes " +
                    std::to_string(ts[i].begin) + " < " + std::to_string(furthest) + ")");
    if (ts[i].end >= furthest) {
      furthest = ts[i].end;
      owner = i;
    }
  }
}
}  // namespace

StHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 8) bad(what, "truncated: " + std::to_string(size) + " bytes, need 8 for the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxHeader) bad(what, "header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n > size - 8)
    bad(what, "truncated: header length " + std::to_string(n) + " but only " + std::to_string(size - 8) +
                  " bytes follow");
  const char* text = reinterpret_cast<const char*>(data + 8);
  nlohmann::json j = parse_json_unique(text, text + n, what + ": header", "tensor name");
  if (!j.is_object()) bad(what, "header is not a JSON object");
  StHeader h;
  h.data_start = 8 + size_t(n);
  const size_t data_size = size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(what, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(what, "__metadata__ value for '" + printable(m.key()) + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tn = "tensor '" + printable(name) + "'";
    if (!v.is_object()) bad(what, tn + " entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad(what, tn + " has no dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) bad(what, tn + " has no shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad(what, tn + " has no data_offsets [begin, end]");
    StTensorInfo t;
    t.name = name;
    std::string dt = v["dtype"].get<std::string>();
    if (!dtype_from_safetensors(dt, &t.dtype)) bad(what, tn + " has unsupported dtype " + printable(dt));
    size_t numel = 1;
    for (const auto& d : v["shape"]) {
      size_t dim = as_size(d, what, tn + " shape entry");
      if (dim != 0 && numel > std::numeric_limits<size_t>::max() / 16 / dim)
        bad(what, tn + " shape is too large");
      numel *= dim;
      t.shape.push_back(int64_t(dim));
    }
    t.begin = as_size(v["data_offsets"][0], what, tn + " data_offsets");
    t.end = as_size(v["data_offsets"][1], what, tn + " data_offsets");
    if (t.begin > t.end) bad(what, tn + " data_offsets begin > end");
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      bad(what, tn + " data_offsets span " + std::to_string(t.end - t.begin) + " bytes but shape " +
                    shape_str(t.shape) + " of " + dt + " needs " + std::to_string(numel * dtype_size(t.dtype)));
    if (t.end > data_size)
      bad(what, "truncated: " + tn + " ends at data byte " + std::to_string(t.end) + " but the data section has " +
                    std::to_string(data_size) + " bytes");
    h.tensors.push_back(std::move(t));
  }
  check_no_overlap(h.tensors, what);
  return h;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->file_ = MappedFile::open(path);
  f->header_ = parse_safetensors(f->file_->data(), f->file_->size(), path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  return f;
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Tensor SafetensorsFile::load_f32(const std::string& name, Context& ctx) const {
  const StTensorInfo* t = find(name);
  if (!t) fail(ErrorKind::InvalidInput, path() + ": tensor '" + printable(name) + "' not found");
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
    fail(ErrorKind::Unsupported, path() + ": tensor '" + name + "' has dtype " + dtype_safetensors_name(t->dtype) +
                                     "; weights must be F32, BF16 or F16");
  Tensor out = Tensor::empty(t->shape, DType::F32, ctx);
  convert_to_f32(bytes(*t), t->dtype, out.f32(), size_t(out.numel()));
  file_->release(bytes(*t), t->end - t->begin);
  check_finite(out, name);
  return out;
}

Tensor SafetensorsFile::load_f32_range(const std::string& name, int64_t offset, const Shape& shape, Context& ctx) const {
  const StTensorInfo* t = find(name);
  if (!t) fail(ErrorKind::InvalidInput, path() + ": tensor '" + printable(name) + "' not found");
  if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
    fail(ErrorKind::Unsupported, path() + ": tensor '" + name + "' has dtype " + dtype_safetensors_name(t->dtype) +
                                     "; weights must be F32, BF16 or F16");
  Tensor out = Tensor::empty(shape, DType::F32, ctx);
  const size_t es = dtype_size(t->dtype), total = (t->end - t->begin) / es;
  if (offset < 0 || size_t(offset) > total || size_t(out.numel()) > total - size_t(offset))
    fail(ErrorKind::InvalidInput, path() + ": tensor '" + name + "': elements [" + std::to_string(offset) + ", " +
                                      std::to_string(offset + out.numel()) + ") are past its " + std::to_string(total));
  const uint8_t* b = bytes(*t) + size_t(offset) * es;
  convert_to_f32(b, t->dtype, out.f32(), size_t(out.numel()));
  file_->release(b, size_t(out.numel()) * es);
  check_finite(out, name);
  return out;
}

void SafetensorsFile::check_finite(const Tensor& t, const std::string& name) const {
  const float* p = t.f32();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i]))
      fail(ErrorKind::InvalidInput, path() + ": tensor " + name + ": non-finite value " +
                                        (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") + " at element " +
                                        std::to_string(i) + " of " + std::to_string(n));
}

namespace {
// Index of the first element whose exponent bits are all ones (NaN or Inf), or n.
template <class U>
size_t first_non_finite(const uint8_t* p, size_t n, U exp_mask) {
  for (size_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    if ((v & exp_mask) == exp_mask) return i;
  }
  return n;
}
}  // namespace

void SafetensorsFile::check_finite_stored(const StTensorInfo& t) const {
  const uint8_t* p = bytes(t);
  const size_t n = (t.end - t.begin) / std::max<size_t>(1, dtype_size(t.dtype));
  size_t bad_at = n;
  if (t.dtype == DType::F32) bad_at = first_non_finite<uint32_t>(p, n, 0x7f800000u);
  else if (t.dtype == DType::BF16) bad_at = first_non_finite<uint16_t>(p, n, uint16_t(0x7f80));
  else if (t.dtype == DType::F16) bad_at = first_non_finite<uint16_t>(p, n, uint16_t(0x7c00));
  else return;
  file_->release(p, t.end - t.begin);
  if (bad_at == n) return;
  float v = 0;
  convert_to_f32(p + bad_at * dtype_size(t.dtype), t.dtype, &v, 1);
  fail(ErrorKind::InvalidInput, path() + ": tensor " + t.name + ": non-finite value " +
                                    (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf") + " at element " +
                                    std::to_string(bad_at) + " of " + std::to_string(n));
}

void write_safetensors(const std::string& path, const std::vector<StEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  for (const auto& e : tensors) {
    nlohmann::ordered_json t;
    t["dtype"] = dtype_safetensors_name(e.tensor.dtype());
    t["shape"] = e.tensor.shape();
    t["data_offsets"] = {off, off + e.tensor.nbytes()};
    off += e.tensor.nbytes();
    h[e.name] = t;
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs.push_back(' ');  // pad so the data section is 8-byte aligned
  AtomicFile out(path);
  uint8_t len[8];
  uint64_t n = hs.size();
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  out.write(len, 8);
  out.write(hs.data(), hs.size());
  for (const auto& e : tensors) out.write(e.tensor.raw(), e.tensor.nbytes());
  out.commit();
}

}  // namespace ar
