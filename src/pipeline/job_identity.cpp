#include "pipeline/job_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

#ifndef AR_VERSION
#define AR_VERSION "0.1.0"
#endif

namespace ar {

namespace {
constexpr uint64_t kWhole = 64ull << 20, kEdge = 1ull << 20, kStripe = 64ull << 10, kStride = 256ull << 20;

void hash_range(int fd, uint64_t off, uint64_t len, Hash64& h, const std::string& path) {
  std::vector<char> buf(size_t(std::min<uint64_t>(len, 4ull << 20)));
  while (len > 0) {
    const size_t want = size_t(std::min<uint64_t>(len, buf.size()));
    const ssize_t got = pread(fd, buf.data(), want, off_t(off));
    if (got <= 0) fail(ErrorKind::Io, path + ": read error while fingerprinting the model");
    h.update(buf.data(), size_t(got));
    off += uint64_t(got);
    len -= uint64_t(got);
  }
}

uint64_t sampled_hash(const std::string& path, uint64_t size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, path + ": cannot open to fingerprint the model");
  Hash64 h;
  try {
    if (size <= kWhole) {
      hash_range(fd, 0, size, h, path);
    } else {
      hash_range(fd, 0, kEdge, h, path);
      for (uint64_t o = kStride; o + kStripe < size - kEdge; o += kStride) hash_range(fd, o, kStripe, h, path);
      hash_range(fd, size - kEdge, kEdge, h, path);
    }
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return h.digest();
}
}  // namespace

nlohmann::ordered_json model_fingerprint(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(model_dir)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && e.is_regular_file()) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& name : names) {
    const std::string path = model_dir + "/" + name;
    const uint64_t size = fs::file_size(path);
    files[name] = {{"bytes", size}, {"hash", hex64(sampled_hash(path, size))}};
  }
  return files;
}

std::string build_fingerprint() {
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const uint64_t size = ec ? 0 : std::filesystem::file_size(exe, ec);
  return std::string(AR_VERSION) + " exe:" + (ec || exe.empty() ? "unknown" : hex64(sampled_hash(exe, size)));
}

nlohmann::ordered_json run_identity(const nlohmann::ordered_json& run_fingerprint, const std::string& model_dir) {
  nlohmann::ordered_json options = run_fingerprint;
  nlohmann::ordered_json calibration = options.contains("calibration") ? options["calibration"] : nullptr;
  options.erase("calibration");
  return {{"options", options}, {"model", model_fingerprint(model_dir)}, {"calibration", calibration}};
}

nlohmann::ordered_json job_identity(const nlohmann::ordered_json& run_identity) {
  nlohmann::ordered_json id = {{"build", build_fingerprint()}};
  for (const auto& [k, v] : run_identity.items()) id[k] = v;
  return id;
}

}  // namespace ar
