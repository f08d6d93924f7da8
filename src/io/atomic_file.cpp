#include "io/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/sibling_name.h"

namespace fs = std::filesystem;

namespace ar {

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  const std::string pattern = sibling_name(path, ".tmp.XXXXXX");
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  int fd = -1;
  without_interrupt_cleanup([&] {  // created and registered as one step: a signal sees both or neither
    fd = mkstemp(name.data());     // exclusive: never opens (or truncates) an existing file
    if (fd < 0) fail(ErrorKind::Io, path + ": cannot create: " + std::strerror(errno));
    tmp_ = name.data();
    reg_.assign(tmp_, false);
  });
  fchmod(fd, 0644);
  f_ = fdopen(fd, "wb");
  if (!f_) {
    close(fd);
    std::remove(tmp_.c_str());
    fail(ErrorKind::Io, path + ": cannot open: " + std::strerror(errno));
  }
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
  without_interrupt_cleanup([&] {
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail(ErrorKind::Io, path_ + ": rename failed: " + std::strerror(errno));
    committed_ = true;
    reg_.release();
  });
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

namespace {
// "<out>.autoround-tmp.XXXXXX" for mkdtemp (shortened when the output's name is already long).
std::string temp_pattern(const std::string& out) { return sibling_name(out, ".autoround-tmp.XXXXXX"); }

// Opens `dir`'s marker and takes its exclusive lock; -1 when another process holds it.
int lock_marker(const std::string& dir) {
  const std::string marker = dir + "/" + kOutputMarker;
  const int fd = open(marker.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail(ErrorKind::Io, marker + ": cannot open: " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void write_marker(const std::string& dir, const std::string& kind) {
  const std::string marker = dir + "/" + kOutputMarker, text = output_marker_json(kind);
  const int fd = open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != ssize_t(text.size()) || close(fd) != 0)
    fail(ErrorKind::Io, marker + ": cannot write: " + std::strerror(errno));
}

// Renames src onto dst; with `exchange`, dst exists and the two are swapped atomically (src then holds
// the old dst). Falls back to two renames where the filesystem lacks renameat2.
void move_into_place(const std::string& src, const std::string& dst, bool exchange) {
  const unsigned flags = exchange ? RENAME_EXCHANGE : RENAME_NOREPLACE;
  if (renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(), flags) == 0) return;
  if (errno != EINVAL && errno != ENOSYS) fail(ErrorKind::Io, dst + ": rename failed: " + std::strerror(errno));
  if (exchange) {
    const std::string aside = sibling_name(src, ".old");
    if (std::rename(dst.c_str(), aside.c_str()) != 0 || std::rename(src.c_str(), dst.c_str()) != 0 ||
        std::rename(aside.c_str(), src.c_str()) != 0)
      fail(ErrorKind::Io, dst + ": rename failed: " + std::strerror(errno));
    return;
  }
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dst, ec))) fail(ErrorKind::InvalidInput, dst + ": appeared while writing");
  if (std::rename(src.c_str(), dst.c_str()) != 0) fail(ErrorKind::Io, dst + ": rename failed: " + std::strerror(errno));
}
}  // namespace

AtomicDir::AtomicDir(const OutputSpec& spec) : spec_(spec) {
  path_ = check_output_dir(spec_);
  std::error_code ec;
  fs::create_directories(fs::path(path_).parent_path(), ec);
  if (ec) fail(ErrorKind::Io, fs::path(path_).parent_path().string() + ": cannot create directory: " + ec.message());
  clean_stale();
  without_interrupt_cleanup([&] { create_temp(); });  // a signal sees the temporary registered or absent
}

void AtomicDir::clean_stale() {
  const fs::path parent = fs::path(path_).parent_path();
  const std::string pattern = fs::path(temp_pattern(path_)).filename().string();
  const std::string prefix = pattern.substr(0, pattern.size() - 6);  // without the XXXXXX
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0 && is_our_output(e.path().string()))
      found.push_back(e.path().string());
  for (const auto& dir : found) {
    const int fd = lock_marker(dir);
    if (fd < 0)
      fail(ErrorKind::InvalidInput, spec_.flag + " " + path_ + ": another autoround run is writing it (" + dir +
                                        " is in use)");
    fs::remove_all(dir, ec);
    close(fd);
    note_ += (note_.empty() ? "" : "; ") + ("removed " + dir + ", left by an interrupted run");
  }
}

void AtomicDir::create_temp() {
  std::error_code ec;
  const std::string partial = sibling_name(path_, ".partial");
  const auto st = fs::symlink_status(partial, ec);
  if (spec_.resumable && fs::exists(st)) {
    if (!fs::is_directory(st) || !is_our_output(partial))
      fail(ErrorKind::InvalidInput, partial + ": exists and is not autoround resume state; remove it or choose another " +
                                        spec_.flag);
    tmp_ = partial;
    resumed_ = true;
  } else if (spec_.resumable) {
    if (mkdir(partial.c_str(), 0755) != 0) fail(ErrorKind::Io, partial + ": cannot create: " + std::strerror(errno));
    tmp_ = partial;
    write_marker(tmp_, spec_.kind);
  } else {
    std::string name = temp_pattern(path_);
    if (!mkdtemp(name.data())) fail(ErrorKind::Io, name + ": cannot create: " + std::strerror(errno));
    tmp_ = name;
    write_marker(tmp_, spec_.kind);
    if (fs::exists(st) && is_our_output(partial))
      note_ += (note_.empty() ? "" : "; ") + partial +
               " holds the resume state of an interrupted --resume run; kept (continue with --resume, or remove it)";
  }
  lock_fd_ = lock_marker(tmp_);
  if (lock_fd_ < 0) fail(ErrorKind::InvalidInput, tmp_ + ": another autoround run is using it");
  keep_ = resumed_;
  reg_.assign(tmp_, keep_);
}

void AtomicDir::keep() {
  if (!spec_.resumable || keep_) return;
  keep_ = true;
  reg_.assign(tmp_, true);
}

AtomicDir::~AtomicDir() {
  std::error_code ec;
  if (!committed_ && !keep_ && !tmp_.empty()) fs::remove_all(tmp_, ec);
  reg_.release();
  if (lock_fd_ >= 0) close(lock_fd_);
}

void AtomicDir::commit() {
  without_interrupt_cleanup([&] {
    std::error_code ec;
    const bool exists = fs::exists(fs::symlink_status(path_, ec));
    if (exists) check_output_dir(spec_);  // still empty or ours, hours later
    move_into_place(tmp_, path_, exists);
    if (exists) fs::remove_all(tmp_, ec);  // the previous output, swapped out
    committed_ = true;
    reg_.release();
  });
}

}  // namespace ar
