// Streamed GGUF v3 writer (the format llama.cpp loads). The order of calls is the order of the file:
//   1. add_* key/values (kept in insertion order; a key may be added once) and add_tensor_info for
//      every tensor (dims in ggml order: ne0 = the row length first; type = ggml type id);
//   2. write_header(): magic, version 3, counts, the key/values, the tensor infos with data offsets
//      aligned to general.alignment (32 unless that key was added with another power of two);
//   3. write_tensor_data / write_tensor_chunk in declaration order, each tensor padded to alignment;
//   4. commit(): the file appears under its name (AtomicFile: temp + fsync + rename).
// Only the key/values and tensor infos are held in memory; tensor bytes go straight to the file.
// A writer destroyed before commit() leaves nothing behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace ar {

class AtomicFile;

// Bytes of a tensor of ggml type `type` and dims `ne` (ne0 first); fails (Unsupported) for a type the
// writer does not know and (InvalidInput) when ne0 is not a multiple of the type's block size.
// `what` names the tensor in errors.
uint64_t ggml_tensor_nbytes(uint32_t type, const std::vector<uint64_t>& ne, const std::string& what);

class GgufWriter {
 public:
  explicit GgufWriter(const std::string& path);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  void add_u8(const std::string& key, uint8_t v);
  void add_i8(const std::string& key, int8_t v);
  void add_u16(const std::string& key, uint16_t v);
  void add_i16(const std::string& key, int16_t v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_i64(const std::string& key, int64_t v);
  void add_f32(const std::string& key, float v);
  void add_f64(const std::string& key, double v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  // Arrays: the element type follows the C++ type (uint8_t..int64_t, float, double, std::string).
  void add_array(const std::string& key, const std::vector<uint8_t>& v);
  void add_array(const std::string& key, const std::vector<int8_t>& v);
  void add_array(const std::string& key, const std::vector<uint16_t>& v);
  void add_array(const std::string& key, const std::vector<int16_t>& v);
  void add_array(const std::string& key, const std::vector<uint32_t>& v);
  void add_array(const std::string& key, const std::vector<int32_t>& v);
  void add_array(const std::string& key, const std::vector<uint64_t>& v);
  void add_array(const std::string& key, const std::vector<int64_t>& v);
  void add_array(const std::string& key, const std::vector<float>& v);
  void add_array(const std::string& key, const std::vector<double>& v);
  void add_array(const std::string& key, const std::vector<std::string>& v);
  void add_bool_array(const std::string& key, const std::vector<bool>& v);
  bool has_key(const std::string& key) const;

  // Declares a tensor; `nbytes` must equal ggml_tensor_nbytes(type, dims).
  void add_tensor_info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t nbytes);
  void write_header();
  // The whole tensor at once: `name` must be the next declared tensor and `n` its size.
  void write_tensor_data(const std::string& name, const void* data, size_t n);
  // Part of the next tensor: chunks of one tensor are appended until its size is reached.
  void write_tensor_chunk(const std::string& name, const void* data, size_t n);
  void commit();

  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset(const std::string& name) const;  // of a declared tensor, after write_header()

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    uint64_t nbytes, offset = 0;
  };
  void add_kv(const std::string& key, GgufType type, const std::string& payload);
  template <class T>
  void add_numeric_array(const std::string& key, GgufType elem, const std::vector<T>& v);
  void check_not_started(const std::string& what) const;
  void finish_tensor();
  void pad_to_alignment();

  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  std::set<std::string> kv_keys_;
  std::string kv_bytes_;  // serialized key/values in insertion order
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
  bool header_written_ = false, committed_ = false;
  size_t next_ = 0;          // index of the tensor being written
  uint64_t written_ = 0;     // bytes of tensors_[next_] written so far
  uint64_t file_pos_ = 0;    // bytes written to the file
};

}  // namespace ar
