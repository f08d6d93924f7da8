// GEMMs on oneDNN's matmul primitive: bf16 operands with fp32 accumulation (gemm_bf16) and fp32
// (gemm_f32_dnnl). Layout as cpu::gemm: C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C, row-major,
// op(A) = A^T when ta (A stored [K,M]), op(B) = B^T when tb (B stored [N,K]); transposes are strides of
// the memory descriptors, nothing is copied here. bf16 products are exact in fp32, sums are fp32.
// Threads: oneDNN (Debian's build uses OpenMP) runs single-threaded inside the context's pool. The
// output is cut into fixed units, each its own matmul call, chosen from the shape only (never from the
// thread count): threads only decide who runs which units, so the bits do not depend on the thread
// count (same scheme as cpu::gemm, kernels/cpu/matmul.cpp). Units are row blocks of C (column blocks for
// short M), equal shares of at least kMinWork multiply-adds with boundaries on multiples of 16 (plan()).
// Reference: ref::gemm in double on the bf16-rounded operands (tests/test_kernels_bf16.cpp).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/bf16_ops.h"

extern "C" {  // libgomp (oneDNN's threading runtime); the nthreads ICV is per calling thread
int omp_get_max_threads(void);
void omp_set_num_threads(int n);
}

namespace ar::cpu {

namespace {
using dnnl::memory;
using dt = memory::data_type;

// Makes oneDNN single-threaded on this thread for the guard's lifetime (OpenMP's nthreads-var is a
// per-thread setting; the previous value is restored).
class OneThread {
 public:
  OneThread() : prev_(omp_get_max_threads()) {
    if (prev_ != 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (prev_ != 1) omp_set_num_threads(prev_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int prev_;
};

struct Gemm {
  dt type;
  bool ta, tb;
  int64_t M, N, K;
  float alpha;
  const void* A;
  int64_t lda;
  const void* B;
  int64_t ldb;
  float beta;
  float* C;
  int64_t ldc;
  Addends add;  // binary-add post-ops after the sum (cpu::gemm's `add`)
  const memory::desc* packed_b = nullptr;  // B already in this (blocked) layout: gemm_dnnl's prepack
};

dnnl::matmul::primitive_desc unit_pd(const dnnl::engine& eng, dt type, bool ta, bool tb, int64_t m, int64_t n,
                                     int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta,
                                     size_t adds = 0, const memory::desc* packed_b = nullptr) {
  const memory::desc a({m, K}, type, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b = packed_b ? *packed_b : memory::desc({K, n}, type, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c({m, n}, dt::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // from the context's allocator (run_unit)
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  dnnl::post_ops po;
  if (beta != 0.f) po.append_sum(beta);
  for (size_t i = 0; i < adds; ++i) po.append_binary(dnnl::algorithm::binary_add, c);
  if (po.len() > 0) attr.set_post_ops(po);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, eng);
}

// The CPU engine, with AR_CPU_ISA applied to oneDNN first (dnnl_isa_cap).
dnnl::engine cpu_engine() {
  dnnl_isa_cap();
  return dnnl::engine(dnnl::engine::kind::cpu, 0);
}

// A unit's matmul, made once per context and unit shape: creating the primitive descriptor and looking
// the primitive up in oneDNN's cache took 2-3 us per unit, thousands of units per tuning iteration.
// Executing one primitive from several threads at once is safe with user scratchpads (unit_pd).
struct UnitKey {
  dt type;
  bool ta, tb;
  int64_t m, n, K, lda, ldb, ldc;
  float alpha, beta;
  size_t adds;
  std::optional<memory::desc> packed_b;
  bool operator==(const UnitKey&) const = default;
};

struct UnitKeyHash {
  size_t operator()(const UnitKey& k) const {
    size_t h = size_t(k.type) * 8 + size_t(k.ta) * 2 + size_t(k.tb) + k.adds * 16 + (k.packed_b ? 1024 : 0);
    for (int64_t v : {k.m, k.n, k.K, k.lda, k.ldb, k.ldc}) h = h * 1000003u ^ size_t(v);
    return h * 1000003u ^ std::hash<float>()(k.alpha) ^ (std::hash<float>()(k.beta) << 1);
  }
};

struct UnitPrimitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  bool brgemm;  // oneDNN's brgemm kernels (sum and binary post-ops applied to the finished product)
};

// The context's units (Context::kernel_state), on one engine of their own that outlives them. Bounded:
// a MoE block's routed row counts vary from batch to batch, so past kCapacity entries the map starts
// over (entries in use stay alive with their callers).
class UnitPrimitives {
 public:
  static constexpr size_t kCapacity = 512;
  const dnnl::engine& engine() const { return eng_; }
  size_t size() {
    std::lock_guard lock(mu_);
    return map_.size();
  }
  // The layout a unit's kernel picks for B (the key's packed_b: B as format `any`), asked once per key:
  // a bf16 descriptor with a free B layout took 15-25 us to make, twice per packed GEMM.
  memory::desc weights_layout(const UnitKey& k) {
    return find_or_make(layouts_, k, [&] {
      OneThread one;
      return unit_pd(eng_, k.type, k.ta, k.tb, k.m, k.n, k.K, k.lda, k.ldb, k.ldc, k.alpha, k.beta, k.adds,
                     &*k.packed_b)
          .weights_desc();
    });
  }
  std::shared_ptr<const UnitPrimitive> get(const UnitKey& k) {
    return find_or_make(map_, k, [&] {
      OneThread one;
      auto pd = unit_pd(eng_, k.type, k.ta, k.tb, k.m, k.n, k.K, k.lda, k.ldb, k.ldc, k.alpha, k.beta, k.adds,
                        k.packed_b ? &*k.packed_b : nullptr);
      const bool brgemm = std::string_view(pd.impl_info_str()).starts_with("brg");
      return std::make_shared<const UnitPrimitive>(UnitPrimitive{pd, dnnl::matmul(pd), brgemm});
    });
  }

 private:
  // Made outside the lock, so that one thread's miss does not hold up the others' units (a MoE block's
  // routed row counts keep missing); where two threads make one key, the first one kept is returned
  // (the same descriptor either way).
  template <class V, class Make>
  V find_or_make(std::unordered_map<UnitKey, V, UnitKeyHash>& map, const UnitKey& k, Make make) {
    {
      std::lock_guard lock(mu_);
      if (auto it = map.find(k); it != map.end()) return it->second;
    }
    V v = make();
    std::lock_guard lock(mu_);
    if (map.size() >= kCapacity) map.clear();
    return map.try_emplace(k, std::move(v)).first->second;
  }

  const dnnl::engine eng_ = cpu_engine();
  std::mutex mu_;
  std::unordered_map<UnitKey, std::shared_ptr<const UnitPrimitive>, UnitKeyHash> map_;
  std::unordered_map<UnitKey, memory::desc, UnitKeyHash> layouts_;
};

// Rows m0..m1 and columns n0..n1 of C as one matmul call on this thread. A transposed A's column block
// (strided) is first copied into a dense [K, m1 - m0] buffer: the copies of all units together read A
// once, and the call then runs on dense operands (brgemm).
void run_unit(Context& ctx, UnitPrimitives& units, const Gemm& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const size_t es = g.type == dt::bf16 ? 2 : 4;
  auto at = [](const void* p, int64_t elems, size_t size) {
    return const_cast<char*>(static_cast<const char*>(p)) + size_t(elems) * size;
  };
  void* a = at(g.A, g.ta ? m0 : m0 * g.lda, es);  // row m of op(A): column m of A when transposed
  void* b = at(g.B, g.tb ? n0 * g.ldb : n0, es);  // column n of op(B): row n of B when transposed
  float* c = g.C + m0 * g.ldc + n0;
  int64_t lda = g.lda;
  Tensor dense;  // from the context's cached allocator: no fresh pages per call
  if (g.ta && m1 - m0 != lda) {
    const size_t row = size_t(m1 - m0) * es;
    dense = Tensor::empty({int64_t(size_t(g.K) * row)}, DType::U8, ctx);
    char* d = dense.data<char>();
    for (int64_t k = 0; k < g.K; ++k) std::memcpy(d + size_t(k) * row, at(a, k * g.lda, es), row);
    a = d;
    lda = m1 - m0;
  }
  const int64_t rows = m1 - m0, cols = n1 - n0;
  std::optional<memory::desc> packed_b;
  if (g.packed_b) packed_b = *g.packed_b;
  auto u = units.get({g.type, g.ta, g.tb, rows, cols, g.K, lda, g.ldb, g.ldc, g.alpha, g.beta, g.add.size(), packed_b});
  // The accumulation contract (cpu::gemm): C = beta C + P, then each addend, one rounding each. oneDNN's
  // brgemm kernels apply the sum and binary post-ops to the finished product; its other kernels (the
  // fp32 gemm:jit that runs without AVX-512) fold beta C into the first K block, so a product is
  // computed whole into a scratch buffer and added here instead, as the OpenBLAS path does.
  Tensor product;
  if ((g.beta != 0.f || !g.add.empty()) && !u->brgemm) {
    u = units.get({g.type, g.ta, g.tb, rows, cols, g.K, lda, g.ldb, cols, g.alpha, 0.f, 0, packed_b});
    product = Tensor::empty({rows * cols}, DType::F32, ctx);
  }
  const dnnl::matmul::primitive_desc& pd = u->pd;
  const dnnl::engine& eng = units.engine();
  float* out = product.defined() ? product.f32() : c;
  OneThread one;
  dnnl::stream s(eng);
  // oneDNN's own scratchpad (B packing) would be a fresh allocation per call: take it from the
  // context's cached allocator instead.
  const size_t scratch_bytes = pd.scratchpad_desc().get_size();
  Tensor scratch = Tensor::empty({int64_t(std::max<size_t>(scratch_bytes, 1))}, DType::U8, ctx);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, memory(pd.src_desc(), eng, a)},
                                         {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), eng, b)},
                                         {DNNL_ARG_DST, memory(pd.dst_desc(), eng, out)},
                                         {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng, scratch.raw())}};
  const int first = g.beta != 0.f ? 1 : 0;  // post-op index of the first addend (after the sum)
  for (size_t i = 0; i < g.add.size() && !product.defined(); ++i)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(first + int(i)) | DNNL_ARG_SRC_1,
                 memory(pd.dst_desc(), eng, const_cast<float*>(g.add[i]) + (c - g.C)));
  u->prim.execute(s, args);
  s.wait();
  if (!product.defined()) return;
  const float* P = product.f32();
  for (int64_t i = 0; i < rows; ++i) {
    float* ci = c + i * g.ldc;
    const float* pi = P + i * cols;
    if (g.beta == 0.f) std::memcpy(ci, pi, size_t(cols) * sizeof(float));
    else
      for (int64_t j = 0; j < cols; ++j) ci[j] = g.beta * ci[j] + pi[j];
    for (const float* m : g.add) {
      const float* mi = m + (c - g.C) + i * g.ldc;
      for (int64_t j = 0; j < cols; ++j) ci[j] += mi[j];
    }
  }
}

constexpr int64_t kMinWork = int64_t(1) << 24;  // multiply-adds per unit
constexpr int64_t kAlign = 64;
constexpr int64_t kMinRows = 256;  // rows per row unit at least

// Units along one dimension of extent `len` whose unit of width 1 costs `per` multiply-adds.
int64_t unit_extent(int64_t per) {
  const int64_t e = kMinWork / std::max<int64_t>(1, per);
  return std::max<int64_t>(kAlign, (e + kAlign - 1) / kAlign * kAlign);
}

constexpr int64_t kSplitAlign = 16;  // unit boundaries: multiples of one AVX-512 vector of fp32

struct Plan {
  bool by_rows;        // units are row blocks of C (else column blocks)
  int64_t len, units;  // the dimension cut (M or N) into `units` equal shares
  // Unit u covers [begin(u), begin(u + 1)): boundaries on multiples of kSplitAlign, so shares differ by
  // at most that much (a remainder left to the last unit would idle every other thread meanwhile).
  int64_t begin(int64_t u) const { return u >= units ? len : len * u / units / kSplitAlign * kSplitAlign; }
  int64_t size(int64_t u) const { return begin(u + 1) - begin(u); }
};

Plan plan(int64_t M, int64_t N, int64_t K) {
  // Row blocks keep C dense, and op(A) too (a transposed A is copied dense per unit, see run_unit):
  // dense operands get oneDNN's brgemm kernels, strided sub-matrices its slower gemm:jit kernels.
  // oneDNN re-packs B in every unit: at least kMinRows rows amortize that (64-row units ran the forward
  // x W^T 15-25% slower, bench/gemm_bench). Column blocks only for short M.
  // Unit counts are even (multiples of 4 from 8 on): the pool hands out contiguous runs of units, and
  // an odd count on an even number of threads idles all but one of them for a unit's time (9 units on
  // 2 threads ran as 5 + 4). Rounding down only makes units larger.
  auto even = [](int64_t units) { return units >= 8 ? units / 4 * 4 : units / 2 * 2; };
  const int64_t rows = std::max(unit_extent(N * K), kMinRows), row_units = even(M / rows);
  const int64_t cols = unit_extent(M * K), col_units = even(N / cols);
  if (row_units >= 2) return {true, M, row_units};
  if (col_units >= 2) return {false, N, col_units};
  // A unit's work or more that the extents leave whole (a K or V projection of one 256-token sample,
  // 256 x 192 x 576): two column units, so that two threads share it.
  if (double(M) * double(N) * double(K) >= double(kMinWork) && N >= 2 * kAlign) return {false, N, 2};
  return {true, M, 1};
}

// oneDNN creates its primitive cache and JIT state lazily on first use, inside the library, where a
// thread sanitizer cannot see the synchronization: the first matmul is created once, under call_once,
// before any unit runs, so concurrent first calls from the pool or the lane's ranks never race on it.
void init_dnnl_once(const dnnl::engine& eng) {
  static std::once_flag once;
  std::call_once(once, [&] {
    OneThread one;
    (void)unit_pd(eng, dt::f32, false, false, 16, 16, 16, 16, 16, 16, 1.f, 0.f);
    if (bf16_gemm_supported()) (void)unit_pd(eng, dt::bf16, false, false, 16, 16, 16, 16, 16, 16, 1.f, 0.f);
    float a[4] = {}, b[4] = {};
    const memory::desc d({2, 2}, dt::f32, memory::format_tag::ab);
    memory src(d, eng, a), dst(d, eng, b);
    dnnl::stream s(eng);
    dnnl::reorder(src, dst).execute(s, src, dst);  // and the reorders' state (PackedB, prepack)
    s.wait();
  });
}

// B in the kernel's blocked layout, once for all row units (each unit would otherwise re-pack all of
// B): the weight gradient's units share one activation matrix (8-32 units per Linear); a unit then runs
// 5-8% faster (bf16 and fp32, 256 x 2048 x 512), the one reorder costs a quarter of a unit. Only a plain
// row-major B is packed: a transposed one repacks slower than the units pack it themselves (W^T of
// 8192 x 2048: 18 ms, a whole unit's work 20 ms). The units run the same kernels and sums as on the
// plain layout, so the bits are the same (the CLI's output bytes, before and after).
constexpr int64_t kPrepackUnits = 3;

// dst (layout `to`) = src (layout `from`), single-threaded on this thread.
void reorder_into(const dnnl::engine& eng, const memory::desc& from, const void* src, const memory::desc& to, void* dst) {
  OneThread one;
  memory a(from, eng, const_cast<void*>(src)), b(to, eng, dst);
  dnnl::stream s(eng);
  dnnl::reorder(a, b).execute(s, a, b);
  s.wait();
}

bool prepack(Context& ctx, UnitPrimitives& units, Gemm& g, const Plan& p, memory::desc& desc, Tensor& buf) {
  if (!p.by_rows || p.units < kPrepackUnits || g.tb || g.packed_b) return false;
  const memory::desc any({g.K, g.N}, g.type, memory::format_tag::any);
  const int64_t m = p.size(0);
  desc = units.weights_layout(
      {g.type, g.ta, false, m, g.N, g.K, g.ta ? m : g.K, g.ldb, g.ldc, g.alpha, g.beta, g.add.size(), any});
  const memory::desc plain({g.K, g.N}, g.type, memory::dims{g.ldb, 1});
  if (desc == plain) return false;
  buf = Tensor::empty({int64_t(desc.get_size())}, DType::U8, ctx);
  reorder_into(units.engine(), plain, g.B, desc, buf.raw());
  g.B = buf.raw();
  g.packed_b = &desc;
  return true;
}

void gemm_dnnl(Context& ctx, bool serial, const Gemm& plain) {
  Gemm g = plain;
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {  // C = beta * C (oneDNN refuses empty reductions), then the addends
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        float& c = g.C[i * g.ldc + j];
        c = g.beta == 0.f ? 0.f : g.beta * c;
        for (const float* m : g.add) c += m[i * g.ldc + j];
      }
    return;
  }
  UnitPrimitives& units = ctx.kernel_state<UnitPrimitives>();  // once per GEMM, for all its units
  init_dnnl_once(units.engine());
  const Plan p = plan(g.M, g.N, g.K);
  if (p.units == 1) return run_unit(ctx, units, g, 0, g.M, 0, g.N);
  memory::desc packed;
  Tensor packed_buf;
  prepack(ctx, units, g, p, packed, packed_buf);
  auto run = [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = p.begin(u), e = p.begin(u + 1);
      if (p.by_rows) run_unit(ctx, units, g, b, e, 0, g.N);
      else run_unit(ctx, units, g, 0, g.M, b, e);
    }
  };
  if (serial) run(0, p.units);
  else ctx.pool().parallel_for(p.units, run, 1);
}
}  // namespace

void dnnl_isa_cap() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::optional<Isa> cap = isa_cap();
    if (!cap || *cap == Isa::amx) return;  // amx is oneDNN's highest level: nothing to cap
    // Within the user's own ONEDNN_MAX_CPU_ISA: the call below replaces it, and must not raise oneDNN above it.
    const auto want = static_cast<dnnl::cpu_isa>(dnnl_isa_within(dnnl_isa_for(*cap), dnnl_isa_from_env()));
    if (dnnl::set_max_cpu_isa(want) != dnnl::status::success && dnnl::get_effective_cpu_isa() != want)
      fail(ErrorKind::Internal, std::string("AR_CPU_ISA=") + isa_name(*cap) +
                                    ": oneDNN's ISA was fixed before the cap could be applied (effective 0x" +
                                    std::to_string(int(dnnl::get_effective_cpu_isa())) + ")");
  });
}

// A property of the process (machine, cap and oneDNN's ISA), read once: every bf16 GEMM and packing
// asks, and cpuid is a VM exit on virtual machines (it was ~5% of an amp tuning iteration on one).
bool bf16_gemm_supported() {
  static const bool supported = [] {
    const CpuIsa isa = cpu_isa();
    if (!isa.avx512_bf16 && !isa.amx_bf16) return false;
    dnnl_isa_cap();
    const auto eff = dnnl::get_effective_cpu_isa();
    return eff == dnnl::cpu_isa::avx512_core_bf16 || eff == dnnl::cpu_isa::avx512_core_amx;
  }();
  return supported;
}

std::string bf16_support_summary() {
  const CpuIsa isa = cpu_isa();
  if (!isa.avx512_bf16 && !isa.amx_bf16)
    return cpu_features().avx512_bf16 ? std::string("bf16 dot products capped off (AR_CPU_ISA=") + isa_name(*isa_cap()) + ")"
                                      : "no bf16 dot products on this CPU (AVX512_BF16 or AMX-BF16)";
  std::string s = isa.amx_bf16 ? "amx_bf16" : "avx512_bf16";
  if (!bf16_gemm_supported()) return s + " present but oneDNN's ISA is limited below it (ONEDNN_MAX_CPU_ISA)";
  return s;
}

void gemm_bf16(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add) {
  if (!bf16_gemm_supported()) fail(ErrorKind::Unsupported, "bf16 GEMM: " + bf16_support_summary());
  gemm_dnnl(ctx, false, {dt::bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add});
}

// The layout a packed B is written in: the one the kernel picks for a unit of kMinRows rows (the units
// of the tuning's and the passes' GEMMs); a GEMM checks that its own units pick it too (takes_layout).
// Asked once per shape: a weight is repacked every tuning iteration at the same shape.
void PackedB::set_shape(Context* ctx, int64_t rows, int64_t cols, bool transposed) {
  if (!bf16_gemm_supported()) fail(ErrorKind::Unsupported, "bf16 GEMM: " + bf16_support_summary());
  const int64_t K = transposed ? cols : rows, N = transposed ? rows : cols;
  rows_ = rows, cols_ = cols, transposed_ = transposed;
  if (K == K_ && N == N_) return;
  K_ = K, N_ = N;
  const memory::desc any({K_, N_}, dt::bf16, memory::format_tag::any);
  const UnitKey key{dt::bf16, false, false, kMinRows, N_, K_, K_, N_, N_, 1.f, 0.f, 0, any};
  memory::desc d;
  if (ctx) {  // an activation's pack, new every leaf: the context's layouts
    UnitPrimitives& units = ctx->kernel_state<UnitPrimitives>();
    init_dnnl_once(units.engine());
    d = units.weights_layout(key);
  } else {
    const dnnl::engine eng = cpu_engine();
    init_dnnl_once(eng);
    OneThread one;
    d = unit_pd(eng, dt::bf16, false, false, kMinRows, N_, K_, K_, N_, N_, 1.f, 0.f, 0, &any).weights_desc();
  }
  buf_ = Tensor();
  if (d == memory::desc({K_, N_}, dt::bf16, memory::dims{N_, 1})) layout_.reset();
  else layout_ = std::make_shared<const memory::desc>(d);
}

void PackedB::pack(Context& ctx, const uint16_t* W, int64_t out, int64_t in, bool transposed) {
  set_shape(&ctx, out, in, transposed);
  src_ = layout_ ? W : nullptr;
  if (layout_) write(ctx);
}

void PackedB::pack_later(const uint16_t* W, int64_t out, int64_t in, bool transposed) {
  set_shape(nullptr, out, in, transposed);
  src_ = layout_ ? W : nullptr;
}

void PackedB::write(Context& ctx) const {
  const auto& d = *static_cast<const memory::desc*>(layout_.get());
  if (!buf_.defined()) buf_ = Tensor::empty({int64_t(d.get_size())}, DType::U8, ctx);
  const uint16_t* W = src_;
  const int64_t out = rows_, in = cols_;
  src_ = nullptr;
  if (blocked_layout_fits(K_, N_) && d == memory::desc({K_, N_}, dt::bf16, memory::format_tag::BA16a64b2a)) {
    if (transposed_) pack_wt_blocked(ctx, W, out, in, buf_.data<uint16_t>());
    else pack_w_blocked(ctx, W, out, in, buf_.data<uint16_t>());
    return;
  }
  Tensor wt;  // another layout (another ISA): oneDNN's reorder from the plain B
  if (transposed_) {
    wt = Tensor::empty({in, out}, DType::BF16, ctx);
    transpose_bf16(ctx, W, wt.data<uint16_t>(), out, in);
  }
  const memory::desc plain({K_, N_}, dt::bf16, memory::dims{N_, 1});
  reorder_into(cpu_engine(), plain, transposed_ ? wt.data<uint16_t>() : W, d, buf_.raw());
}

namespace {
// Whether every unit of the GEMM's plan picks `layout` for its B: row units of a few extents, which
// read all of B. Column units (short M, strided C) run oneDNN's gemm:jit on a plain B here: refused.
bool takes_layout(Context& ctx, const Gemm& g, const memory::desc& layout) {
  const Plan p = plan(g.M, g.N, g.K);
  if (!p.by_rows) return false;
  const memory::desc any({g.K, g.N}, g.type, memory::format_tag::any);
  UnitPrimitives& units = ctx.kernel_state<UnitPrimitives>();
  for (int64_t m : {p.size(0), p.size(p.units - 1)})  // the shares' two sizes (they differ by < kSplitAlign)
    if (!(units.weights_layout({g.type, g.ta, false, m, g.N, g.K, g.ta ? m : g.lda, g.N, g.ldc, g.alpha, g.beta,
                                g.add.size(), any}) == layout))
      return false;
  return true;
}
}  // namespace

bool gemm_bf16(Context& ctx, bool ta, int64_t M, float alpha, const uint16_t* A, int64_t lda, const PackedB& B,
               float beta, float* C, int64_t ldc, Addends add) {
  const auto* layout = static_cast<const memory::desc*>(B.layout_.get());
  if (!layout || M <= 0) return false;
  Gemm g{dt::bf16, ta, false, M, B.N_, B.K_, alpha, A, lda, nullptr, B.N_, beta, C, ldc, add, layout};
  if (!takes_layout(ctx, g, *layout)) return false;
  if (B.src_) B.write(ctx);  // a deferred pass (pack_later): the first GEMM that reads the pack
  g.B = B.buf_.raw();
  gemm_dnnl(ctx, false, g);
  return true;
}

void gemm_f32_dnnl(Context& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, Addends add) {
  gemm_dnnl(ctx, false, {dt::f32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add});
}

void gemm_f32_dnnl(Context& ctx, bool serial, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                   Addends add) {
  gemm_dnnl(ctx, serial, {dt::f32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, add});
}

size_t dnnl_cached_units(Context& ctx) { return ctx.kernel_state<UnitPrimitives>().size(); }

bool dnnl_f32_is_brgemm() {
  static const bool brgemm = dnnl_matmul_impl(false, false, false, 1024, 1024, 1024).rfind("brg", 0) == 0;
  return brgemm;
}

std::string dnnl_matmul_impl(bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  const dnnl::engine eng = cpu_engine();
  const Plan p = plan(M, N, K);
  const int64_t m = p.by_rows ? p.size(0) : M, n = p.by_rows ? N : p.size(0);
  OneThread one;
  return unit_pd(eng, bf16 ? dt::bf16 : dt::f32, ta, tb, m, n, K, ta ? m : K, tb ? K : N, N, 1.f, 0.f)
      .impl_info_str();
}

}  // namespace ar::cpu
