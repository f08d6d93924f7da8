// One GPU as the tuner's device: its context holds one stream, a cuBLASLt handle with its workspace and the
// GEMM plans built for it (gemm_plan.h), and a caching Allocator over the GPU's memory (core/context.h, with a
// device MemoryBacking).
//
// Ordering: every kernel, GEMM and copy of a context is queued on its one stream, so work runs in the
// order it was issued. That is also what makes the caching allocator safe without events: a block
// released on the host while kernels that use it are still queued goes back to the cache, and the next
// request that takes it queues its kernels after those on the same stream.
//
// Errors: a CUDA call that fails throws ar::Error naming the device and the call
// ("cuda:1: cudaMalloc of 2147483648 bytes: out of memory"); a kernel's own error surfaces at the next
// synchronize() or copy to the host, named the same way.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/context.h"
#include "kernels/cuda/gemm_plan.h"

namespace ar::cuda {

// The CUDA devices this process sees: 0 where there is no driver or no GPU, with the runtime's reason in
// `why` (for the one line a skipped test prints).
int device_count(std::string* why = nullptr);

// Throws ar::Error "cuda:<device>: <what>: <CUDA's message>" unless e is cudaSuccess.
void check(cudaError_t e, int device, const std::string& what);
void check(cublasStatus_t s, int device, const std::string& what);

// A typed view of an Allocator block on the device.
template <class T>
struct DeviceArray {
  std::shared_ptr<void> mem;
  int64_t n = 0;
  T* data() const { return static_cast<T*>(mem.get()); }
  size_t bytes() const { return size_t(n) * sizeof(T); }
};

class DeviceContext {
 public:
  // Refuses an index the process cannot see: "cuda:3: no such device (2 visible)", or the runtime's
  // reason when none is. cache_limit: the allocator's cached (idle) bytes at most.
  explicit DeviceContext(int index, size_t cache_limit = size_t(4) << 30);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int index() const { return index_; }
  std::string name() const { return "cuda:" + std::to_string(index_); }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t blas() const { return blas_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  Allocator& allocator() { return allocator_; }
  // The cuBLASLt plans built on this context (gemm.cpp), by shape.
  GemmPlans& gemm_plans() { return gemm_plans_; }

  template <class T>
  DeviceArray<T> alloc(int64_t n) {
    return {allocator_.allocate(size_t(n) * sizeof(T)), n};
  }
  // Queued copies on the stream; download waits for it (the host buffer is read on return).
  void upload(void* dst, const void* src, size_t bytes);
  void download(void* dst, const void* src, size_t bytes);
  template <class T>
  DeviceArray<T> upload(const T* src, int64_t n) {
    DeviceArray<T> a = alloc<T>(n);
    upload(a.data(), src, a.bytes());
    return a;
  }
  // Makes the calling thread's current device this one (the runtime's state is per thread).
  void make_current() const;
  // Waits for the stream; throws on an error of any kernel queued before.
  void synchronize();

 private:
  int index_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  Allocator allocator_;
  GemmPlans gemm_plans_{kGemmPlanCapacity};
};

// The allocator's backing for device `index`: cudaMalloc / cudaFree (null when the device is full).
MemoryBacking device_memory(int index);

}  // namespace ar::cuda
