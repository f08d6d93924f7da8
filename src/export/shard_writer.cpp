#include "export/shard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ar {

ShardWriter::ShardWriter(std::string dir, uint64_t max_shard_bytes) : dir_(std::move(dir)), max_bytes_(max_shard_bytes) {}

ShardWriter::~ShardWriter() {
  if (data_) {
    std::fclose(data_);
    if (!keep_) std::remove(data_path_.c_str());
  }
}

void ShardWriter::add(const std::string& name, const Tensor& t) { add_raw(name, t.dtype(), t.shape(), t.raw(), t.nbytes()); }

void ShardWriter::add_raw(const std::string& name, DType dtype, const Shape& shape, const void* data, size_t bytes) {
  if (data_ && offset_ > 0 && offset_ + bytes > max_bytes_) close_shard();
  if (!data_) {
    data_path_ = dir_ + "/.shard_data." + std::to_string(closed_.size());
    data_ = std::fopen(data_path_.c_str(), "wb");
    if (!data_) fail(ErrorKind::Io, data_path_ + ": cannot create: " + std::strerror(errno));
    offset_ = 0;
  }
  if (bytes && std::fwrite(data, 1, bytes, data_) != bytes)
    fail(ErrorKind::Io, data_path_ + ": write failed (disk full?): " + std::strerror(errno));
  entries_.push_back({name, dtype, shape, offset_, offset_ + bytes});
  offset_ += bytes;
  total_ += bytes;
}

void ShardWriter::close_shard() {
  if (!data_) return;
  if (std::fclose(data_) != 0) fail(ErrorKind::Io, data_path_ + ": close failed: " + std::strerror(errno));
  data_ = nullptr;
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = {{"format", "pt"}};
  for (const auto& e : entries_)
    h[e.name] = {{"dtype", dtype_safetensors_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs.push_back(' ');
  const std::string final_path = dir_ + "/.shard_" + std::to_string(closed_.size());
  {
    AtomicFile out(final_path);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));
    out.write(len, 8);
    out.write(hs);
    std::FILE* in = std::fopen(data_path_.c_str(), "rb");
    if (!in) fail(ErrorKind::Io, data_path_ + ": cannot reopen");
    std::vector<char> buf(size_t(1) << 22);
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) out.write(buf.data(), n);
    std::fclose(in);
    out.commit();
  }
  stale_.push_back(data_path_);  // kept until the next checkpoint (a resume may still need it)
  closed_.push_back(std::move(entries_));
  entries_.clear();
}

nlohmann::json ShardWriter::checkpoint() {
  if (data_ && (std::fflush(data_) != 0 || fsync(fileno(data_)) != 0))
    fail(ErrorKind::Io, data_path_ + ": flush failed: " + std::strerror(errno));
  for (const auto& p : stale_) std::remove(p.c_str());
  stale_.clear();
  auto ej = [](const std::vector<Entry>& es) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : es)
      a.push_back({{"name", e.name}, {"dtype", dtype_safetensors_name(e.dtype)}, {"shape", e.shape},
                   {"begin", e.begin}, {"end", e.end}});
    return a;
  };
  nlohmann::json st = {{"total", total_}, {"offset", offset_}, {"open", data_ != nullptr},
                       {"data_path", data_path_}, {"entries", ej(entries_)}, {"closed", nlohmann::json::array()}};
  for (const auto& c : closed_) st["closed"].push_back(ej(c));
  return st;
}

void ShardWriter::restore(const nlohmann::json& st) {
  auto ej = [](const nlohmann::json& a) {
    std::vector<Entry> es;
    for (const auto& e : a) {
      DType t;
      dtype_from_safetensors(e.at("dtype").get<std::string>(), &t);
      es.push_back({e.at("name"), t, e.at("shape").get<Shape>(), e.at("begin"), e.at("end")});
    }
    return es;
  };
  total_ = st.at("total");
  offset_ = st.at("offset");
  entries_ = ej(st.at("entries"));
  closed_.clear();
  for (const auto& c : st.at("closed")) closed_.push_back(ej(c));
  if (st.at("open").get<bool>()) {
    data_path_ = st.at("data_path");
    if (truncate(data_path_.c_str(), off_t(offset_)) != 0)
      fail(ErrorKind::Io, data_path_ + ": cannot resume: " + std::strerror(errno));
    data_ = std::fopen(data_path_.c_str(), "ab");
    if (!data_) fail(ErrorKind::Io, data_path_ + ": cannot reopen: " + std::strerror(errno));
  }
}

uint64_t ShardWriter::finish() {
  close_shard();
  for (const auto& p : stale_) std::remove(p.c_str());
  stale_.clear();
  const size_t n = closed_.size();
  if (n == 0) fail(ErrorKind::Internal, "no tensors written");
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_}}}, {"weight_map", nlohmann::ordered_json::object()}};
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    if (n == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    std::filesystem::rename(dir_ + "/.shard_" + std::to_string(i), dir_ + "/" + name);
    for (const auto& e : closed_[i]) index["weight_map"][e.name] = name;
  }
  if (n > 1) write_file_atomic(dir_ + "/model.safetensors.index.json", index.dump(2) + "\n");
  return total_;
}

}  // namespace ar
