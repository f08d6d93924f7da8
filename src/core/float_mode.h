// Subnormal results flushed to zero (x86's MXCSR FTZ bit) on every thread that runs the engine's
// arithmetic. An operation producing a subnormal takes a microcode assist of ~100 cycles on x86
// cores, and attention probabilities and their gradients below FLT_MIN reach GEMMs and element loops
// in bulk on some blocks: stories260K's five alike blocks took 5.3-29.7 s each, and 5.3-5.5 s flushed
// (docs/benchmarks.md, "Subnormal floats"). Values below 1.2e-38 carry nothing a quantizer can use;
// TensorFlow flushes its CPU kernels the same way. Subnormal inputs (DAZ) are left as they are: they
// come only from the data, and the formats' own subnormal codes must read back exactly.
//
// The mode is per thread. ThreadPool sets it on its workers for good and on the thread calling
// parallel_for for the call (so a loop's bits do not depend on which thread ran a chunk); the CLI,
// the benches and the tests set it on the main thread first thing, so serial code and every thread
// created later (which inherits it) run the same arithmetic. No-op off x86. Code that needs an exact
// subnormal builds it from bits (pow2f in core/small_float.h), not by ldexp.
#pragma once

namespace ar {

// This thread (and threads it creates afterwards) flush subnormals.
void flush_denormals();

// Flushes on this thread for the guard's scope and restores the previous mode.
class DenormalsFlushed {
 public:
  DenormalsFlushed();
  ~DenormalsFlushed();
  DenormalsFlushed(const DenormalsFlushed&) = delete;
  DenormalsFlushed& operator=(const DenormalsFlushed&) = delete;

 private:
  unsigned saved_ = 0;
};

}  // namespace ar
