// Opening a file the user named without hanging on it. A FIFO blocks open() until a writer appears,
// and a device or socket can stream forever, so every text input must be a regular file; the check
// happens before open() (stat) and again on the opened descriptor (open with O_NONBLOCK, fstat), so a
// path swapped in between cannot block either.
#pragma once
#include <cstddef>
#include <string>

namespace ar {

// A read-only descriptor for the regular file `path`. Refuses anything else (InvalidInput) with
// "LABEL: a FIFO, not a regular file" (LABEL defaults to the path), a missing file as Io.
int open_regular_file(const std::string& path, const std::string& label = "");

// Fills p[0..n) from fd, short only at the end of the data; retries EINTR, throws Io naming `what`.
size_t read_up_to(int fd, char* p, size_t n, const std::string& what);

}  // namespace ar
