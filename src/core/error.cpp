#include "core/error.h"

#include "core/printable.h"

namespace ar {

// Every library error is built here, so escaping here is the net under all messages: whatever input
// bytes a caller forgot to pass through printable() still cannot print a control sequence, a second
// line or be cut at a NUL (what() is a C string). Escaping is idempotent, so messages built from
// already escaped pieces are unchanged.
void fail(ErrorKind kind, const std::string& msg) { throw Error(kind, printable(msg)); }

void fail_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(ErrorKind::Internal,
              printable(std::string("internal error at ") + file + ":" + std::to_string(line) + ": " + cond + ": " + msg));
}

}  // namespace ar
