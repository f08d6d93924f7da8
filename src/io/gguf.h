// GGUF (v2/v3) metadata reader: header, typed key/value pairs (scalars, strings, arrays), tensor
// infos, and where the tensor data section starts. Every length and count is checked against the file
// size before it is used, so a truncated or lying file gives an error naming the file and key, never an
// out-of-bounds read; tensor_data() checks a tensor's byte range against the data section.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"

namespace ar {

enum class GgufType : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64 };

struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem = GgufType::U8;  // for arrays
  double num = 0;                // numeric scalars and bools
  std::string str;               // strings
  std::vector<double> nums;      // numeric arrays
  std::vector<std::string> strs; // string arrays
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  uint64_t offset = 0;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  uint32_t version = 0;
  std::map<std::string, GgufValue> kv;
  std::vector<GgufTensorInfo> tensors;
  const GgufValue* find(const std::string& key) const;
  // Typed accessors that name the file and key when absent or of the wrong type.
  const std::vector<std::string>& strings(const std::string& key) const;
  std::string string(const std::string& key, const std::string& def) const;
  double number(const std::string& key, double def) const;
  // A special-token id (tokenizer.ggml.bos_token_id, ...): -1 when absent or llama.cpp's "none" (-1,
  // 0xFFFFFFFF); otherwise an integer in [0, vocab), or InvalidInput naming the file, key and value
  // (llama.cpp only warns and falls back to a default id, which changes what is evaluated).
  int64_t token_id(const std::string& key, int64_t vocab) const;
  // token_id() of every tokenizer.ggml.*_token_id key (bos, eos, unknown, padding, separator, ...).
  void check_token_ids(int64_t vocab) const;
  std::string path;
  // general.alignment (a power of two, default 32) and the tensor data section: the first multiple of
  // the alignment after the tensor infos. A metadata-only file may end before it (data_start is then
  // clamped to the file size and any tensor with bytes fails in tensor_data).
  uint64_t alignment = 32;
  uint64_t data_start = 0;
  uint64_t file_size = 0;
  // The `nbytes` bytes of tensor `t` in the mapping: InvalidInput naming the file and tensor when its
  // offset is not a multiple of the alignment or the range leaves the file.
  const uint8_t* tensor_data(const GgufTensorInfo& t, uint64_t nbytes) const;
  std::shared_ptr<MappedFile> file;  // the mapping tensor_data points into
};

}  // namespace ar
