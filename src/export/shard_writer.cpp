#include "export/shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ar {

ShardWriter::ShardWriter(std::string dir, uint64_t max_shard_bytes, FileName file_name)
    : dir_(std::move(dir)), max_bytes_(max_shard_bytes), file_name_(std::move(file_name)) {}

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
    open_hash_ = Hash64();
  }
  if (bytes && std::fwrite(data, 1, bytes, data_) != bytes)
    fail(ErrorKind::Io, data_path_ + ": write failed (disk full?): " + std::strerror(errno));
  open_hash_.update(data, bytes);
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
    h[in_file(e.name)] = {{"dtype", dtype_safetensors_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  // Length + header fill whole 4 KiB blocks (spaces pad the JSON, as safetensors allows): the data then
  // starts block-aligned, and both ways of closing give the same bytes.
  std::string hs = h.dump();
  hs.resize((8 + hs.size() + kHeaderBlock - 1) / kHeaderBlock * kHeaderBlock - 8, ' ');
  const std::string final_path = dir_ + "/.shard_" + std::to_string(closed_.size());
  if (!keep_ && header_in_place(hs, final_path)) {
    closed_.push_back(std::move(entries_));
    entries_.clear();
    return;
  }
  {
    AtomicFile out(final_path);
    Hash64 hash;
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));
    out.write(len, 8);
    out.write(hs);
    hash.update(len, 8);
    hash.update(hs.data(), hs.size());
    std::FILE* in = std::fopen(data_path_.c_str(), "rb");
    if (!in) fail(ErrorKind::Io, data_path_ + ": cannot reopen");
    std::vector<char> buf(size_t(1) << 22);
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
      out.write(buf.data(), n);
      hash.update(buf.data(), n);
    }
    std::fclose(in);
    out.commit();
    closed_hash_.push_back(hash.digest());
  }
  stale_.push_back(data_path_);  // kept until the next checkpoint (a resume may still need it)
  closed_.push_back(std::move(entries_));
  entries_.clear();
}

// The data file becomes the shard without a copy: the filesystem inserts whole blocks in front of the
// data (FALLOC_FL_INSERT_RANGE: ext4, XFS), which take the length and the header, padded with spaces as
// safetensors allows. False, with the file untouched, where the filesystem cannot (the caller copies);
// a failure after the insertion throws. Not for resumable runs: a checkpoint may still name this data
// file as the open shard.
bool ShardWriter::header_in_place(const std::string& hs, const std::string& final_path) {
  if (!in_place_ || offset_ == 0) return false;
  const int fd = ::open(data_path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, data_path_ + ": cannot reopen: " + std::strerror(errno));
  const uint64_t head = 8 + hs.size();  // whole kHeaderBlocks; the insertion needs whole filesystem blocks
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_blksize <= 0 || head % uint64_t(st.st_blksize) != 0 ||
      fallocate(fd, FALLOC_FL_INSERT_RANGE, 0, off_t(head)) != 0) {
    ::close(fd);
    return false;
  }
  std::string front(8, '\0');
  for (int i = 0; i < 8; ++i) front[size_t(i)] = char(uint8_t(uint64_t(hs.size()) >> (8 * i)));
  front += hs;
  const char* err = nullptr;
  for (size_t done = 0; done < front.size() && !err;) {
    const ssize_t n = pwrite(fd, front.data() + done, front.size() - done, off_t(done));
    if (n <= 0) err = "cannot write the header";
    else done += size_t(n);
  }
  if (!err && fsync(fd) != 0) err = "cannot sync";
  if (::close(fd) != 0 && !err) err = "cannot close";
  if (err) fail(ErrorKind::Io, data_path_ + ": " + err + ": " + std::strerror(errno));
  std::filesystem::rename(data_path_, final_path);
  return true;
}

nlohmann::json ShardWriter::checkpoint() {
  AR_CHECK(keep_, "ShardWriter::checkpoint without keep_files()");  // in-place shards have no checksum
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
                       {"open_hash", hex64(open_hash_.digest())}, {"entries", ej(entries_)},
                       {"closed", nlohmann::json::array()}, {"closed_hash", nlohmann::json::array()}};
  for (const auto& c : closed_) st["closed"].push_back(ej(c));
  for (uint64_t h : closed_hash_) st["closed_hash"].push_back(hex64(h));
  return st;
}

void ShardWriter::restore(const nlohmann::json& st) {
  auto bad = [](const std::string& what) -> void { fail(ErrorKind::InvalidInput, "writer state: " + what); };
  if (!st.is_object()) bad("not an object");
  for (const char* k : {"total", "offset", "open", "open_hash", "entries", "closed", "closed_hash"})
    if (!st.contains(k)) bad(std::string("missing '") + k + "'");
  std::set<std::string> names;
  uint64_t total = 0;
  // One shard's entries: unique names, known dtypes, ranges contiguous from 0 and matching dtype x shape.
  auto entries_of = [&](const nlohmann::json& a, const std::string& where) {
    if (!a.is_array()) bad(where + ": not an array");
    std::vector<Entry> es;
    uint64_t at = 0;
    for (const auto& e : a) {
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("dtype") ||
          !e["dtype"].is_string() || !e.contains("shape") || !e["shape"].is_array() || !e.contains("begin") ||
          !e["begin"].is_number_unsigned() || !e.contains("end") || !e["end"].is_number_unsigned())
        bad(where + ": malformed entry");
      Entry x{e["name"].get<std::string>(), DType::F32, {}, e["begin"].get<uint64_t>(), e["end"].get<uint64_t>()};
      if (x.name.empty() || x.name.size() > 1024 || !names.insert(x.name).second)
        bad(where + ": empty, overlong or repeated tensor name '" + x.name.substr(0, 64) + "'");
      if (!dtype_from_safetensors(e["dtype"].get<std::string>(), &x.dtype)) bad(where + ": unknown dtype of " + x.name);
      uint64_t bytes = dtype_size(x.dtype);
      for (const auto& d : e["shape"]) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40)) bad(where + ": bad shape of " + x.name);
        x.shape.push_back(int64_t(d.get<uint64_t>()));
        if (d.get<uint64_t>() && bytes > (uint64_t(1) << 50) / d.get<uint64_t>()) bad(where + ": shape of " + x.name + " too large");
        bytes *= d.get<uint64_t>();
      }
      if (x.begin != at || x.end < x.begin || x.end - x.begin != bytes) bad(where + ": byte range of " + x.name + " is wrong");
      at = x.end;
      es.push_back(std::move(x));
    }
    total += at;
    return std::pair{es, at};
  };
  if (!st["closed"].is_array() || !st["closed_hash"].is_array() || st["closed"].size() != st["closed_hash"].size() ||
      st["closed"].size() > 100000)
    bad("closed shards and their checksums do not match");
  std::vector<std::vector<Entry>> closed;
  std::vector<uint64_t> closed_hash;
  for (size_t i = 0; i < st["closed"].size(); ++i) {
    auto [es, bytes] = entries_of(st["closed"][i], "shard " + std::to_string(i));
    const std::string path = dir_ + "/.shard_" + std::to_string(i);
    verify_file(path, 0, true, st["closed_hash"][i], bytes);
    closed.push_back(std::move(es));
    closed_hash.push_back(std::stoull(st["closed_hash"][i].get<std::string>(), nullptr, 16));
  }
  auto [open_entries, offset] = entries_of(st["entries"], "open shard");
  if (!st["open"].is_boolean() || !st["offset"].is_number_unsigned() || st["offset"].get<uint64_t>() != offset ||
      !st["total"].is_number_unsigned() || st["total"].get<uint64_t>() != total || (!st["open"].get<bool>() && offset))
    bad("offset, total or open flag disagree with the entries");
  const std::string data_path = dir_ + "/.shard_data." + std::to_string(closed.size());
  Hash64 open_hash;
  if (st["open"].get<bool>()) open_hash = verify_file(data_path, offset, false, st["open_hash"], 0);
  // Everything checked: now adopt the state and cut the data file back to the checkpoint.
  total_ = total;
  offset_ = offset;
  entries_ = std::move(open_entries);
  closed_ = std::move(closed);
  closed_hash_ = std::move(closed_hash);
  open_hash_ = open_hash;
  if (st["open"].get<bool>()) {
    data_path_ = data_path;
    if (truncate(data_path_.c_str(), off_t(offset_)) != 0)
      fail(ErrorKind::Io, data_path_ + ": cannot resume: " + std::strerror(errno));
    data_ = std::fopen(data_path_.c_str(), "ab");
    if (!data_) fail(ErrorKind::Io, data_path_ + ": cannot reopen: " + std::strerror(errno));
  }
}

// A file of the state: a regular file (not a link) inside dir_; a closed shard is exactly its header
// plus `data_bytes` long, an open data file at least `prefix` long; the checksum covers the whole closed
// shard or the open file's first `prefix` bytes. Returns the hash state of what it read.
Hash64 ShardWriter::verify_file(const std::string& path, uint64_t prefix, bool closed, const nlohmann::json& want,
                                uint64_t data_bytes) const {
  auto bad = [&](const std::string& what) -> void { fail(ErrorKind::InvalidInput, "writer state: " + path + ": " + what); };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec))) bad("missing or not a regular file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) bad(std::string("cannot open: ") + std::strerror(errno));
  Hash64 h;
  uint64_t want_size = prefix;
  if (closed) {
    uint8_t len[8] = {};
    uint64_t hl = 0;
    if (std::fread(len, 1, 8, f) == 8)
      for (int i = 0; i < 8; ++i) hl |= uint64_t(len[i]) << (8 * i);
    want_size = 8 + hl + data_bytes;
    if (hl > (uint64_t(1) << 30) || size != want_size) {
      std::fclose(f);
      bad("size " + std::to_string(size) + " does not match the recorded shard");
    }
    std::rewind(f);
  } else if (size < prefix) {
    std::fclose(f);
    bad("truncated: " + std::to_string(size) + " bytes, state records " + std::to_string(prefix));
  }
  std::vector<char> buf(size_t(1) << 22);
  for (uint64_t left = want_size; left;) {
    const size_t n = std::fread(buf.data(), 1, size_t(std::min<uint64_t>(left, buf.size())), f);
    if (n == 0) break;
    h.update(buf.data(), n);
    left -= n;
  }
  std::fclose(f);
  if (!want.is_string() || hex64(h.digest()) != want.get<std::string>()) bad("checksum mismatch");
  return h;
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
    for (const auto& e : closed_[i]) index["weight_map"][in_file(e.name)] = name;
  }
  if (n > 1) write_file_atomic(dir_ + "/model.safetensors.index.json", index.dump(2) + "\n");
  return total_;
}

}  // namespace ar
