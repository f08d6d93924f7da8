#include "test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ar::test {
std::string temp_path(const std::string& name) {
  namespace fs = std::filesystem;
  std::string d = (fs::temp_directory_path() / ("ar_test_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  return d;
}

TempDir::TempDir(const std::string& name) : path(temp_path(name)) { std::filesystem::create_directories(path); }

TempDir::~TempDir() {
  std::error_code ec;  // a destructor must not throw; a leftover under /tmp is the worst case
  std::filesystem::remove_all(path, ec);
}

std::string TempDir::write(const std::string& name, const std::string& bytes) const {
  std::ofstream(file(name), std::ios::binary) << bytes;
  return file(name);
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
