// GGUF quantization choices: the per-tensor type table of the presets (llama.cpp's rules, hand-worked
// for a 32-layer model), the row-length fallbacks, and the RTN quantizer of every type: its packed
// bytes decode exactly to the dequantized weight it returns, every element is within half a step of
// its group's scale where it is not clamped, and the error falls with the bits.
#include <cmath>

#include "core/context.h"
#include "core/error.h"
#include "quant/ggml_kquants.h"
#include "quant/gguf_rtn.h"
#include "quant/gguf_scheme.h"
#include "quant/qdq_fixed.h"
#include "test_util.h"

using namespace ar;
using namespace ar::quant;

TEST(GgufScheme, Q4KMTypesPerTensorOnA32LayerModel) {
  const GgufScheme s = parse_gguf_scheme("gguf:Q4_K_M");
  EXPECT_EQ(s.preset, "q4_k_m");
  EXPECT_EQ(s.file_type, 15u);
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2 -> 0-3, 6, 9, ..., 27, 28-31.
  for (int64_t i = 0; i < 32; ++i) {
    const bool more = i < 4 || i >= 28 || (i - 4) % 3 == 2;
    EXPECT_EQ(s.type_of(GgufTensorKind::AttnV, i, 32, 4096, 4), more ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(s.type_of(GgufTensorKind::FfnDown, i, 32, 14336, 4), more ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(s.type_of(GgufTensorKind::AttnQ, i, 32, 4096, 4), GgmlType::Q4_K);
  }
  EXPECT_EQ(s.type_of(GgufTensorKind::Output, 0, 32, 4096, 4), GgmlType::Q6_K);
  EXPECT_EQ(s.type_of(GgufTensorKind::TokenEmbd, 0, 32, 4096, 4), GgmlType::Q4_K);
}

// AutoRound's q2_k_mixed at --iters 0 on a dense model (checked against AutoRound 0.16.1's own file of a
// generated Llama: every block Linear Q4_K, token_embd and output Q8_0, file type 21 = MOSTLY_Q2_K_S,
// named ...-Q2_K_S.gguf): no per-layer bumps.
TEST(GgufScheme, Q2KMixedIsQ4KBlocksAndQ8Ends) {
  const GgufScheme s = parse_gguf_scheme("gguf:q2_k_mixed");
  EXPECT_EQ(s.preset, "q2_k_mixed");
  EXPECT_EQ(s.file_tag, "Q2_K_S");
  EXPECT_EQ(s.file_type, 21u);
  for (int64_t i = 0; i < 32; ++i)
    for (auto k : {GgufTensorKind::AttnQ, GgufTensorKind::AttnK, GgufTensorKind::AttnV, GgufTensorKind::AttnOutput,
                   GgufTensorKind::FfnGate, GgufTensorKind::FfnUp, GgufTensorKind::FfnDown})
      EXPECT_EQ(s.type_of(k, i, 32, 4096, 4), GgmlType::Q4_K) << i;
  EXPECT_EQ(s.type_of(GgufTensorKind::TokenEmbd, 0, 32, 4096, 4), GgmlType::Q8_0);
  EXPECT_EQ(s.type_of(GgufTensorKind::Output, 0, 32, 4096, 4), GgmlType::Q8_0);
  EXPECT_EQ(s.type_of(GgufTensorKind::FfnDown, 0, 32, 576, 4), GgmlType::Q5_0);  // 576: not whole 256-blocks
  EXPECT_EQ(parse_gguf_scheme("gguf:q4_k_m").file_tag, "Q4_K_M");
}

TEST(GgufScheme, OtherPresetsAndFallbacks) {
  const GgufScheme q2 = parse_gguf_scheme("gguf:q2_k"), q2s = parse_gguf_scheme("gguf:q2_k_s"),
                   q3m = parse_gguf_scheme("gguf:q3_k_m"), q8 = parse_gguf_scheme("gguf:q8_0"),
                   q40 = parse_gguf_scheme("gguf:q4_0"), q4s = parse_gguf_scheme("gguf:q4_k_s");
  EXPECT_EQ(q2.type_of(GgufTensorKind::AttnV, 5, 32, 4096, 4), GgmlType::Q4_K);  // GQA 4
  EXPECT_EQ(q2.type_of(GgufTensorKind::AttnV, 5, 32, 4096, 1), GgmlType::Q3_K);
  EXPECT_EQ(q2.type_of(GgufTensorKind::AttnOutput, 5, 32, 4096, 1), GgmlType::Q3_K);
  EXPECT_EQ(q2s.type_of(GgufTensorKind::FfnDown, 3, 32, 14336, 1), GgmlType::Q4_K);  // 3 < 32/8
  EXPECT_EQ(q2s.type_of(GgufTensorKind::FfnDown, 4, 32, 14336, 1), GgmlType::Q2_K);
  EXPECT_EQ(q3m.type_of(GgufTensorKind::AttnV, 1, 32, 4096, 1), GgmlType::Q5_K);
  EXPECT_EQ(q3m.type_of(GgufTensorKind::AttnV, 2, 32, 4096, 1), GgmlType::Q4_K);
  EXPECT_EQ(q3m.type_of(GgufTensorKind::FfnDown, 1, 32, 14336, 1), GgmlType::Q5_K);  // 1 < 32/16
  EXPECT_EQ(q3m.type_of(GgufTensorKind::FfnDown, 2, 32, 14336, 1), GgmlType::Q4_K);
  EXPECT_EQ(q4s.type_of(GgufTensorKind::AttnV, 3, 32, 4096, 1), GgmlType::Q5_K);
  EXPECT_EQ(q4s.type_of(GgufTensorKind::AttnV, 4, 32, 4096, 1), GgmlType::Q4_K);
  EXPECT_EQ(q8.type_of(GgufTensorKind::Output, 0, 32, 4096, 1), GgmlType::Q8_0);
  EXPECT_EQ(q40.type_of(GgufTensorKind::Output, 0, 32, 4096, 1), GgmlType::Q6_K);  // llama.cpp: q6_k unless q8_0
  // Row lengths that are not whole 256-blocks (SmolLM-135M's 576): llama.cpp's fallbacks.
  EXPECT_EQ(q4s.type_of(GgufTensorKind::AttnQ, 9, 30, 576, 3), GgmlType::Q5_0);
  EXPECT_EQ(q40.type_of(GgufTensorKind::Output, 0, 30, 576, 3), GgmlType::Q8_0);
  EXPECT_EQ(gguf_shape_fallback(GgmlType::Q2_K, 576), GgmlType::Q4_0);
  EXPECT_EQ(gguf_shape_fallback(GgmlType::Q5_K, 576), GgmlType::Q5_1);
  EXPECT_EQ(gguf_shape_fallback(GgmlType::Q6_K, 576), GgmlType::Q8_0);
  EXPECT_EQ(gguf_shape_fallback(GgmlType::Q4_K, 100), GgmlType::F16);
  EXPECT_EQ(gguf_shape_fallback(GgmlType::Q8_0, 100), GgmlType::F16);
  EXPECT_TRUE(is_gguf_format("GGUF:q4_k_m"));
  EXPECT_FALSE(is_gguf_format("auto_round"));
  try {
    parse_gguf_scheme("gguf:q4_k_x");
    FAIL() << "accepted an unknown preset";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_k_x"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q4_k_m"), std::string::npos) << e.what();
  }
}

TEST(GgufRtn, EveryTypeDecodesToItsDequantizedWeightWithinHalfAStep) {
  Context ctx(Device{}, 2);
  const int64_t rows = 6, cols = 512;
  std::vector<float> W = test::randn<float>(size_t(rows * cols), 7, 0.05);
  W[3] = 0.9f;  // an outlier
  double last = 0;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q5_1, GgmlType::Q5_0,
                     GgmlType::Q4_K, GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q3_K, GgmlType::Q2_K}) {
    std::vector<float> What(W.size()), dec(W.size());
    const std::vector<uint8_t> bytes = gguf_quantize_rtn(ctx, t, W.data(), rows, cols, What.data());
    ASSERT_EQ(int64_t(bytes.size()), rows * ggml_row_bytes(t, cols));
    ggml_dequantize(t, bytes.data(), dec.data(), rows * cols);
    for (size_t i = 0; i < W.size(); ++i) ASSERT_EQ(dec[i], What[i]) << ggml_type_name(t) << " element " << i;
    const double err = test::rel_err(What.data(), W.data(), W.size());
    std::printf("%s: relative RMSE %.4f\n", ggml_type_name(t), err);
    EXPECT_LT(err, 0.6) << ggml_type_name(t);
    if (t == GgmlType::Q8_0) {
      EXPECT_LT(err, 0.01);
    }
    if (ggml_is_kquant(t)) {  // within half a step of the group's written scale, or clamped to the range
      const KQuantSpec sp = ggml_kquant_spec(t);
      for (int64_t b = 0; b < rows * cols / 256; ++b) {
        const KQuantBlockParams p = ggml_kquant_unpack(t, bytes.data() + b * ggml_block_bytes(t));
        for (int e = 0; e < 256; ++e) {
          const int j = e / sp.group_size, q = p.q[size_t(e)];
          const float s = std::fabs(p.d * float(p.sc[size_t(j)]));
          const bool clamped = q == sp.q_min || q == sp.q_max;
          if (!clamped) {
            EXPECT_LE(std::fabs(W[size_t(b * 256 + e)] - What[size_t(b * 256 + e)]), 0.5f * s * 1.0001f + 1e-7f)
                << ggml_type_name(t) << " block " << b << " element " << e;
          }
        }
      }
    }
    last = err;
  }
  EXPECT_GT(last, 0.0);
}

// SignRound through a GGUF type (qdq_fixed.h): the fixed-parameter QDQ with a tuned V is exactly what
// gguf_pack_codes writes, whether the codes come from (W, V) or are recovered from the QDQ weights
// themselves (as the pipeline packs a tuned block); and its straight-through gradient is s dw^ inside
// the code range, 0 where clamped.
TEST(GgufTuned, FixedQdqIsWhatThePackedBytesDecodeTo) {
  Context ctx(Device{}, 2);
  const int64_t rows = 4, cols = 512;
  const std::vector<float> W = test::randn<float>(size_t(rows * cols), 11, 0.05);
  std::vector<float> V = test::randn<float>(W.size(), 12, 0.2);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q4_0,
                     GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0}) {
    GgufLayerParams p = gguf_params_rtn(ctx, t, W.data(), rows, cols);
    const FixedQdq f = p.qdq();
    std::vector<float> s(size_t(rows * f.groups())), m(s.size()), What(W.size()), dec(W.size());
    gguf_group_scales(p, s.data(), m.data());
    qdq_fixed_fwd(ctx, f, W.data(), V.data(), s.data(), m.data(), What.data());
    const std::vector<uint8_t> from_wv = gguf_pack_codes(ctx, p, W.data(), V.data());
    const std::vector<uint8_t> from_what = gguf_pack_codes(ctx, p, What.data(), nullptr);
    EXPECT_TRUE(from_wv == from_what) << ggml_type_name(t) << ": codes recovered from w^ differ";
    ggml_dequantize(t, from_wv.data(), dec.data(), rows * cols);
    for (size_t i = 0; i < W.size(); ++i) ASSERT_EQ(dec[i], What[i]) << ggml_type_name(t) << " element " << i;
    // Backward: against the definition, element by element.
    std::vector<float> dW = test::randn<float>(W.size(), 13), dV(W.size());
    qdq_fixed_bwd<float>(f, W.data(), V.data(), s.data(), m.data(), dW.data(), dV.data(), 0, rows);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t g = (i / cols) * f.groups() + (i % cols) / f.group;
      const float q = s[size_t(g)] != 0 ? std::nearbyint((W[size_t(i)] + m[size_t(g)]) / s[size_t(g)] + V[size_t(i)]) : 0.f;
      const bool inside = q >= float(f.qlo) && q <= float(f.qhi);
      ASSERT_EQ(dV[size_t(i)], inside ? dW[size_t(i)] * s[size_t(g)] : 0.f) << ggml_type_name(t) << " element " << i;
    }
  }
}
