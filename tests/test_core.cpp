// Core: dtype conversions (exhaustive for 16-bit formats), thread pool, tensors, allocator accounting.
#include <xmmintrin.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/dtype.h"
#include "core/float_mode.h"
#include "core/lru_cache.h"
#include "core/thread_pool.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/tensor.h"
#include "test_util.h"

using namespace ar;

TEST(DType, Fp16RoundTripIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) { EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))); continue; }
    EXPECT_EQ(f32_to_f16(f), uint16_t(h)) << std::hex << h;
  }
}

TEST(DType, Fp16MatchesCompilerConversion) {
  auto v = test::randn<float>(200000, 42, 1000.0);
  v.push_back(65519.f); v.push_back(65520.f); v.push_back(1e-8f); v.push_back(2.98023224e-8f);  // 2^-25 tie
  v.push_back(5.96046448e-8f * 1.5f);  // 1.5 subnormal steps: tie to even
  for (float f : v) {
    _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    EXPECT_EQ(f32_to_f16(f), bits) << f;
    EXPECT_EQ(f16_to_f32(bits), float(h)) << f;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), uint16_t(h));
    }
  }
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // exact tie -> even (down)
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);  // tie -> even (up)
}

TEST(ThreadPool, CoversRangeOnceAndPropagatesErrors) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(100, [&](int64_t b, int64_t) { if (b > 0) throw std::runtime_error("x"); }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 10);
}

// A parallel_for's chunks depend on n, the grain and the pool's size only, not on which thread ran
// first; and many short jobs back to back each run exactly their own chunks (a worker that wakes late
// must not run a finished job's function).
TEST(ThreadPool, ChunksAreFixedAndLateWorkersRunNothingStale) {
  ThreadPool pool(3);
  auto chunks_of = [&](int64_t n, int64_t grain) {
    std::mutex mu;
    std::set<std::pair<int64_t, int64_t>> got;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lk(mu);
      got.insert({b, e});
    }, grain);
    return got;
  };
  const auto first = chunks_of(1000, 1);
  EXPECT_EQ(first, (std::set<std::pair<int64_t, int64_t>>{{0, 333}, {333, 666}, {666, 1000}}));
  for (int rep = 0; rep < 20; ++rep) EXPECT_EQ(chunks_of(1000, 1), first);
  EXPECT_EQ(chunks_of(1000, 400).size(), 2u);  // no chunk below the grain
  // Jobs of 1-7 items back to back, some slow enough for the workers to fall asleep between them: a
  // worker that wakes late finds its chunk taken or a newer job, and every chunk runs exactly once.
  for (int job = 0; job < 2000; ++job) {
    std::vector<std::atomic<int>> hits(size_t(job % 7 + 1));
    pool.parallel_for(int64_t(hits.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      if (job % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // workers fall asleep
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "job " << job;
  }
}

TEST(Tensor, AllocatorTracksPeakBytes) {
  Context ctx(Device{}, 1);
  {
    Tensor a = Tensor::zeros({1000}, DType::F32, ctx);
    Tensor b = Tensor::empty({500}, DType::BF16, ctx);
    EXPECT_GE(ctx.allocator().in_use(), 5000u);
  }
  EXPECT_EQ(ctx.allocator().in_use(), 0u);
  EXPECT_GE(ctx.allocator().peak(), 5000u);
  EXPECT_GE(ctx.allocator().cached(), 5000u);
  const void* first = Tensor::empty({1000}, DType::F32, ctx).raw();  // freed at end of statement
  Tensor again = Tensor::empty({1000}, DType::F32, ctx);
  EXPECT_EQ(again.raw(), first);  // exact-size reuse from the cache
  ctx.allocator().trim();
  EXPECT_EQ(ctx.allocator().cached(), 0u);
}

TEST(Allocator, FullCacheEvictsTheOldestBlocks) {
  Allocator a(10240);
  a.allocate(40000).reset();  // a live peak above everything below: the footprint bound stays out of it
  void* pa = nullptr;
  void* pb = nullptr;
  {
    auto A = a.allocate(4096), B = a.allocate(4096);
    pa = A.get();
    pb = B.get();
    A.reset();  // A cached before B
  }
  EXPECT_EQ(a.cached(), 8192u);
  a.allocate(6144).reset();  // 8 KiB + 6 KiB > 10 KiB: A (the oldest) goes
  EXPECT_EQ(a.cached(), 4096u + 6144u);
  auto again = a.allocate(4096);
  EXPECT_EQ(again.get(), pb);  // B was kept
  EXPECT_NE(pa, nullptr);
  again.reset();
  a.allocate(20000).reset();  // larger than the whole cache: freed, nothing evicted for it
  EXPECT_EQ(a.cached(), 4096u + 6144u);
}

// A tuning iteration frees and asks again for GBs of buffers (a MoE block's tuning state): the default
// cache keeps all of them, bounded only by the live peak, so none goes back to the C heap to be
// faulted in and zeroed again (the blocks here are never touched: address space only).
TEST(Allocator, DefaultCacheKeepsMoreThanOneGiBForReuse) {
  Allocator a;
  constexpr size_t kBlock = size_t(96) << 20;
  constexpr int kBlocks = 12;  // 1.125 GiB
  std::set<void*> first;
  {
    std::vector<std::shared_ptr<void>> live;
    for (int i = 0; i < kBlocks; ++i) first.insert(live.emplace_back(a.allocate(kBlock)).get());
  }
  EXPECT_EQ(a.cached(), kBlocks * kBlock);
  std::vector<std::shared_ptr<void>> again;
  for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(first.count(again.emplace_back(a.allocate(kBlock)).get()), 1u) << i;
  EXPECT_EQ(a.cached(), 0u);
  EXPECT_EQ(a.peak(), kBlocks * kBlock);
}

// A kernel's state: one object per type and context, made on first use; a serial view shares its
// parent's, another context has its own.
TEST(Context, KernelStateIsOnePerTypeAndSharedWithSerialViews) {
  struct Counter { int n = 0; };
  struct Other { int n = 0; };
  Context a(Device{}, 2), b(Device{}, 1);
  a.kernel_state<Counter>().n = 7;
  EXPECT_EQ(a.kernel_state<Counter>().n, 7);
  EXPECT_EQ(&a.kernel_state<Counter>(), &a.kernel_state<Counter>());
  EXPECT_EQ(a.kernel_state<Other>().n, 0);
  EXPECT_EQ(b.kernel_state<Counter>().n, 0);
  Context view = Context::serial_view(a);
  EXPECT_EQ(&view.kernel_state<Counter>(), &a.kernel_state<Counter>());
  std::vector<std::thread> ts;  // first use from several threads at once: one object
  std::vector<Other*> seen(4);
  Context c(Device{}, 1);
  for (int i = 0; i < 4; ++i) ts.emplace_back([&, i] { seen[size_t(i)] = &c.kernel_state<Other>(); });
  for (auto& t : ts) t.join();
  for (Other* p : seen) EXPECT_EQ(p, seen[0]);
}

// A cached block serves a smaller request down to 8/9 of its size (a MoE block's per-expert rows
// differ in length from batch to batch), and counts its own size while in use.
TEST(Allocator, ReusesASlightlyLargerCachedBlock) {
  Allocator a;
  void* big = nullptr;
  {
    auto A = a.allocate(9000);  // rounds to 9024
    big = A.get();
  }
  {
    auto B = a.allocate(8100);  // 8128: 9024 is within 1/8 of it
    EXPECT_EQ(B.get(), big);
    EXPECT_EQ(a.in_use(), 9024u);
    EXPECT_EQ(a.cached(), 0u);
  }
  EXPECT_EQ(a.cached(), 9024u);
  auto C = a.allocate(7000);  // 7040: 9024 is more than 1/8 larger, a new block of its own size
  EXPECT_EQ(a.in_use(), 7040u);
  EXPECT_EQ(a.cached(), 0u) << "7040 + 9024 exceed the live peak 9024 and its 1/8: the idle block goes first";
}

// The footprint (live plus cached bytes, what the backing has handed out) never exceeds the live
// peak plus 1/kReuseSlack of it, whatever the sequence of sizes: blocks no request fits are freed
// before a miss would stack new bytes on them. Random sizes and lifetimes over a counting backing.
TEST(Allocator, CacheNeverRaisesTheFootprintAboveTheLivePeak) {
  auto held = std::make_shared<std::map<void*, size_t>>();
  auto footprint = std::make_shared<size_t>(0);
  MemoryBacking counting;
  counting.alloc = [held, footprint](size_t n) -> void* {
    void* p = std::malloc(n);
    (*held)[p] = n;
    *footprint += n;
    return p;
  };
  counting.release = [held, footprint](void* p) {
    *footprint -= (*held)[p];
    held->erase(p);
    std::free(p);
  };
  Allocator a(size_t(1) << 30, counting);
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<void>> live;
  size_t misses = 0, last_footprint = 0;
  for (int step = 0; step < 4000; ++step) {
    if (!live.empty() && rng() % 2) {
      live.erase(live.begin() + std::ptrdiff_t(rng() % live.size()));
    } else {
      const size_t phase = size_t(step / 1000 + 1);  // each phase asks for other sizes
      live.push_back(a.allocate(phase * 1000 + rng() % (phase * 4000)));
      misses += *footprint > last_footprint;
    }
    last_footprint = *footprint;
    ASSERT_EQ(*footprint, a.in_use() + a.cached()) << "step " << step;
    ASSERT_LE(*footprint, a.peak() + a.peak() / Allocator::kReuseSlack) << "step " << step;
  }
  EXPECT_LT(misses, 2000u) << "the cache served no request";
}

// The same bound with two threads allocating and freeing at once (a pool's workers share their
// context's allocator). A miss evicts, calls the backing and counts under one lock, and peak() waits
// for it, so a footprint read mid-miss is still within the peak read after it. Run under TSan too.
TEST(Allocator, CacheBoundHoldsUnderConcurrentThreads) {
  auto footprint = std::make_shared<std::atomic<size_t>>(0);
  MemoryBacking counting;
  counting.alloc = [footprint](size_t n) -> void* {  // the block's size in its first bytes
    auto* p = static_cast<size_t*>(std::malloc(n));
    *p = n;
    *footprint += n;
    return p;
  };
  counting.release = [footprint](void* p) {
    *footprint -= *static_cast<size_t*>(p);
    std::free(p);
  };
  Allocator a(size_t(1) << 30, counting);
  constexpr size_t kMaxRequest = 64 * 1024;
  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<std::shared_ptr<void>> live;
    for (int step = 0; step < 3000; ++step) {
      if (!live.empty() && rng() % 2)
        live.erase(live.begin() + std::ptrdiff_t(rng() % live.size()));
      else
        live.push_back(a.allocate(64 + rng() % (kMaxRequest - 64)));
      const size_t now = footprint->load(), peak = a.peak();
      EXPECT_LE(now, peak + peak / Allocator::kReuseSlack) << "step " << step;
    }
  };
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(a.in_use(), 0u);
  EXPECT_EQ(footprint->load(), a.cached());
  EXPECT_LE(footprint->load(), a.peak() + a.peak() / Allocator::kReuseSlack);
}

// The bookkeeping a GPU's allocator runs on (kernels/cuda/device.h), over a counting fake backing: blocks
// come from the backing only on a cache miss, go back to it on eviction, trim and destruction, and a
// refused request names the memory and the size and leaves nothing counted in use.
TEST(Allocator, RunsOverAnyBackingAndReturnsEveryBlockToIt) {
  struct Counts {
    int allocs = 0, releases = 0;
    std::set<void*> live;
  };
  auto counts = std::make_shared<Counts>();
  MemoryBacking fake;
  fake.name = "fake device";
  fake.alloc = [counts](size_t n) -> void* {
    if (n > (size_t(1) << 20)) return nullptr;  // "device full"
    ++counts->allocs;
    void* p = std::malloc(n);
    counts->live.insert(p);
    return p;
  };
  fake.release = [counts](void* p) {
    ++counts->releases;
    EXPECT_EQ(counts->live.erase(p), 1u) << "released a block the backing never gave";
    std::free(p);
  };
  {
    Allocator a(8192, fake);
    void* first = nullptr;
    {
      auto A = a.allocate(4000);  // rounds to 4032
      first = A.get();
      EXPECT_EQ(a.in_use(), 4032u);
    }
    EXPECT_EQ(counts->allocs, 1);
    EXPECT_EQ(a.allocate(4032).get(), first);  // a cache hit: the backing is not asked again
    EXPECT_EQ(counts->allocs, 1);
    a.allocate(6000).reset();  // caching it evicts the 4032-byte block: back to the backing
    EXPECT_EQ(counts->releases, 1);
    try {
      (void)a.allocate(size_t(2) << 20);
      ADD_FAILURE() << "a refused block was handed out";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "out of fake device memory allocating 2097152 bytes");
    }
    EXPECT_EQ(a.in_use(), 0u);
    EXPECT_EQ(a.peak(), 6016u);
    auto held = a.allocate(100);
    a.trim();
    EXPECT_EQ(a.cached(), 0u);
    EXPECT_EQ(counts->live.size(), 1u);  // only the held block
  }
  EXPECT_TRUE(counts->live.empty());  // the held block came back when its owner and the allocator went
  EXPECT_EQ(counts->allocs, counts->releases);
}

// Subnormal results flush to zero on the pool's workers and on the thread calling parallel_for
// (core/float_mode.h), and the guard gives the caller its own mode back afterwards.
// A value that counts its live instances (moves leave an empty husk that does not count).
struct CountedPlan {
  int id = -1;
  int* live = nullptr;
  CountedPlan(int i, int* l) : id(i), live(l) { ++*live; }
  CountedPlan(CountedPlan&& o) noexcept : id(o.id), live(std::exchange(o.live, nullptr)) {}
  CountedPlan(const CountedPlan&) = delete;
  ~CountedPlan() {
    if (live) --*live;
  }
};

TEST(LruCache, BuildsOnceEvictsTheLeastRecentlyUsedAndDestroysWhatItDrops) {
  int live = 0, builds = 0;
  {
    LruCache<std::pair<int, int>, CountedPlan> cache(3);
    auto get = [&](int a, int b) -> CountedPlan& {
      return cache.get({a, b}, [&] { return CountedPlan(++builds, &live); });
    };
    EXPECT_EQ(get(1, 1).id, 1);
    EXPECT_EQ(get(1, 2).id, 2);
    EXPECT_EQ(get(1, 1).id, 1);  // a hit: not rebuilt
    EXPECT_EQ(get(2, 1).id, 3);
    EXPECT_EQ(builds, 3);
    EXPECT_EQ(live, 3);
    EXPECT_EQ(cache.hits(), 1);
    EXPECT_EQ(cache.misses(), 3);
    // Full: (1,2) is the least recently used ((1,1) was used after it), so it goes.
    EXPECT_EQ(get(3, 3).id, 4);
    EXPECT_EQ(live, 3);
    EXPECT_EQ(cache.size(), 3u);
    EXPECT_EQ(get(1, 1).id, 1);
    EXPECT_EQ(get(2, 1).id, 3);
    EXPECT_EQ(get(1, 2).id, 5);  // rebuilt; now (3,3) was the least recently used
    EXPECT_EQ(get(3, 3).id, 6);
    EXPECT_EQ(live, 3);
    // The reference returned stays valid across the next get.
    CountedPlan& kept = get(9, 9);
    get(8, 8);
    EXPECT_EQ(kept.id, 7);
  }
  EXPECT_EQ(live, 0);  // destroyed with the cache
}

TEST(LruCache, AFailedBuildLeavesTheCacheAsItWas) {
  int live = 0;
  LruCache<int, CountedPlan> cache(1);
  cache.get(1, [&] { return CountedPlan(1, &live); });
  EXPECT_THROW(cache.get(2, [&]() -> CountedPlan { throw std::runtime_error("no algorithm"); }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(live, 1);
  EXPECT_EQ(cache.get(1, [&] { return CountedPlan(2, &live); }).id, 1);  // still there, a hit
  EXPECT_EQ(cache.hits(), 1);
}

TEST(FloatMode, PoolThreadsAndTheCallerFlushSubnormals) {
  volatile float tiny = 1e-30f, scale = 1e-10f;  // 1e-40: a subnormal product
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved & ~0x8040u);  // this thread keeps subnormals
  EXPECT_NE(tiny * scale, 0.f);
  ThreadPool pool(2);
  std::vector<float> out(64, -1.f);
  pool.parallel_for(64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[size_t(i)] = tiny * scale;
  });
  for (float v : out) EXPECT_EQ(v, 0.f);
  EXPECT_NE(tiny * scale, 0.f) << "parallel_for gave the caller its mode back";
  {
    const DenormalsFlushed flushed;
    EXPECT_EQ(tiny * scale, 0.f);
  }
  EXPECT_NE(tiny * scale, 0.f);
  flush_denormals();
  EXPECT_EQ(tiny * scale, 0.f);
  _mm_setcsr(saved);
}

TEST(Tensor, ConvertsBetweenDtypes) {
  Context ctx(Device{}, 1);
  Tensor a = Tensor::empty({3}, DType::F32, ctx);
  a.f32()[0] = 1.5f; a.f32()[1] = -2.f; a.f32()[2] = 3.25f;
  Tensor h = a.to(DType::F16, ctx), b = a.to(DType::BF16, ctx).to(DType::F32, ctx);
  EXPECT_EQ(h.to(DType::F32, ctx).f32()[2], 3.25f);
  EXPECT_EQ(b.f32()[1], -2.f);
  EXPECT_THROW((void)a.reshape({2}), Error);
}

TEST(Tensor, SliceViewsItsElementsInPlace) {
  Context ctx(Device{}, 1);
  Tensor a = Tensor::empty({2, 3}, DType::BF16, ctx);
  for (int i = 0; i < 6; ++i) a.data<uint16_t>()[i] = uint16_t(10 + i);
  Tensor s = a.slice(2, 3), t = s.slice(1, 2);
  EXPECT_EQ(s.shape(), Shape{3});
  EXPECT_EQ(s.data<uint16_t>(), a.data<uint16_t>() + 2);  // same storage, no copy
  EXPECT_EQ(t.data<uint16_t>()[1], 14);
  EXPECT_EQ(a.slice(6, 0).numel(), 0);
  EXPECT_THROW((void)a.slice(4, 3), Error);
  EXPECT_THROW((void)s.slice(-1, 1), Error);
}

TEST(Device, Parses) {
  EXPECT_EQ(Device::parse("cpu").str(), "cpu:0");
  EXPECT_EQ(Device::parse("cuda:1").index, 1);
  EXPECT_THROW(Device::parse("tpu:0"), Error);
  EXPECT_THROW(Context(Device::parse("cuda:0")), Error);
}

// ---- printable(): what input bytes look like in a message (core/printable.h)
TEST(Printable, ControlBytesAreEscaped) {
  EXPECT_EQ(printable("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("line\nerror: fake\r"), "line\\x0aerror: fake\\x0d");
  EXPECT_EQ(printable("tab\there\x7f"), "tab\\x09here\\x7f");
}

TEST(Printable, InvalidUtf8IsEscapedByteByByte) {
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("\x80x"), "\\x80x");             // stray continuation byte
  EXPECT_EQ(printable("\xe2\x82"), "\\xe2\\x82");      // truncated 3-byte sequence
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");      // overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // overlong '/' in three bytes
  EXPECT_EQ(printable("\xc1\x9b"), "\\xc1\\x9b");      // overlong ESC: no way around the escaping
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate U+D800
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable("\xe2\x82z"), "\\xe2\\x82z");    // the byte after a bad sequence is read again
}

TEST(Printable, PrintableUtf8PassesAndC1AndBidiControlsDoNot) {
  const std::string ok = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad path\\name 'q' \"x\"";
  EXPECT_EQ(printable(ok), ok);
  EXPECT_EQ(printable("\xc2\x9b"), "\\xc2\\x9b");          // U+009B, the one-character CSI
  EXPECT_EQ(printable("\xe2\x80\xae"), "\\xe2\\x80\\xae");  // U+202E right-to-left override
  EXPECT_EQ(printable("\xe2\x80\xa8"), "\\xe2\\x80\\xa8");  // U+2028 line separator
  EXPECT_EQ(printable("\xc2\xa0"), "\xc2\xa0");             // U+00A0 is printable
}

TEST(Printable, IsIdempotent) {
  static const char kBad[] = "\x1b]0;t\x07\n\0\xff\xc2\x9b";
  const std::string bad(kBad, sizeof kBad - 1);
  EXPECT_EQ(printable(printable(bad)), printable(bad));
}

TEST(Printable, EveryErrorMessageIsEscapedAndKeepsBytesAfterANul) {
  try {
    fail(ErrorKind::InvalidInput, std::string("config.json: unknown architecture '\x1b[2J\nerror: x") + '\0' + "tail'");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "config.json: unknown architecture '\\x1b[2J\\x0aerror: x\\x00tail'");
  }
}
