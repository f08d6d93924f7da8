// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_* (GCC PR 105593):
// the functions that use them sit between AR_AVX512_HEADERS_BEGIN and AR_AVX512_HEADERS_END.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#define AR_AVX512_HEADERS_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define AR_AVX512_HEADERS_END _Pragma("GCC diagnostic pop")
#else
#define AR_AVX512_HEADERS_BEGIN
#define AR_AVX512_HEADERS_END
#endif
