// Device, allocator and the per-device Context passed explicitly to every kernel.
// A Context owns its thread pool; BLAS always runs single-threaded inside the pool's chunks (GEMMs are
// split into row or column blocks of the output, kernels/cpu/matmul.cpp), so threads in flight never exceed
// the pool's threads and several contexts compute side by side without BLAS's process-wide pool.
// (Measured: OpenBLAS's own threads spin between GEMMs and slowed the tuning loop's non-GEMM work by
// 11-17% on 2 cores; docs/benchmarks.md.)
// The CUDA backend adds a stream and cuBLAS handle behind the same Context (device kind CUDA).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

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

// Where an Allocator's blocks come from: host memory (the default), or a GPU's (kernels/cuda/device.h).
// alloc returns null when the memory is exhausted; release takes back what alloc gave.
struct MemoryBacking {
  std::string name = "host";  // names the memory in the out-of-memory error
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> release;
};
MemoryBacking host_memory();  // 64-byte aligned blocks from the C heap

// Caching allocator for one device. Freed blocks are kept and reused for a request of the same
// rounded size, or else the smallest cached block at most 1/kReuseSlack larger. Block-by-block work
// asks for the same sizes every layer and every tuning iteration, so after the first pass no memory is
// mapped or faulted in; a MoE block's routed-row buffers differ from expert to expert and batch to
// batch, and the slack lets them share blocks instead of filling the cache with sizes no later request
// asks for. The cache never raises the footprint: a miss that would take live plus cached bytes past
// the live peak so far (plus 1/kReuseSlack of it) first frees the least recently cached blocks, so the
// peak is the live peak, which the start summary estimates (pipeline/run_summary.h). `cache_limit`
// bounds the idle bytes further (a full cache frees its least recently cached blocks to take a new
// one); by default there is no such bound: a MoE block's tuning state is GBs of buffers freed and
// asked for again every iteration and block, and a 1 GiB cache sent the rest back to the C heap, to be
// faulted in and zeroed page by page again (docs/benchmarks.md, "Mixture-of-experts on an AMD Zen 4;
// the allocator's cache"). in_use/peak count live block bytes (a reused block counts its own size);
// cached() the idle ones.
class Allocator {
 public:
  static constexpr size_t kReuseSlack = 8;  // a cached block serves requests down to 8/9 of its size
  explicit Allocator(size_t cache_limit = SIZE_MAX, MemoryBacking backing = host_memory());
  // Owned by the returned pointer (returned to the cache, or to the backing, on release). Sizes round
  // up to 64 bytes. A device's blocks are reused in the order its one stream runs (kernels/cuda/device.h).
  std::shared_ptr<void> allocate(size_t bytes);
  size_t in_use() const;
  size_t peak() const;
  size_t cached() const;
  void trim();  // frees every cached block

 private:
  struct Pool;
  std::shared_ptr<Pool> pool_;  // shared with live blocks' deleters, so it outlives the Context if needed
};

class Context {
 public:
  // threads <= 0 means all hardware threads; more than ThreadPool::kMaxThreads is refused
  // (InvalidInput, "threads N exceeds the limit of 1024").
  explicit Context(Device device = {}, int threads = 0);
  // A device of the data-parallel lane: a pool pinned to `cores` (one thread each).
  Context(Device device, const std::vector<int>& cores);
  // A one-thread view of `parent` for work that one of parent's pool threads runs on its own (grouped
  // GEMMs, model/moe_ffn.h): the same device and allocator (bytes count against parent's peak), a
  // pool without workers, so every kernel given it runs inline on the calling thread.
  static Context serial_view(const Context& parent);
  const Device& device() const { return device_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }
  const std::vector<int>& cores() const { return cores_; }
  Allocator& allocator() { return allocator_; }
  // State a kernel family keeps between calls on this context and its serial views: one T per context,
  // default-constructed on first use and kept for the context's life (kernels/cpu/matmul_dnnl.cpp keeps
  // its oneDNN primitives here). T synchronizes its own use; this lookup is thread-safe.
  template <class T>
  T& kernel_state() {
    KernelStates& s = *states_;
    std::lock_guard lock(s.mu);
    std::shared_ptr<void>& p = s.by_type[std::type_index(typeid(T))];
    if (!p) p = std::make_shared<T>();
    return *static_cast<T*>(p.get());
  }

 private:
  Device device_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<int> cores_;
  Allocator allocator_;
  struct KernelStates {
    std::mutex mu;
    std::unordered_map<std::type_index, std::shared_ptr<void>> by_type;
  };
  std::shared_ptr<KernelStates> states_ = std::make_shared<KernelStates>();  // shared with serial views
};

// Peak resident set size of this process in MiB (getrusage), and current RSS (from /proc).
double peak_rss_mb();
double current_rss_mb();

}  // namespace ar
