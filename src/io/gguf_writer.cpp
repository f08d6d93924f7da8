#include "io/gguf_writer.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ar {

static_assert(std::endian::native == std::endian::little, "GGUF files are written little endian");

namespace {
// ggml refuses tensor names of GGML_MAX_NAME (64) bytes or more, the terminating NUL included.
constexpr size_t kMaxTensorName = 63;
// Keys and strings carry a u64 length; we cap keys far below it so a runaway key is a clear error.
constexpr size_t kMaxKey = 65535;
// ggml_tensor has 4 dims (GGML_MAX_DIMS).
constexpr size_t kMaxDims = 4;

struct TypeSize {
  uint32_t type, block, bytes;
};
// (ggml type id, elements per block, bytes per block) of the types an exporter writes.
constexpr TypeSize kTypeSizes[] = {
    {0, 1, 4},      // F32
    {1, 1, 2},      // F16
    {2, 32, 18},    // Q4_0
    {3, 32, 20},    // Q4_1
    {6, 32, 22},    // Q5_0
    {7, 32, 24},    // Q5_1
    {8, 32, 34},    // Q8_0
    {10, 256, 84},  // Q2_K
    {11, 256, 110}, // Q3_K
    {12, 256, 144}, // Q4_K
    {13, 256, 176}, // Q5_K
    {14, 256, 210}, // Q6_K
    {24, 1, 1},     // I8
    {25, 1, 2},     // I16
    {26, 1, 4},     // I32
    {27, 1, 8},     // I64
    {28, 1, 8},     // F64
    {30, 1, 2},     // BF16
};

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // GGUF is little endian, as are the hosts we build for
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
}  // namespace

uint64_t ggml_tensor_nbytes(uint32_t type, const std::vector<uint64_t>& ne, const std::string& what) {
  const TypeSize* ts = nullptr;
  for (const auto& t : kTypeSizes)
    if (t.type == type) ts = &t;
  if (!ts) fail(ErrorKind::Unsupported, "tensor '" + what + "': ggml type " + std::to_string(type) + " is not supported");
  if (ne.empty() || ne[0] % ts->block != 0)
    fail(ErrorKind::InvalidInput, "tensor '" + what + "': row length " + (ne.empty() ? "0" : std::to_string(ne[0])) +
                                      " is not a multiple of ggml type " + std::to_string(type) + "'s block of " +
                                      std::to_string(ts->block));
  uint64_t n = ne[0] / ts->block * ts->bytes;
  for (size_t i = 1; i < ne.size(); ++i) {
    if (ne[i] != 0 && n > UINT64_MAX / ne[i]) fail(ErrorKind::InvalidInput, "tensor '" + what + "': size overflows");
    n *= ne[i];
  }
  return n;
}

GgufWriter::GgufWriter(const std::string& path) : path_(path), file_(std::make_unique<AtomicFile>(path)) {}

GgufWriter::~GgufWriter() = default;  // AtomicFile removes its temporary unless committed

void GgufWriter::check_not_started(const std::string& what) const {
  if (header_written_) fail(ErrorKind::Internal, path_ + ": " + what + " after write_header()");
}

bool GgufWriter::has_key(const std::string& key) const { return kv_keys_.count(key) != 0; }

void GgufWriter::add_kv(const std::string& key, GgufType type, const std::string& payload) {
  check_not_started("key '" + key + "' added");
  if (key.empty() || key.size() > kMaxKey)
    fail(ErrorKind::InvalidInput, path_ + ": GGUF key of " + std::to_string(key.size()) + " bytes (1.." +
                                      std::to_string(kMaxKey) + ")");
  if (!kv_keys_.insert(key).second) fail(ErrorKind::InvalidInput, path_ + ": duplicate GGUF key '" + key + "'");
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, uint32_t(type));
  kv_bytes_ += payload;
}

#define AR_GGUF_SCALAR(fn, T, tag)                   \
  void GgufWriter::fn(const std::string& key, T v) { \
    std::string p;                                   \
    put<T>(p, v);                                    \
    add_kv(key, GgufType::tag, p);                   \
  }
AR_GGUF_SCALAR(add_u8, uint8_t, U8)
AR_GGUF_SCALAR(add_i8, int8_t, I8)
AR_GGUF_SCALAR(add_u16, uint16_t, U16)
AR_GGUF_SCALAR(add_i16, int16_t, I16)
AR_GGUF_SCALAR(add_i32, int32_t, I32)
AR_GGUF_SCALAR(add_u64, uint64_t, U64)
AR_GGUF_SCALAR(add_i64, int64_t, I64)
AR_GGUF_SCALAR(add_f32, float, F32)
AR_GGUF_SCALAR(add_f64, double, F64)
#undef AR_GGUF_SCALAR

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  const bool alignment = key == "general.alignment";  // the value the tensor offsets will be aligned to
  if (alignment && (v == 0 || (v & (v - 1)) != 0))
    fail(ErrorKind::InvalidInput, path_ + ": general.alignment " + std::to_string(v) + " is not a power of two");
  std::string p;
  put<uint32_t>(p, v);
  add_kv(key, GgufType::U32, p);
  if (alignment) alignment_ = v;
}

void GgufWriter::add_bool(const std::string& key, bool v) {
  std::string p;
  put<uint8_t>(p, v ? 1 : 0);
  add_kv(key, GgufType::Bool, p);
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  std::string p;
  put_string(p, v);
  add_kv(key, GgufType::String, p);
}

template <class T>
void GgufWriter::add_numeric_array(const std::string& key, GgufType elem, const std::vector<T>& v) {
  std::string p;
  p.reserve(12 + v.size() * sizeof(T));
  put<uint32_t>(p, uint32_t(elem));
  put<uint64_t>(p, v.size());
  for (const T& x : v) put<T>(p, x);
  add_kv(key, GgufType::Array, p);
}

void GgufWriter::add_array(const std::string& k, const std::vector<uint8_t>& v) { add_numeric_array(k, GgufType::U8, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<int8_t>& v) { add_numeric_array(k, GgufType::I8, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<uint16_t>& v) { add_numeric_array(k, GgufType::U16, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<int16_t>& v) { add_numeric_array(k, GgufType::I16, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<uint32_t>& v) { add_numeric_array(k, GgufType::U32, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<int32_t>& v) { add_numeric_array(k, GgufType::I32, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<uint64_t>& v) { add_numeric_array(k, GgufType::U64, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<int64_t>& v) { add_numeric_array(k, GgufType::I64, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<float>& v) { add_numeric_array(k, GgufType::F32, v); }
void GgufWriter::add_array(const std::string& k, const std::vector<double>& v) { add_numeric_array(k, GgufType::F64, v); }

void GgufWriter::add_bool_array(const std::string& key, const std::vector<bool>& v) {
  std::vector<uint8_t> bytes(v.begin(), v.end());
  std::string p;
  put<uint32_t>(p, uint32_t(GgufType::Bool));
  put<uint64_t>(p, bytes.size());
  p.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  add_kv(key, GgufType::Array, p);
}

void GgufWriter::add_array(const std::string& key, const std::vector<std::string>& v) {
  size_t total = 12;
  for (const auto& s : v) total += 8 + s.size();
  std::string p;
  p.reserve(total);
  put<uint32_t>(p, uint32_t(GgufType::String));
  put<uint64_t>(p, v.size());
  for (const auto& s : v) put_string(p, s);
  add_kv(key, GgufType::Array, p);
}

void GgufWriter::add_tensor_info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                                 uint64_t nbytes) {
  check_not_started("tensor '" + name + "' declared");
  if (name.empty() || name.size() > kMaxTensorName)
    fail(ErrorKind::InvalidInput, path_ + ": tensor name '" + name.substr(0, 80) + "' has " +
                                      std::to_string(name.size()) + " bytes (llama.cpp allows 1.." +
                                      std::to_string(kMaxTensorName) + ")");
  for (const auto& t : tensors_)
    if (t.name == name) fail(ErrorKind::InvalidInput, path_ + ": duplicate tensor '" + name + "'");
  if (dims.empty() || dims.size() > kMaxDims)
    fail(ErrorKind::InvalidInput, path_ + ": tensor '" + name + "' has " + std::to_string(dims.size()) + " dims (1..4)");
  for (uint64_t d : dims)
    if (d == 0) fail(ErrorKind::InvalidInput, path_ + ": tensor '" + name + "' has a zero dimension");
  const uint64_t expect = ggml_tensor_nbytes(type, dims, name);
  if (nbytes != expect)
    fail(ErrorKind::InvalidInput, path_ + ": tensor '" + name + "' declared with " + std::to_string(nbytes) +
                                      " bytes; its dims and type need " + std::to_string(expect));
  tensors_.push_back({name, dims, type, nbytes});
}

uint64_t GgufWriter::data_offset(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t.offset;
  fail(ErrorKind::InvalidInput, path_ + ": no tensor '" + name + "'");
}

void GgufWriter::pad_to_alignment() {
  static const char zeros[256] = {};  // alignment is at most what we choose; pad in steps
  uint64_t pad = align_up(file_pos_, alignment_) - file_pos_;
  while (pad > 0) {
    const uint64_t n = pad < sizeof(zeros) ? pad : sizeof(zeros);
    file_->write(zeros, size_t(n));
    file_pos_ += n;
    pad -= n;
  }
}

void GgufWriter::write_header() {
  check_not_started("write_header()");
  std::string h;
  h.append("GGUF", 4);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, kv_keys_.size());
  h += kv_bytes_;
  uint64_t offset = 0;  // relative to the start of the data section
  for (auto& t : tensors_) {
    t.offset = offset;
    offset = align_up(offset + t.nbytes, alignment_);
    put_string(h, t.name);
    put<uint32_t>(h, uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(h, d);
    put<uint32_t>(h, t.type);
    put<uint64_t>(h, t.offset);
  }
  file_->write(h);
  file_pos_ = h.size();
  kv_bytes_.clear();
  kv_bytes_.shrink_to_fit();
  header_written_ = true;
  pad_to_alignment();
}

void GgufWriter::write_tensor_chunk(const std::string& name, const void* data, size_t n) {
  if (!header_written_) fail(ErrorKind::Internal, path_ + ": tensor '" + name + "' written before write_header()");
  if (next_ >= tensors_.size())
    fail(ErrorKind::Internal, path_ + ": tensor '" + name + "' written after every declared tensor");
  const Tensor& t = tensors_[next_];
  if (t.name != name)
    fail(ErrorKind::Internal, path_ + ": tensor '" + name + "' written out of order (expected '" + t.name + "'" +
                                  (written_ ? ", which is incomplete" : "") + ")");
  if (n > t.nbytes - written_)
    fail(ErrorKind::Internal, path_ + ": tensor '" + name + "' given " + std::to_string(written_ + n) +
                                  " bytes of " + std::to_string(t.nbytes));
  file_->write(data, n);
  file_pos_ += n;
  written_ += n;
  if (written_ == t.nbytes) finish_tensor();
}

void GgufWriter::write_tensor_data(const std::string& name, const void* data, size_t n) {
  if (next_ < tensors_.size() && tensors_[next_].name == name && (written_ != 0 || n != tensors_[next_].nbytes))
    fail(ErrorKind::Internal, path_ + ": tensor '" + name + "' given " + std::to_string(n) + " bytes of " +
                                  std::to_string(tensors_[next_].nbytes));
  write_tensor_chunk(name, data, n);
}

void GgufWriter::finish_tensor() {
  pad_to_alignment();  // after every tensor, the last too: ggml reads the data section padded
  ++next_;
  written_ = 0;
}

void GgufWriter::commit() {
  if (!header_written_) fail(ErrorKind::Internal, path_ + ": commit() before write_header()");
  if (next_ < tensors_.size())
    fail(ErrorKind::Internal, path_ + ": commit() with tensor '" + tensors_[next_].name + "' " +
                                  (written_ ? "incomplete" : "not written"));
  if (committed_) fail(ErrorKind::Internal, path_ + ": committed twice");
  file_->commit();
  committed_ = true;
}

}  // namespace ar
