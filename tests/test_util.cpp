#include "test_util.h"

#include <sys/stat.h>

namespace ar::test {
std::string fixtures_dir() {
  const char* env = std::getenv("AR_FIXTURES");
  std::string d = env ? env : std::string(AR_SOURCE_DIR) + "/../shared/fixtures";
  struct stat st {};
  return ::stat((d + "/stories260K/stories260K.bin").c_str(), &st) == 0 ? d : "";
}
}  // namespace ar::test
