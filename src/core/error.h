// Typed errors. The library throws; only cli/ turns errors into messages and exit codes.
// Every message is one line that names what was wrong and where (file, tensor, field).
#pragma once
#include <stdexcept>
#include <string>

namespace ar {

enum class ErrorKind { InvalidInput, Unsupported, Io, Internal };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void fail(ErrorKind kind, const std::string& msg);
[[noreturn]] void fail_internal(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace ar

// Internal invariant check (a bug if it fires); input validation uses ar::fail with a real message.
#define AR_CHECK(cond, msg)                                              \
  do {                                                                   \
    if (!(cond)) ::ar::fail_internal(__FILE__, __LINE__, #cond, (msg));  \
  } while (0)
