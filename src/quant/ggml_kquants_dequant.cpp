// Decoding of k-quant rows through ggml_kquant_unpack: one definition of each layout serves packing,
// unpacking and decoding.
#include <string>

#include "core/error.h"
#include "quant/ggml_kquants.h"

namespace ar::quant {

void ggml_kquant_dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  const KQuantSpec s = ggml_kquant_spec(t);
  if (n < 0 || n % kGgmlSuperBlock != 0)
    fail(ErrorKind::InvalidInput,
         std::string(ggml_type_name(t)) + ": row of " + std::to_string(n) + " elements is not a multiple of 256");
  const int64_t bytes = ggml_block_bytes(t);
  for (int64_t b = 0; b < n / kGgmlSuperBlock; ++b) {
    const KQuantBlockParams p = ggml_kquant_unpack(t, src + b * bytes);
    float* y = dst + b * kGgmlSuperBlock;
    for (int j = 0; j < s.groups; ++j) {
      // The order of the fp32 operations is ggml's: the group scale d * sc first (exact: 11-bit d times
      // an 8-bit integer at most), then times the code, then minus the group min. Only q6_k's product
      // with the code and the subtraction of the min can round, and they round as in ggml.
      const float dl = p.d * float(p.sc[size_t(j)]);
      const float ml = s.has_min ? p.dmin * float(p.mn[size_t(j)]) : 0.0f;
      for (int i = j * s.group_size; i < (j + 1) * s.group_size; ++i) {
        const float v = dl * float(p.q[size_t(i)]);
        y[i] = s.has_min ? v - ml : v;
      }
    }
  }
}

}  // namespace ar::quant
