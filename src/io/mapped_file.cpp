#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/input_file.h"

namespace ar {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: a FIFO given as a model file must not block open(); fstat below refuses it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail(ErrorKind::Io, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::Io, path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(ErrorKind::Io, path + ": mmap failed: " + std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(const uint8_t* p, size_t n) const {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  uintptr_t b = (uintptr_t(p) + page - 1) / page * page, e = (uintptr_t(p) + n) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

std::string read_text_file(const std::string& path) {
  const int fd = open_regular_file(path);
  std::string out;
  try {
    char buf[1 << 16];
    while (size_t n = read_up_to(fd, buf, sizeof buf, path)) out.append(buf, n);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace ar
