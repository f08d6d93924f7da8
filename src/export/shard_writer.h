// Streams tensors into safetensors shards of at most `max_shard_bytes`, holding no tensor data in
// memory: data goes to a temporary file as it arrives; closing a shard puts the header in front of it
// (in place where the filesystem can insert blocks, else by copying header + data into the final file). The index (model.safetensors.index.json) is written when there is more than one shard.
#pragma once
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/tensor.h"

namespace ar {

class ShardWriter {
 public:
  // `file_name` (optional) gives the name a tensor gets in the files (a multimodal checkpoint's language
  // model under its prefix: model/name_map.h); add() and the resume state use the names as given.
  using FileName = std::function<std::string(const std::string&)>;
  ShardWriter(std::string dir, uint64_t max_shard_bytes, FileName file_name = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void add(const std::string& name, const Tensor& t);
  void add_raw(const std::string& name, DType dtype, const Shape& shape, const void* data, size_t bytes);
  // Closes the last shard, renames shards to model-0000i-of-0000n.safetensors (or model.safetensors)
  // and writes the index. Returns the total bytes of tensor data.
  uint64_t finish();
  // Resume support: checkpoint() makes everything added so far durable and returns the state;
  // restore() continues from such a state (data added after it is discarded). The state is untrusted
  // input: restore() checks its structure (unique names, contiguous ranges matching dtype x shape,
  // totals) and the files it names (derived from the state, always inside `dir`: regular files of the
  // recorded sizes and checksums) before it truncates or opens anything; it throws ar::Error otherwise.
  nlohmann::json checkpoint();
  void restore(const nlohmann::json& state);
  void keep_files() { keep_ = true; }  // resumable runs: the destructor leaves the data file
  // Closing a shard inserts the header in front of its data file where the filesystem can (ext4, XFS);
  // false: always copy header + data into a new file (the path of other filesystems, for tests).
  void set_header_in_place(bool on) { in_place_ = on; }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  void close_shard();
  bool header_in_place(const std::string& hs, const std::string& final_path);
  static constexpr uint64_t kHeaderBlock = 4096;
  Hash64 verify_file(const std::string& path, uint64_t prefix, bool closed, const nlohmann::json& want,
                     uint64_t data_bytes) const;
  std::string in_file(const std::string& name) const { return file_name_ ? file_name_(name) : name; }
  std::string dir_;
  uint64_t max_bytes_, total_ = 0;
  FileName file_name_;
  std::FILE* data_ = nullptr;
  std::string data_path_;
  std::vector<Entry> entries_;
  uint64_t offset_ = 0;
  std::vector<std::vector<Entry>> closed_;  // entries per finished shard (temporary names shard_i)
  std::vector<uint64_t> closed_hash_;       // Hash64 of each finished shard file
  Hash64 open_hash_;                        // of the bytes written to the open data file
  std::vector<std::string> stale_;
  bool keep_ = false;           // data files of closed shards, deleted at the next checkpoint
  bool in_place_ = true;
};

}  // namespace ar
