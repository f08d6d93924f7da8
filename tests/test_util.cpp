#include "test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace ar::test {
std::string temp_path(const std::string& name) {
  namespace fs = std::filesystem;
  std::string d = (fs::temp_directory_path() / ("ar_test_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  return d;
}

std::string fixtures_dir() {
  const char* env = std::getenv("AR_FIXTURES");
  std::string d = env ? env : std::string(AR_SOURCE_DIR) + "/../shared/fixtures";
  struct stat st {};
  return ::stat((d + "/stories260K/stories260K.bin").c_str(), &st) == 0 ? d : "";
}
bool any_contains(const std::vector<std::string>& v, const std::string& what) {
  for (const auto& s : v)
    if (s.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace ar::test
