// glibc malloc settings for a whole process (the CLI and the benches, so the benches time what the
// CLI runs). Call once at the start of main, before any thread.
#pragma once

namespace ar {

// Large buffers (per-block activations, packing scratch) come and go once per block; glibc's dynamic
// mmap threshold would move them onto the heap after the first free and let it fragment, so peak RSS
// would creep up with depth (measured: +30 MiB per 1B-shaped block). A fixed threshold keeps every
// large buffer in its own mapping, returned to the system when freed. It is 1 MiB, not less: oneDNN
// allocates and frees a buffer of a few hundred KiB inside every GEMM call, which as a mapping of its
// own cost an mmap, a munmap (a TLB shootdown across threads) and its page faults per call (13% of a
// 135M model's amp tuning). And the heap is not trimmed below 64 MiB of free top, or those buffers
// would fault in again after every trim (11,587 brk calls in 31 s of a 1B-shaped run).
// docs/benchmarks.md, "Two virtual-machine costs of the amp path".
void set_process_malloc_policy();

// Returns the free pages inside glibc's heaps to the system (malloc_trim). Call after a phase whose
// small buffers (under the 1 MiB threshold: a MoE block's per-expert rows) will not come back, such
// as the start estimate's tuning leaf: freed, they stay resident between live chunks, and the next
// phase's peak stacks on top of them. Costs a walk of the heap; not for a hot loop.
void return_free_heap_pages();

}  // namespace ar
