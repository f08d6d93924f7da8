#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/printable.h"

namespace ar {

namespace {
const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a file";
}

[[noreturn]] void refuse(const std::string& label, mode_t m) {
  fail(ErrorKind::InvalidInput, printable(label) + ": " + kind_of(m) + ", not a regular file");
}
}  // namespace

int open_regular_file(const std::string& path, const std::string& label_in) {
  const std::string label = label_in.empty() ? path : label_in;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorKind::Io, printable(label) + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(label, st.st_mode);  // not even opened: opening a device can act on it
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail(ErrorKind::Io, printable(label) + ": cannot open: " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(label, st.st_mode);
  }
  return fd;  // O_NONBLOCK does nothing on a regular file's reads
}

size_t read_up_to(int fd, char* p, size_t n, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::Io, printable(what) + ": read failed: " + std::strerror(errno));
    }
    got += size_t(r);
  }
  return got;
}

}  // namespace ar
