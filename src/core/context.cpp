#include "core/context.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <thread>

#include "core/error.h"

namespace ar {

std::string Device::str() const {
  return std::string(kind == DeviceKind::CPU ? "cpu" : "cuda") + ":" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  Device d;
  std::string kind = s, idx;
  if (auto c = s.find(':'); c != std::string::npos) {
    kind = s.substr(0, c);
    idx = s.substr(c + 1);
  }
  if (kind == "cpu") d.kind = DeviceKind::CPU;
  else if (kind == "cuda") d.kind = DeviceKind::CUDA;
  else fail(ErrorKind::InvalidInput, "unknown device '" + s + "' (expected cpu[:N] or cuda[:N])");
  if (!idx.empty()) {
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    if (*end || v < 0) fail(ErrorKind::InvalidInput, "bad device index in '" + s + "'");
    d.index = int(v);
  }
  return d;
}

std::shared_ptr<void> Allocator::allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail(ErrorKind::Io, "out of memory allocating " + std::to_string(bytes) + " bytes");
  auto stats = stats_;
  size_t now = stats->in_use.fetch_add(rounded) + rounded;
  size_t prev = stats->peak.load();
  while (now > prev && !stats->peak.compare_exchange_weak(prev, now)) {
  }
  return std::shared_ptr<void>(p, [stats, rounded](void* q) {
    stats->in_use.fetch_sub(rounded);
    std::free(q);
  });
}

Context::Context(Device device, int threads) : device_(device) {
  if (device.kind != DeviceKind::CPU)
    fail(ErrorKind::Unsupported, "device " + device.str() + " is not built into this binary (CPU only)");
  int hw = int(std::thread::hardware_concurrency());
  if (hw <= 0) hw = 1;
  int n = threads > 0 ? threads : hw;
  pool_ = std::make_unique<ThreadPool>(n);
  blas_threads_ = n;
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

double current_rss_mb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, rss = 0;
  if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  std::fclose(f);
  return double(rss) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

}  // namespace ar
