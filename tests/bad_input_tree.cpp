#include "bad_input_tree.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "io/mapped_file.h"
#include "model/synthetic.h"

namespace fs = std::filesystem;

namespace ar::test {

namespace {
const char* kModel = "m/model.safetensors";

struct StImage {
  std::string header, data;
};
StImage split(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  return {bytes.substr(8, size_t(n)), bytes.substr(8 + size_t(n))};
}
std::string join(std::string header, const std::string& data) {
  while ((8 + header.size()) % 8) header.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  return out + header + data;
}
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

Tree::Tree(const std::string& root_dir) : root(root_dir) {
  fs::remove_all(root);
  write_synthetic_model(p("m"), tiny_llama_config(1), 5);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The quick brown fox jumps over the lazy dog near the river bank. ";
  write("t.txt", text);
  fs::create_directories(p("notes"));
  write("notes/keep.txt", "unrelated file that must survive\n");
  fs::create_directories(p("empty_dir"));
}

void Tree::write(const std::string& rel, const std::string& bytes) const {
  fs::create_directories(fs::path(p(rel)).parent_path());
  std::FILE* f = std::fopen(p(rel).c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + p(rel));
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

void Tree::edit_config(const std::function<void(nlohmann::json&)>& f) const {
  auto j = nlohmann::json::parse(read_text_file(p("m/config.json")));
  f(j);
  write("m/config.json", j.dump(2));
}

void Tree::edit_header(const std::function<void(nlohmann::ordered_json&)>& f) const {
  StImage img = split(read_text_file(p(kModel)));
  auto h = nlohmann::ordered_json::parse(img.header);
  f(h);
  write(kModel, join(h.dump(), img.data));
}

void Tree::set_header_text(const std::string& header) const {
  write(kModel, join(header, split(read_text_file(p(kModel))).data));
}

void Tree::duplicate_header_key(const std::string& tensor) const {
  StImage img = split(read_text_file(p(kModel)));
  auto h = nlohmann::ordered_json::parse(img.header);
  std::string text = h.dump();
  text.insert(text.size() - 1, ",\"" + tensor + "\":" + h[tensor].dump());
  write(kModel, join(text, img.data));
}

void Tree::poison(const std::string& tensor, size_t index, float v) const {
  StImage img = split(read_text_file(p(kModel)));
  auto h = nlohmann::ordered_json::parse(img.header);
  const size_t at = h[tensor]["data_offsets"][0].get<size_t>() + 4 * index;
  std::memcpy(img.data.data() + at, &v, 4);
  write(kModel, join(img.header, img.data));
}

void Tree::shard_and_duplicate_index_key(const std::string& tensor) const {
  fs::remove_all(p("m"));
  write_synthetic_model(p("m"), tiny_llama_config(1), 5, DType::F32, 2);
  auto idx = nlohmann::ordered_json::parse(read_text_file(p("m/model.safetensors.index.json")));
  std::string text = idx["weight_map"].dump();
  text.insert(text.size() - 1, ",\"" + tensor + "\":" + idx["weight_map"][tensor].dump());
  write("m/model.safetensors.index.json", "{\"metadata\":{},\"weight_map\":" + text + "}");
}

std::map<std::string, std::string> Tree::snapshot() const {
  std::map<std::string, std::string> s;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    if (e.is_directory()) {
      s[rel] = "dir";
    } else if (!e.is_regular_file()) {
      s[rel] = "special";  // a FIFO of a row: reading it would block
    } else {
      const std::string bytes = read_text_file(e.path().string());
      s[rel] = std::to_string(bytes.size()) + " " + std::to_string(fnv1a(bytes));
    }
  }
  return s;
}

CliRun Tree::run_cli(const std::string& args) const {
  // `timeout`: a row that would hang (a FIFO, an endless stream) fails with 124 instead of stopping
  // the suite; 300 s is far above any row's run time, even on an emulated CPU.
  const std::string cmd = "cd '" + root + "' && timeout -k 10 300 " + std::string(AR_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int st = pclose(pipe);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace ar::test
