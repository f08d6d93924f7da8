#include "quant/gguf_scheme.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace ar::quant {

namespace {
struct Preset {
  const char* name;
  GgmlType main;
  uint32_t file_type;          // llama.h's LLAMA_FTYPE_MOSTLY_*
  const char* tag = nullptr;   // the file name's preset when not the name's own
};
constexpr Preset kPresets[] = {
    {"q2_k", GgmlType::Q2_K, 10},   {"q2_k_s", GgmlType::Q2_K, 21}, {"q3_k_s", GgmlType::Q3_K, 11},
    {"q3_k_m", GgmlType::Q3_K, 12}, {"q3_k_l", GgmlType::Q3_K, 13}, {"q4_0", GgmlType::Q4_0, 2},
    {"q4_1", GgmlType::Q4_1, 3},    {"q4_k_s", GgmlType::Q4_K, 14}, {"q4_k_m", GgmlType::Q4_K, 15},
    {"q5_0", GgmlType::Q5_0, 8},    {"q5_1", GgmlType::Q5_1, 9},    {"q5_k_s", GgmlType::Q5_K, 16},
    {"q5_k_m", GgmlType::Q5_K, 17}, {"q6_k", GgmlType::Q6_K, 18},   {"q8_0", GgmlType::Q8_0, 7},
    {"bf16", GgmlType::BF16, 32},   {"f16", GgmlType::F16, 1},
    {"q2_k_mixed", GgmlType::Q4_K, 21, "q2_k_s"},
};

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GgmlType attn_v(const std::string& p, GgmlType t, int64_t i, int64_t n, int64_t n_gqa) {
  if (p == "q2_k") return n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
  if (p == "q2_k_s" && n_gqa >= 4) return GgmlType::Q4_K;
  if (p == "q3_k_m") return i < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
  if (p == "q3_k_l") return GgmlType::Q5_K;
  if ((p == "q4_k_m" || p == "q5_k_m") && use_more_bits(i, n)) return GgmlType::Q6_K;
  if (p == "q4_k_s" && i < 4) return GgmlType::Q5_K;
  return t;
}

GgmlType ffn_down(const std::string& p, GgmlType t, int64_t i, int64_t n) {
  if (p == "q2_k") return GgmlType::Q3_K;
  if (p == "q2_k_s") return i < n / 8 ? GgmlType::Q4_K : t;
  if (p == "q3_k_m") return i < n / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
  if (p == "q3_k_l") return GgmlType::Q5_K;
  if ((p == "q4_k_m" || p == "q5_k_m") && use_more_bits(i, n)) return GgmlType::Q6_K;
  if (p == "q4_k_s" && i < n / 8) return GgmlType::Q5_K;
  return t;
}

GgmlType attn_output(const std::string& p, GgmlType t) {
  if (p == "q2_k") return GgmlType::Q3_K;
  if (p == "q3_k_m") return GgmlType::Q4_K;
  if (p == "q3_k_l") return GgmlType::Q5_K;
  return t;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return s;
}

bool is_float(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32; }
}  // namespace

GgmlType gguf_shape_fallback(GgmlType t, int64_t ncols) {
  if (ncols % ggml_block_elems(t) == 0) return t;
  GgmlType f = GgmlType::F16;
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: f = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
    default: break;
  }
  return ncols % ggml_block_elems(f) == 0 ? f : GgmlType::F16;
}

// llama.cpp's rules for models of exactly 8 experts (Mixtral-8x7B): attn_v and attn_k in q8_0 and
// attn_output in q5_k for the low presets (it is shared by every token, the experts are not).
GgmlType eight_experts(GgufTensorKind kind, const std::string& p, GgmlType t) {
  if (kind == GgufTensorKind::AttnV || kind == GgufTensorKind::AttnK) return GgmlType::Q8_0;
  if (kind == GgufTensorKind::AttnOutput)
    return (p == "q2_k" || p == "q3_k_s" || p == "q3_k_m" || p == "q4_k_s" || p == "q4_k_m") ? GgmlType::Q5_K : t;
  return t;
}

GgmlType GgufScheme::type_of(GgufTensorKind kind, int64_t layer, int64_t n_layers, int64_t ncols, int64_t n_gqa,
                             int64_t n_expert) const {
  GgmlType t = main;
  if (preset == "q2_k_mixed") {
    if (kind == GgufTensorKind::TokenEmbd || kind == GgufTensorKind::Output) t = GgmlType::Q8_0;
  } else if (!is_float(main)) {
    switch (kind) {
      case GgufTensorKind::Output:
        t = (main == GgmlType::Q8_0 || ncols % kGgmlSuperBlock != 0) ? GgmlType::Q8_0 : GgmlType::Q6_K;
        break;
      case GgufTensorKind::AttnV: t = attn_v(preset, main, layer, n_layers, n_gqa); break;
      case GgufTensorKind::FfnDown: t = ffn_down(preset, main, layer, n_layers); break;
      case GgufTensorKind::AttnOutput: t = attn_output(preset, main); break;
      default: break;
    }
    if (n_expert == 8) t = eight_experts(kind, preset, kind == GgufTensorKind::AttnOutput ? main : t);
  }
  return gguf_shape_fallback(t, ncols);
}

bool is_gguf_format(const std::string& format) {
  std::string f = format.substr(0, 5);
  std::transform(f.begin(), f.end(), f.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return f == "gguf:";
}

GgufScheme parse_gguf_scheme(const std::string& spec) {
  std::string p = is_gguf_format(spec) ? spec.substr(5) : spec;
  std::transform(p.begin(), p.end(), p.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  std::string known;
  for (const Preset& k : kPresets) {
    if (p == k.name) return {k.name, upper(k.tag ? k.tag : k.name), k.main, k.file_type};
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  fail(ErrorKind::InvalidInput, "--format " + spec + ": unknown GGUF preset (known: " + known + ")");
}

}  // namespace ar::quant
