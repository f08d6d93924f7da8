#include "io/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"

namespace ar {

namespace {
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  const std::string& path;
  [[noreturn]] void truncated(const std::string& what) const {
    fail(ErrorKind::InvalidInput, path + ": truncated GGUF (" + what + ")");
  }
  template <class T>
  T get(const char* what) {
    if (size_t(end - p) < sizeof(T)) truncated(what);
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    uint64_t n = get<uint64_t>(what);
    if (n > uint64_t(end - p)) truncated(std::string(what) + " string of " + std::to_string(n) + " bytes");
    std::string s(reinterpret_cast<const char*>(p), size_t(n));
    p += n;
    return s;
  }
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

double read_num(Cursor& c, GgufType t, const char* what) {
  switch (t) {
    case GgufType::U8: return c.get<uint8_t>(what);
    case GgufType::I8: return c.get<int8_t>(what);
    case GgufType::Bool: return c.get<uint8_t>(what) != 0;
    case GgufType::U16: return c.get<uint16_t>(what);
    case GgufType::I16: return c.get<int16_t>(what);
    case GgufType::U32: return c.get<uint32_t>(what);
    case GgufType::I32: return c.get<int32_t>(what);
    case GgufType::F32: return c.get<float>(what);
    case GgufType::U64: return double(c.get<uint64_t>(what));
    case GgufType::I64: return double(c.get<int64_t>(what));
    case GgufType::F64: return c.get<double>(what);
    default: return 0;
  }
}
}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  auto f = MappedFile::open(path);
  Cursor c{f->data(), f->data() + f->size(), path};
  GgufFile g;
  g.path = path;
  if (f->size() < 4 || std::memcmp(f->data(), "GGUF", 4) != 0) fail(ErrorKind::InvalidInput, path + ": not a GGUF file");
  c.p += 4;
  g.version = c.get<uint32_t>("version");
  if (g.version != 2 && g.version != 3)
    fail(ErrorKind::Unsupported, path + ": GGUF version " + std::to_string(g.version) + " (2 and 3 are supported)");
  uint64_t n_tensors = c.get<uint64_t>("tensor count"), n_kv = c.get<uint64_t>("kv count");
  if (n_kv > f->size() || n_tensors > f->size()) fail(ErrorKind::InvalidInput, path + ": implausible GGUF counts");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("key");
    GgufValue v;
    uint32_t t = c.get<uint32_t>("value type");
    if (t > uint32_t(GgufType::F64)) fail(ErrorKind::InvalidInput, path + ": key '" + printable(key) + "' has unknown type " + std::to_string(t));
    v.type = GgufType(t);
    if (v.type == GgufType::String) {
      v.str = c.str(key.c_str());
    } else if (v.type == GgufType::Array) {
      uint32_t et = c.get<uint32_t>("array type");
      uint64_t n = c.get<uint64_t>("array length");
      if (et > uint32_t(GgufType::F64) || et == uint32_t(GgufType::Array))
        fail(ErrorKind::Unsupported, path + ": key '" + printable(key) + "' has an array of type " + std::to_string(et));
      v.elem = GgufType(et);
      size_t min_elem = v.elem == GgufType::String ? 8 : scalar_size(v.elem);
      if (n > uint64_t(c.end - c.p) / min_elem) c.truncated("array '" + key + "' of " + std::to_string(n) + " elements");
      if (v.elem == GgufType::String) {
        v.strs.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.strs.push_back(c.str(key.c_str()));
      } else {
        v.nums.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.nums.push_back(read_num(c, v.elem, key.c_str()));
      }
    } else {
      v.num = read_num(c, v.type, key.c_str());
    }
    // A key given twice would silently take its last value (a later bos id, block count, ...).
    if (!g.kv.emplace(key, std::move(v)).second)
      fail(ErrorKind::InvalidInput, path + ": metadata key '" + key + "' appears twice");
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.str("tensor name");
    uint32_t nd = c.get<uint32_t>("tensor dims");
    if (nd > 8) fail(ErrorKind::InvalidInput, path + ": tensor '" + printable(t.name) + "' has " + std::to_string(nd) + " dims");
    for (uint32_t d = 0; d < nd; ++d) t.dims.push_back(c.get<uint64_t>("tensor dim"));
    t.type = c.get<uint32_t>("tensor type");
    t.offset = c.get<uint64_t>("tensor offset");
    g.tensors.push_back(std::move(t));
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    const bool integer = a->type != GgufType::String && a->type != GgufType::Array && a->type != GgufType::F32 &&
                         a->type != GgufType::F64 && a->type != GgufType::Bool;
    if (!integer || !(a->num >= 1 && a->num <= double(1u << 30)) || (uint64_t(a->num) & (uint64_t(a->num) - 1)) != 0)
      fail(ErrorKind::InvalidInput, path + ": general.alignment must be a power of two between 1 and 2^30");
    g.alignment = uint64_t(a->num);
  }
  g.file_size = f->size();
  const uint64_t end_of_infos = uint64_t(c.p - f->data());
  g.data_start = std::min<uint64_t>((end_of_infos + g.alignment - 1) / g.alignment * g.alignment, g.file_size);
  g.file = std::move(f);
  return g;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t, uint64_t nbytes) const {
  if (!file) fail(ErrorKind::Internal, path + ": GGUF file not mapped");
  auto bad = [&](const std::string& why) {
    fail(ErrorKind::InvalidInput, path + ": tensor '" + printable(t.name) + "': " + why);
  };
  if (t.offset % alignment != 0)
    bad("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(alignment));
  const uint64_t room = file_size - data_start;  // data_start <= file_size
  if (t.offset > room || nbytes > room - t.offset)
    bad(std::to_string(nbytes) + " bytes at data offset " + std::to_string(t.offset) +
        " end past the file (data section of " + std::to_string(room) + " bytes from byte " +
        std::to_string(data_start) + ")");
  return file->data() + data_start + t.offset;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv.find(key);
  return it == kv.end() ? nullptr : &it->second;
}

const std::vector<std::string>& GgufFile::strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::Array || v->elem != GgufType::String)
    fail(ErrorKind::InvalidInput, path + ": key '" + printable(key) + "' missing or not a string array");
  return v->strs;
}

std::string GgufFile::string(const std::string& key, const std::string& def) const {
  const GgufValue* v = find(key);
  return v && v->type == GgufType::String ? v->str : def;
}

int64_t GgufFile::token_id(const std::string& key, int64_t vocab) const {
  const GgufValue* v = find(key);
  if (!v) return -1;
  const bool integer = v->type != GgufType::String && v->type != GgufType::Array && v->type != GgufType::F32 &&
                       v->type != GgufType::F64 && v->type != GgufType::Bool;
  if (!integer) fail(ErrorKind::InvalidInput, path + ": " + key + " must be an integer token id");
  if (v->num == -1 || v->num == 4294967295.0) return -1;  // llama.cpp's "no such token" (-1 as i32 or u32)
  if (!(v->num >= 0 && v->num < double(vocab)))
    fail(ErrorKind::InvalidInput, path + ": " + key + " " +
                                      (std::abs(v->num) < 0x1p62 ? std::to_string(int64_t(v->num)) : std::to_string(v->num)) +
                                      " is outside the vocabulary of " + std::to_string(vocab) + " tokens");
  return int64_t(v->num);
}

void GgufFile::check_token_ids(int64_t vocab) const {
  const std::string prefix = "tokenizer.ggml.", suffix = "_token_id";
  for (const auto& [key, v] : kv)
    if (key.size() > prefix.size() + suffix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0)
      token_id(key, vocab);
}

double GgufFile::number(const std::string& key, double def) const {
  const GgufValue* v = find(key);
  return v && v->type != GgufType::String && v->type != GgufType::Array ? v->num : def;
}

}  // namespace ar
