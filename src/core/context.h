// Device, allocator and the per-device Context passed explicitly to every kernel.
// A Context owns its thread pool and records how many threads BLAS may use; the pool's loops and
// BLAS calls never nest, so threads in flight never exceed the cores given to the context.
// The CUDA backend adds a stream and cuBLAS handle behind the same Context (device kind CUDA).
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "core/thread_pool.h"

namespace ar {

enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  std::string str() const;
  static Device parse(const std::string& s);  // "cpu", "cpu:0", "cuda:1"
  bool operator==(const Device&) const = default;
};

// Byte accounting for one device: current and peak bytes of live tensors.
struct AllocStats {
  std::atomic<size_t> in_use{0};
  std::atomic<size_t> peak{0};
};

class Allocator {
 public:
  Allocator() : stats_(std::make_shared<AllocStats>()) {}
  // 64-byte aligned, owned by the returned pointer (frees and updates stats on release).
  std::shared_ptr<void> allocate(size_t bytes);
  size_t in_use() const { return stats_->in_use.load(); }
  size_t peak() const { return stats_->peak.load(); }

 private:
  std::shared_ptr<AllocStats> stats_;
};

class Context {
 public:
  // threads <= 0 means all hardware threads.
  explicit Context(Device device = {}, int threads = 0);
  const Device& device() const { return device_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }
  int blas_threads() const { return blas_threads_; }
  Allocator& allocator() { return allocator_; }

 private:
  Device device_;
  std::unique_ptr<ThreadPool> pool_;
  int blas_threads_;
  Allocator allocator_;
};

// Peak resident set size of this process in MiB (getrusage), and current RSS (from /proc).
double peak_rss_mb();
double current_rss_mb();

}  // namespace ar
