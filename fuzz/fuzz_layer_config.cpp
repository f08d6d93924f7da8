// Fuzz target: --layer_config text (ar::LayerConfig::parse: strict JSON, then AutoRound's
// shell-friendly dict form; each key compiled as a layer-name pattern). Besides "ar::Error or success",
// every accepted entry must satisfy the documented contract (a key of 1..256 characters, bits in
// {2, 3, 4, 8, 16}, group_size -1 or 1..2^20, something set), and matching it against layer names must
// return; a violation aborts as a finding.
#include <cstdio>

#include "fuzz_util.h"
#include "pipeline/layer_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const ar::LayerConfig lc = ar::LayerConfig::parse(text);
    static const char* const kNames[] = {"model.layers.0.self_attn.q_proj", "model.layers.17.mlp.experts.127.down_proj",
                                         "lm_head"};
    for (size_t i = 0; i < lc.entries().size(); ++i) {
      const ar::LayerConfigEntry& e = lc.entries()[i];
      const bool bits_ok = !e.bits || *e.bits == 2 || *e.bits == 3 || *e.bits == 4 || *e.bits == 8 || *e.bits == 16;
      const bool group_ok = !e.group_size || *e.group_size == -1 || (*e.group_size >= 1 && *e.group_size <= (1 << 20));
      const bool ok = !e.key.empty() && e.key.size() <= 256 && bits_ok && group_ok && (e.bits || e.group_size || e.sym);
      if (!ok) {
        std::fprintf(stderr, "fuzz: FINDING: accepted entry violates the contract: key '%s'\n", e.key.c_str());
        std::abort();
      }
      for (const char* n : kNames) (void)lc.matches(i, n);
    }
  });
}
