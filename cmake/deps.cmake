# Every dependency comes from Debian's packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
          /usr/include/x86_64-linux-gnu /usr/include REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
# oneDNN (libdnnl-dev 2.6, OpenMP runtime): bf16 and fp32 matmuls in kernels/cpu/matmul_dnnl.cpp. Its
# CMake config also requires OpenCL (Debian builds the OCL GPU runtime; libdnnl-dev pulls it in).
find_package(dnnl 2.6 CONFIG REQUIRED)
# libgomp, oneDNN's threading runtime: kernels set its per-thread thread count (omp_set_num_threads).
find_library(AR_GOMP_LIBRARY NAMES gomp libgomp.so.1 REQUIRED)
find_package(benchmark QUIET)
# Gloo (libgloo-dev): the multi-process lane's collectives over TCP (src/distributed/). Its CMake package
# exports the imported target `gloo`.
find_package(Gloo CONFIG REQUIRED)
