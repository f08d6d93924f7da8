// The built-in calibration corpus (corpus/builtin.txt, ~2 MB; sources and licenses in corpus/NOTICE).
// The assembler places the file's bytes in .rodata (.incbin): a string literal of that size is beyond
// what ISO C++ requires compilers to accept, and slow to compile.
#include "quant/calib.h"

#ifndef AR_CORPUS_PATH
#error "AR_CORPUS_PATH must name corpus/builtin.txt (set by src/quant/CMakeLists.txt)"
#endif

__asm__(".pushsection .rodata.ar_builtin_corpus,\"a\"\n"
        ".globl ar_builtin_corpus_begin\n"
        ".hidden ar_builtin_corpus_begin\n"
        ".globl ar_builtin_corpus_end\n"
        ".hidden ar_builtin_corpus_end\n"
        "ar_builtin_corpus_begin:\n"
        ".incbin \"" AR_CORPUS_PATH "\"\n"
        "ar_builtin_corpus_end:\n"
        ".popsection\n");

extern "C" const char ar_builtin_corpus_begin[], ar_builtin_corpus_end[];

namespace ar::quant {
const std::string& builtin_corpus() {
  static const std::string text(ar_builtin_corpus_begin, ar_builtin_corpus_end);  // immutable
  return text;
}
}  // namespace ar::quant
