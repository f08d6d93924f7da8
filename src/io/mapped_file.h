// Read-only memory map of a whole file. Shared by the tensors viewing it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ar {

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the resident pages wholly inside [p, p+n) (they are re-read from the file if touched
  // again). Called after a tensor is materialized so RSS holds the copy, not the mapping too.
  void release(const uint8_t* p, size_t n) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string read_text_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace ar
