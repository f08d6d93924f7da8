#include "core/error.h"

namespace ar {

void fail(ErrorKind kind, const std::string& msg) { throw Error(kind, msg); }

void fail_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(ErrorKind::Internal,
              std::string("internal error at ") + file + ":" + std::to_string(line) + ": " + cond + ": " + msg);
}

}  // namespace ar
