// Fuzz target: a --dataset spec (quant::parse_dataset_spec: comma-separated PATH[:key=value...]).
// Besides "ar::Error or success", every accepted source must satisfy the documented contract
// (non-empty path other than "-" and field, num -1 or in 1..2^20); a violation aborts as a finding.
#include <cstdio>

#include "fuzz_util.h"
#include "quant/calib.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string spec(reinterpret_cast<const char*>(data), size);
    for (const auto& s : ar::quant::parse_dataset_spec(spec)) {
      const bool ok = !s.path.empty() && s.path != "-" && !s.field.empty() && (s.num == -1 || (s.num >= 1 && s.num <= (1 << 20)));
      if (!ok) {
        std::fprintf(stderr, "fuzz: FINDING: accepted source violates the contract: path '%s' field '%s' num %lld\n",
                     s.path.c_str(), s.field.c_str(), static_cast<long long>(s.num));
        std::abort();
      }
    }
  });
}
