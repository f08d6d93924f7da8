// A fresh temporary tree for bad-input tests: a small synthetic model in "m" (fp32, one layer, byte
// tokenizer), a text "t.txt", an unrelated file "notes/keep.txt" and an empty directory "empty_dir".
// Helpers mutate the model files in place; snapshot() records every path with its size and content
// hash so a test can assert that a command changed and added nothing.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace ar::test {

struct CliRun {
  int code;
  std::string out;  // stdout and stderr together
};

struct Tree {
  std::string root;
  explicit Tree(const std::string& root_dir);

  std::string p(const std::string& rel) const { return root + "/" + rel; }
  void write(const std::string& rel, const std::string& bytes) const;
  void edit_config(const std::function<void(nlohmann::json&)>& f) const;
  // m/model.safetensors: rewrite its JSON header (data section kept byte for byte).
  void edit_header(const std::function<void(nlohmann::ordered_json&)>& f) const;
  void set_header_text(const std::string& header) const;
  void duplicate_header_key(const std::string& tensor) const;
  // Element `index` of an F32 tensor set to v.
  void poison(const std::string& tensor, size_t index, float v) const;
  // Re-writes the model as two shards and lists `tensor` twice in the index's weight_map.
  void shard_and_duplicate_index_key(const std::string& tensor) const;

  // relative path -> "dir" or "<size> <hash>"
  std::map<std::string, std::string> snapshot() const;
  // Runs the autoround binary with `args` in `root` as the current directory.
  CliRun run_cli(const std::string& args) const;
};

}  // namespace ar::test
