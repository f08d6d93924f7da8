#include "core/float_mode.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ar {

#if defined(__x86_64__) || defined(__i386__)
namespace {
constexpr unsigned kFtz = 0x8000;  // MXCSR bit 15: flush to zero (results); DAZ (bit 6) stays off
}
void flush_denormals() { _mm_setcsr(_mm_getcsr() | kFtz); }
DenormalsFlushed::DenormalsFlushed() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz); }
DenormalsFlushed::~DenormalsFlushed() { _mm_setcsr(saved_); }
#else
void flush_denormals() {}
DenormalsFlushed::DenormalsFlushed() = default;
DenormalsFlushed::~DenormalsFlushed() = default;
#endif

}  // namespace ar
