#include "io/json_file.h"

#include "core/error.h"
#include "io/mapped_file.h"

namespace ar {
nlohmann::json read_json_file(const std::string& path) {
  std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(ErrorKind::InvalidInput, path + ": invalid JSON: " + e.what());
  }
}
}  // namespace ar
