#include "kernels/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <cstring>
#include <string>

#include "core/error.h"

namespace ar::cuda {

namespace {

std::string loader_error() {
  const char* e = dlerror();
  return e ? e : "unknown reason";
}

CublasLt load() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = lib ? std::string() : loader_error();
#if defined(AR_CUDA_LIBDIR)  // the toolkit this binary was built with, where the loader's path lacks it
  if (!lib) lib = dlopen((std::string(AR_CUDA_LIBDIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (!lib)
    fail(ErrorKind::Unsupported, "cuBLASLt: cannot load " + soname + " (" + why +
                                     "): the CUDA backend's matrix products need it (docs/cuda.md)");
  CublasLt t;
  const auto bind = [&](auto& fn, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) fail(ErrorKind::Unsupported, "cuBLASLt: " + soname + " has no " + name + " (" + loader_error() + ")");
    static_assert(sizeof fn == sizeof p);
    std::memcpy(&fn, &p, sizeof p);  // a data pointer to a function pointer, as POSIX defines dlsym's result
  };
  bind(t.create, "cublasLtCreate");
  bind(t.destroy, "cublasLtDestroy");
  bind(t.desc_create, "cublasLtMatmulDescCreate");
  bind(t.desc_destroy, "cublasLtMatmulDescDestroy");
  bind(t.desc_set, "cublasLtMatmulDescSetAttribute");
  bind(t.layout_create, "cublasLtMatrixLayoutCreate");
  bind(t.layout_destroy, "cublasLtMatrixLayoutDestroy");
  bind(t.pref_create, "cublasLtMatmulPreferenceCreate");
  bind(t.pref_destroy, "cublasLtMatmulPreferenceDestroy");
  bind(t.pref_set, "cublasLtMatmulPreferenceSetAttribute");
  bind(t.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(t.matmul, "cublasLtMatmul");
  return t;  // the library stays loaded for the life of the process
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt table = load();  // a load that throws is retried by the next call
  return table;
}

}  // namespace ar::cuda
