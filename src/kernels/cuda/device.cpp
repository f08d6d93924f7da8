#include "kernels/cuda/device.h"

#include "core/error.h"
#include "kernels/cuda/cublaslt_api.h"

namespace ar::cuda {

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error of a missing driver
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

void check(cudaError_t e, int device, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  fail(ErrorKind::Io, "cuda:" + std::to_string(device) + ": " + what + ": " + cudaGetErrorString(e));
}

void check(cublasStatus_t s, int device, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail(ErrorKind::Io, "cuda:" + std::to_string(device) + ": " + what + ": cuBLAS status " + std::to_string(int(s)));
}

MemoryBacking device_memory(int index) {
  MemoryBacking b;
  b.name = "cuda:" + std::to_string(index) + " device";
  b.alloc = [index](size_t n) -> void* {
    void* p = nullptr;
    check(cudaSetDevice(index), index, "cudaSetDevice");
    if (cudaMalloc(&p, n) != cudaSuccess) {
      cudaGetLastError();  // out of memory is reported by the Allocator, naming the size
      return nullptr;
    }
    return p;
  };
  b.release = [index](void* p) {
    cudaSetDevice(index);
    cudaFree(p);
  };
  return b;
}

namespace {

int checked_index(int index) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) fail(ErrorKind::InvalidInput, "cuda:" + std::to_string(index) + ": no CUDA device visible (" + why + ")");
  if (index < 0 || index >= n)
    fail(ErrorKind::InvalidInput,
         "cuda:" + std::to_string(index) + ": no such device (" + std::to_string(n) + " visible)");
  return index;
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's recommended workspace on Hopper

}  // namespace

DeviceContext::DeviceContext(int index, size_t cache_limit)
    : index_(checked_index(index)), allocator_(cache_limit, device_memory(index)) {
  make_current();
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), index_, "cudaStreamCreate");
  check(cublaslt().create(&blas_), index_, "cublasLtCreate");
  check(cudaMalloc(&workspace_, kWorkspaceBytes), index_, "cudaMalloc of the cuBLASLt workspace");
  workspace_bytes_ = kWorkspaceBytes;
}

DeviceContext::~DeviceContext() {
  cudaSetDevice(index_);
  if (stream_) cudaStreamSynchronize(stream_);
  allocator_.trim();
  if (workspace_) cudaFree(workspace_);
  if (blas_) cublaslt().destroy(blas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void DeviceContext::make_current() const { check(cudaSetDevice(index_), index_, "cudaSetDevice"); }

void DeviceContext::upload(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), index_, "copy to the device");
}

void DeviceContext::download(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), index_, "copy to the host");
  synchronize();
}

void DeviceContext::synchronize() { check(cudaStreamSynchronize(stream_), index_, "stream synchronize"); }

}  // namespace ar::cuda
