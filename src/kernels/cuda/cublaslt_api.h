// cuBLASLt, loaded on first use (dlopen of libcublasLt.so.<major>) instead of linked: a binary with the
// CUDA backend then maps none of the library's 540 MB in a CPU-only run (linked, it added about 150 MiB
// to every run's peak RSS and 0.15 s to every start) and runs on machines without it. Only the calls the
// backend makes (gemm.cpp, device.cpp) are in the table.
#pragma once
#include <cublasLt.h>

namespace ar::cuda {

struct CublasLt {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// The table, loaded once per process (thread-safe; it never changes afterwards). Throws Unsupported
// naming the library and the loader's reason when it cannot be loaded or lacks a call.
const CublasLt& cublaslt();

}  // namespace ar::cuda
