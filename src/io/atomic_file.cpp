#include "io/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fs = std::filesystem;

namespace ar {

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())) {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail(ErrorKind::Io, path + ": cannot create: " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n) fail(ErrorKind::Io, path_ + ": write failed: " + std::strerror(errno));
}

void AtomicFile::commit() {
  if (std::fflush(f_) != 0 || fsync(fileno(f_)) != 0)
    fail(ErrorKind::Io, path_ + ": flush failed: " + std::strerror(errno));
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) fail(ErrorKind::Io, path_ + ": close failed: " + std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail(ErrorKind::Io, path_ + ": rename failed: " + std::strerror(errno));
  committed_ = true;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

AtomicDir::AtomicDir(const std::string& path, bool overwrite)
    : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())), overwrite_(overwrite) {
  std::error_code ec;
  if (fs::exists(path_, ec) && !overwrite_)
    fail(ErrorKind::InvalidInput, path_ + ": output directory exists (pass --overwrite to replace it)");
  fs::remove_all(tmp_, ec);
  if (!fs::create_directories(tmp_, ec) || ec)
    fail(ErrorKind::Io, tmp_ + ": cannot create directory: " + ec.message());
}

AtomicDir::AtomicDir(const std::string& path, bool overwrite, bool resumable)
    : path_(path), tmp_(path + ".partial"), overwrite_(overwrite), resumable_(resumable) {
  std::error_code ec;
  if (fs::exists(path_, ec) && !overwrite_)
    fail(ErrorKind::InvalidInput, path_ + ": output directory exists (pass --overwrite to replace it)");
  fs::create_directories(tmp_, ec);
  if (ec || !fs::is_directory(tmp_)) fail(ErrorKind::Io, tmp_ + ": cannot create directory: " + ec.message());
}

AtomicDir::~AtomicDir() {
  std::error_code ec;
  if (!committed_ && !resumable_) fs::remove_all(tmp_, ec);
}

void AtomicDir::commit() {
  std::error_code ec;
  if (fs::exists(path_, ec)) {
    if (!overwrite_) fail(ErrorKind::InvalidInput, path_ + ": output directory appeared while writing");
    fs::remove_all(path_, ec);
    if (ec) fail(ErrorKind::Io, path_ + ": cannot replace: " + ec.message());
  }
  fs::rename(tmp_, path_, ec);
  if (ec) fail(ErrorKind::Io, path_ + ": rename failed: " + ec.message());
  committed_ = true;
}

}  // namespace ar
