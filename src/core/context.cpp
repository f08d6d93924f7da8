#include "core/context.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
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

// Cached blocks by size (for reuse) and by age (for eviction): when a freed block would push the
// cache past its limit, the least recently cached blocks are freed first, so buffers of a finished
// phase (other sizes) make room for the current phase's instead of keeping it from being cached.
MemoryBacking host_memory() {
  return {"host", [](size_t n) { return std::aligned_alloc(64, n); }, [](void* p) { std::free(p); }};
}

struct Allocator::Pool {
  MemoryBacking backing;
  std::mutex mu;
  std::multimap<size_t, std::pair<uint64_t, void*>> free_blocks;  // size -> (age stamp, block)
  std::map<uint64_t, size_t> by_age;                               // age stamp -> size
  uint64_t clock = 0;
  size_t cache_limit = 0, cached = 0, in_use = 0, peak = 0;
  ~Pool() {
    for (auto& [n, b] : free_blocks) backing.release(b.second);
  }
  // Frees the oldest cached block (the caller holds mu).
  void evict_oldest() {
    const auto [stamp, size] = *by_age.begin();
    auto range = free_blocks.equal_range(size);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second.first == stamp) {
        backing.release(it->second.second);
        free_blocks.erase(it);
        break;
      }
    by_age.erase(by_age.begin());
    cached -= size;
  }
};

Allocator::Allocator(size_t cache_limit, MemoryBacking backing) : pool_(std::make_shared<Pool>()) {
  pool_->backing = std::move(backing);
  pool_->cache_limit = cache_limit;
}

std::shared_ptr<void> Allocator::allocate(size_t bytes) {
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  size_t size = rounded;  // the block's own size: a reused block may be up to 1/kReuseSlack larger
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lk(pool_->mu);  // held over a miss too, so concurrent misses see each other
    if (auto it = pool_->free_blocks.lower_bound(rounded);
        it != pool_->free_blocks.end() && it->first - rounded <= rounded / kReuseSlack) {
      size = it->first;
      p = it->second.second;
      pool_->by_age.erase(it->second.first);
      pool_->free_blocks.erase(it);
      pool_->cached -= size;
    } else {
      // A miss. Cached blocks that no request fits make room first: live plus cached bytes stay
      // within the live peak (and its slack), so the cache never adds to the process's peak. A
      // refused request leaves in_use and peak as they were.
      const size_t live = pool_->in_use + rounded, bound = std::max(pool_->peak, live) + pool_->peak / kReuseSlack;
      while (pool_->cached > 0 && live + pool_->cached > bound) pool_->evict_oldest();
      p = pool_->backing.alloc(rounded);
      if (!p)
        fail(ErrorKind::Io, "out of " + pool_->backing.name + " memory allocating " + std::to_string(bytes) + " bytes");
    }
    pool_->in_use += size;
    pool_->peak = std::max(pool_->peak, pool_->in_use);
  }
  auto pool = pool_;
  return std::shared_ptr<void>(p, [pool, size](void* q) {
    std::lock_guard<std::mutex> lk(pool->mu);
    pool->in_use -= size;
    if (size > pool->cache_limit) return pool->backing.release(q);
    while (pool->cached + size > pool->cache_limit) pool->evict_oldest();
    const uint64_t stamp = pool->clock++;
    pool->free_blocks.emplace(size, std::make_pair(stamp, q));
    pool->by_age.emplace(stamp, size);
    pool->cached += size;
  });
}

size_t Allocator::in_use() const {
  std::lock_guard<std::mutex> lk(pool_->mu);
  return pool_->in_use;
}
size_t Allocator::peak() const {
  std::lock_guard<std::mutex> lk(pool_->mu);
  return pool_->peak;
}
size_t Allocator::cached() const {
  std::lock_guard<std::mutex> lk(pool_->mu);
  return pool_->cached;
}
void Allocator::trim() {
  std::lock_guard<std::mutex> lk(pool_->mu);
  for (auto& [n, b] : pool_->free_blocks) pool_->backing.release(b.second);
  pool_->free_blocks.clear();
  pool_->by_age.clear();
  pool_->cached = 0;
}

Context::Context(Device device, int threads) : device_(device) {
  if (device.kind != DeviceKind::CPU)
    fail(ErrorKind::Unsupported, "device " + device.str() + " is not built into this binary (CPU only)");
  int hw = int(std::thread::hardware_concurrency());
  if (hw <= 0) hw = 1;
  if (threads > ThreadPool::kMaxThreads)
    fail(ErrorKind::InvalidInput, "threads " + std::to_string(threads) + " exceeds the limit of " +
                                      std::to_string(ThreadPool::kMaxThreads));
  int n = threads > 0 ? threads : std::min(hw, ThreadPool::kMaxThreads);
  pool_ = std::make_unique<ThreadPool>(n);
}

Context::Context(Device device, const std::vector<int>& cores)
    : device_(device), cores_(cores) {
  if (device.kind != DeviceKind::CPU)
    fail(ErrorKind::Unsupported, "device " + device.str() + " is not built into this binary (CPU only)");
  if (cores.empty()) fail(ErrorKind::InvalidInput, "device " + device.str() + " has no cores");
  pool_ = std::make_unique<ThreadPool>(int(cores.size()), cores);
}

Context Context::serial_view(const Context& parent) {
  Context c(parent.device_, 1);
  c.allocator_ = parent.allocator_;
  c.states_ = parent.states_;
  return c;
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
