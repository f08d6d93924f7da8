// ggml's block formats (src/quant/ggml_*.h) against gguf-py, llama.cpp's Python library: the golden
// data in tests/data/ggml_goldens was made by tools/make_ggml_goldens.py with gguf-py 0.19.0.
// - dequantize equals gguf.quants.dequantize bit for bit (fp32 bits) for f16, bf16, q4_0, q4_1,
//   q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k and q6_k: element by element on the first rows of each
//   type, by a 64-bit hash of every row's output on all rows (a few hundred blocks per type);
// - pack(unpack(bytes)) == bytes for every golden block, and unpack(pack(p)) == p for random valid
//   parameters; decoding equals the documented formula of the parameters;
// - the legacy reference quantizer writes the bytes of gguf.quants.quantize;
// - the block size table, names, and the errors for bad names, row lengths and codes.
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/json_file.h"
#include "quant/ggml_kquants.h"
#include "quant/ggml_legacy.h"
#include "quant/ggml_mxfp4.h"
#include "quant/ggml_types.h"
#include "test_util.h"

using namespace ar;
using namespace ar::quant;

namespace {

const std::string kDir = std::string(AR_SOURCE_DIR) + "/tests/data/ggml_goldens";
constexpr int64_t kRow = 256;  // elements per golden row

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

using test::bits;

uint64_t fnv1a64(const float* y, int64_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = reinterpret_cast<const uint8_t*>(y);
  for (int64_t i = 0; i < 4 * n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

// One type's golden rows: block bytes, gguf-py's output of the first `full` rows, a hash of every row.
struct DequantGolden {
  std::string name;
  GgmlType type{};
  int64_t rows = 0, full = 0, row_bytes = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> out;
  std::vector<uint64_t> hashes;
};

std::vector<DequantGolden> load_dequant_goldens() {
  const std::string index = kDir + "/index.json";
  const nlohmann::json j = read_json_file(index);
  std::vector<DequantGolden> gs;
  for (const JsonIn& e : JsonIn(j, index).at("dequant").elements()) {
    DequantGolden g;
    g.name = e.at("type").str();
    g.type = ggml_type_from_name(g.name);
    EXPECT_EQ(uint32_t(g.type), uint32_t(e.at("id").i64())) << g.name;
    EXPECT_EQ(ggml_block_elems(g.type), e.at("block_elems").i64()) << g.name;
    EXPECT_EQ(ggml_block_bytes(g.type), e.at("block_bytes").i64()) << g.name;
    g.rows = e.at("n_rows").i64();
    g.full = e.at("n_full").i64();
    g.row_bytes = ggml_row_bytes(g.type, kRow);
    const std::vector<uint8_t> raw = read_bytes(kDir + "/" + e.at("file").str());
    const size_t nb = size_t(g.rows * g.row_bytes), nf = size_t(g.full * kRow) * 4, nh = size_t(g.rows) * 8;
    if (raw.size() != nb + nf + nh) throw std::runtime_error(g.name + ": golden file has the wrong size");
    g.blocks.assign(raw.begin(), raw.begin() + long(nb));
    g.out.resize(size_t(g.full * kRow));
    std::memcpy(g.out.data(), raw.data() + nb, nf);
    g.hashes.resize(size_t(g.rows));
    std::memcpy(g.hashes.data(), raw.data() + nb + nf, nh);
    gs.push_back(std::move(g));
  }
  return gs;
}

// Element-by-element comparison of fp32 bits; reports the first few differences.
void expect_same_bits(const std::string& what, const float* got, const float* want, int64_t n) {
  int reported = 0;
  for (int64_t i = 0; i < n && reported < 5; ++i)
    if (bits(got[i]) != bits(want[i])) {
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << " (0x" << std::hex << bits(got[i])
                    << ") vs gguf-py " << want[i] << " (0x" << bits(want[i]) << std::dec << ")";
      ++reported;
    }
}

template <class F>
void expect_fails(ErrorKind kind, const std::string& needle, F&& f) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(GgmlTypes, BlockSizesAreGgmls) {
  const std::vector<std::tuple<const char*, int64_t, int64_t, uint32_t>> want = {
      {"f32", 1, 4, 0},      {"f16", 1, 2, 1},      {"bf16", 1, 2, 30},    {"q4_0", 32, 18, 2},
      {"q4_1", 32, 20, 3},   {"q5_0", 32, 22, 6},   {"q5_1", 32, 24, 7},   {"q8_0", 32, 34, 8},
      {"q2_k", 256, 84, 10}, {"q3_k", 256, 110, 11}, {"q4_k", 256, 144, 12}, {"q5_k", 256, 176, 13},
      {"q6_k", 256, 210, 14}};
  for (const auto& [name, elems, bytes, id] : want) {
    const GgmlType t = ggml_type_from_name(name);
    EXPECT_EQ(uint32_t(t), id) << name;
    EXPECT_TRUE(ggml_type_known(id)) << name;
    EXPECT_EQ(ggml_block_elems(t), elems) << name;
    EXPECT_EQ(ggml_block_bytes(t), bytes) << name;
    EXPECT_STREQ(ggml_type_name(t), name);
    EXPECT_EQ(ggml_row_bytes(t, 4096), 4096 / elems * bytes) << name;
  }
  EXPECT_FALSE(ggml_type_known(4));   // q4_2, removed from ggml
  EXPECT_FALSE(ggml_type_known(15));  // q8_k: not a storage type we write
  EXPECT_EQ(ggml_type_from_name("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_name("fp16"), GgmlType::F16);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 0), 0);
}

TEST(GgmlTypes, BadNamesAndRowLengthsFail) {
  expect_fails(ErrorKind::InvalidInput, "'q4_k_m'", [] { ggml_type_from_name("q4_k_m"); });
  expect_fails(ErrorKind::InvalidInput, "''", [] { ggml_type_from_name(""); });
  expect_fails(ErrorKind::InvalidInput, "100", [] { ggml_row_bytes(GgmlType::Q4_K, 100); });
  expect_fails(ErrorKind::InvalidInput, "q4_0", [] { ggml_row_bytes(GgmlType::Q4_0, 48); });
  expect_fails(ErrorKind::InvalidInput, "-32", [] { ggml_row_bytes(GgmlType::Q8_0, -32); });
  std::vector<uint8_t> src(1024);
  std::vector<float> dst(1024);
  expect_fails(ErrorKind::InvalidInput, "q6_k", [&] { ggml_dequantize(GgmlType::Q6_K, src.data(), dst.data(), 128); });
  expect_fails(ErrorKind::InvalidInput, "q5_1",
               [&] { ggml_legacy_dequantize(GgmlType::Q5_1, src.data(), dst.data(), 33); });
  expect_fails(ErrorKind::Unsupported, "q4_0", [&] { ggml_kquant_unpack(GgmlType::Q4_0, src.data()); });
  expect_fails(ErrorKind::Unsupported, "q4_k", [&] { ggml_legacy_unpack(GgmlType::Q4_K, src.data()); });
}

TEST(GgmlGolden, DequantizeEqualsGgufPyBitForBit) {
  const auto goldens = load_dequant_goldens();
  ASSERT_EQ(goldens.size(), 12u);
  for (const DequantGolden& g : goldens) {
    std::vector<float> y(static_cast<size_t>(g.rows * kRow));
    ggml_dequantize(g.type, g.blocks.data(), y.data(), g.rows * kRow);
    expect_same_bits(g.name, y.data(), g.out.data(), g.full * kRow);
    int64_t bad = 0;
    for (int64_t r = 0; r < g.rows; ++r) bad += fnv1a64(y.data() + r * kRow, kRow) != g.hashes[size_t(r)];
    EXPECT_EQ(bad, 0) << g.name << ": rows whose output hash differs from gguf-py's, of " << g.rows;
  }
}

TEST(GgmlGolden, PackOfUnpackGivesBackEveryBlock) {
  for (const DequantGolden& g : load_dequant_goldens()) {
    if (!ggml_is_legacy(g.type) && !ggml_is_kquant(g.type)) continue;
    const int64_t bb = ggml_block_bytes(g.type), nb = int64_t(g.blocks.size()) / bb;
    std::vector<uint8_t> again(static_cast<size_t>(bb));
    int64_t bad = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = g.blocks.data() + b * bb;
      if (ggml_is_legacy(g.type))
        ggml_legacy_pack(g.type, ggml_legacy_unpack(g.type, blk), again.data());
      else
        ggml_kquant_pack(g.type, ggml_kquant_unpack(g.type, blk), again.data());
      bad += std::memcmp(again.data(), blk, size_t(bb)) != 0;
    }
    EXPECT_EQ(bad, 0) << g.name << ": blocks changed by unpack + pack, of " << nb;
  }
}

TEST(GgmlGolden, LegacyReferenceQuantizerWritesGgufPysBytes) {
  const std::string index = kDir + "/index.json";
  const nlohmann::json j = read_json_file(index);
  const JsonIn q = JsonIn(j, index).at("quantize");
  const int64_t n = q.at("n_rows").i64() * kRow;
  const std::vector<uint8_t> raw = read_bytes(kDir + "/" + q.at("input").str());
  ASSERT_EQ(int64_t(raw.size()), n * 4);
  std::vector<float> x(static_cast<size_t>(n));
  std::memcpy(x.data(), raw.data(), raw.size());
  int types = 0;
  for (const JsonIn& o : q.at("outputs").elements()) {
    const GgmlType t = ggml_type_from_name(o.at("type").str());
    const std::vector<uint8_t> want = read_bytes(kDir + "/" + o.at("file").str());
    std::vector<uint8_t> got(static_cast<size_t>(ggml_row_bytes(t, n)));
    ggml_legacy_quantize_ref(t, x.data(), got.data(), n);
    ASSERT_EQ(got.size(), want.size()) << ggml_type_name(t);
    const int64_t bb = ggml_block_bytes(t);
    for (int64_t b = 0; b < n / 32; ++b)
      EXPECT_EQ(std::memcmp(got.data() + b * bb, want.data() + b * bb, size_t(bb)), 0)
          << ggml_type_name(t) << " block " << b << " differs from gguf-py's quantize";
    ++types;
  }
  EXPECT_EQ(types, 5);
}

// Random parameters in range: pack then unpack gives them back, and decoding is the formula the
// headers document (sym w = d*q, asym w = d*q + m; k-quants (d*sc)*q [- dmin*mn]).
TEST(GgmlBlocks, ParametersRoundTripAndDecodeByTheFormula) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto fp16 = [&] { return f16_to_f32(f32_to_f16(std::normal_distribution<float>(0.0f, 0.05f)(rng))); };
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0}) {
    LegacyBlockParams p;
    p.d = fp16();
    const bool asym = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
    if (asym) p.m = fp16();
    for (int& v : p.q) v = pick(ggml_legacy_qmin(t), ggml_legacy_qmax(t));
    std::vector<uint8_t> b(static_cast<size_t>(ggml_block_bytes(t)));
    ggml_legacy_pack(t, p, b.data());
    const LegacyBlockParams u = ggml_legacy_unpack(t, b.data());
    EXPECT_EQ(u.q, p.q) << ggml_type_name(t);
    EXPECT_EQ(bits(u.d), bits(p.d)) << ggml_type_name(t);
    EXPECT_EQ(bits(u.m), bits(p.m)) << ggml_type_name(t);
    float y[32], want[32];
    ggml_dequantize(t, b.data(), y, 32);
    for (int i = 0; i < 32; ++i) want[i] = asym ? p.d * float(p.q[size_t(i)]) + p.m : p.d * float(p.q[size_t(i)]);
    expect_same_bits(ggml_type_name(t), y, want, 32);
  }
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const KQuantSpec s = ggml_kquant_spec(t);
    KQuantBlockParams p;
    p.d = fp16();
    if (s.has_min) p.dmin = fp16();
    for (int j = 0; j < s.groups; ++j) {
      p.sc[size_t(j)] = pick(s.sc_min, s.sc_max);
      if (s.has_min) p.mn[size_t(j)] = pick(0, s.mn_max);
    }
    for (int& v : p.q) v = pick(s.q_min, s.q_max);
    std::vector<uint8_t> b(static_cast<size_t>(ggml_block_bytes(t)));
    ggml_kquant_pack(t, p, b.data());
    const KQuantBlockParams u = ggml_kquant_unpack(t, b.data());
    EXPECT_EQ(u.q, p.q) << ggml_type_name(t);
    EXPECT_EQ(u.sc, p.sc) << ggml_type_name(t);
    EXPECT_EQ(u.mn, p.mn) << ggml_type_name(t);
    EXPECT_EQ(bits(u.d), bits(p.d)) << ggml_type_name(t);
    EXPECT_EQ(bits(u.dmin), bits(p.dmin)) << ggml_type_name(t);
    float y[256], want[256];
    ggml_dequantize(t, b.data(), y, 256);
    for (int e = 0; e < 256; ++e) {
      const int j = e / s.group_size;
      const float v = p.d * float(p.sc[size_t(j)]) * float(p.q[size_t(e)]);
      want[e] = s.has_min ? v - p.dmin * float(p.mn[size_t(j)]) : v;
    }
    expect_same_bits(ggml_type_name(t), y, want, 256);
  }
}

TEST(GgmlBlocks, PackRejectsValuesOutOfRange) {
  std::vector<uint8_t> b(256);
  LegacyBlockParams lp;
  lp.q[3] = 8;  // q4_0 codes are -8..7
  expect_fails(ErrorKind::InvalidInput, "element 3", [&] { ggml_legacy_pack(GgmlType::Q4_0, lp, b.data()); });
  lp.q[3] = -1;  // q4_1 codes are 0..15
  expect_fails(ErrorKind::InvalidInput, "[0, 15]", [&] { ggml_legacy_pack(GgmlType::Q4_1, lp, b.data()); });
  KQuantBlockParams kp;
  kp.sc[2] = 32;  // q3_k sub-scales are -32..31
  expect_fails(ErrorKind::InvalidInput, "sc[2] = 32", [&] { ggml_kquant_pack(GgmlType::Q3_K, kp, b.data()); });
  kp = {};
  kp.mn[7] = 64;
  expect_fails(ErrorKind::InvalidInput, "mn[7]", [&] { ggml_kquant_pack(GgmlType::Q4_K, kp, b.data()); });
  kp = {};
  kp.q[255] = 4;  // q3_k codes are -4..3
  expect_fails(ErrorKind::InvalidInput, "q[255]", [&] { ggml_kquant_pack(GgmlType::Q3_K, kp, b.data()); });
  kp = {};
  kp.sc[12] = 99;  // q4_k has 8 groups: entries past them are ignored
  EXPECT_NO_THROW(ggml_kquant_pack(GgmlType::Q4_K, kp, b.data()));
}

TEST(GgmlBlocks, F32RowsAreCopied) {
  const float x[3] = {1.5f, -0.0f, 3e-40f};
  float y[3];
  ggml_dequantize(GgmlType::F32, reinterpret_cast<const uint8_t*>(x), y, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bits(y[i]), bits(x[i]));
}

// ggml's MXFP4 (dequantize_row_mxfp4): every exponent byte and code against kv[c] * 2^(e - 128) in double,
// subnormal, overflowing (e = 255: 2^127, no NaN) and signed-zero cases included; then a block's nibble
// order (element j < 16 in qs[j]'s low nibble, j + 16 in its high one).
TEST(GgmlMxfp4, EveryExponentAndCodeAsGgml) {
  const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int e = 0; e < 256; ++e)
    for (int c = 0; c < 16; ++c) {
      const double want = kv[c] * std::ldexp(1.0, e - 128);
      float want_f = want > 0x1.fffffep127 ? INFINITY : want < -0x1.fffffep127 ? -INFINITY : float(want);
      if (want != 0 && std::fabs(want) < 0x1p-126) {  // a subnormal, built from its bits (the test thread flushes)
        const uint32_t b = uint32_t(std::fabs(want) / 0x1p-149) | (want < 0 ? 0x80000000u : 0);
        std::memcpy(&want_f, &b, 4);
      }
      const float got = quant::ggml_mxfp4_value(uint8_t(e), uint8_t(c));
      ASSERT_EQ(std::memcmp(&got, &want_f, 4), 0) << "e " << e << " code " << c << ": " << got << " vs " << want_f;
    }
  EXPECT_EQ(quant::ggml_mxfp4_value(0, 1), 0x1p-128f);  // subnormal, built from its bits
  EXPECT_TRUE(std::isinf(quant::ggml_mxfp4_value(255, 7)));
  EXPECT_EQ(quant::ggml_mxfp4_value(255, 1), 0x1p127f);  // 2^127 x 1, the largest finite
  uint8_t blk[17] = {127};  // scale 2^-1: kv / 2 = the E2M1 values
  for (int j = 0; j < 16; ++j) blk[1 + j] = uint8_t(j | (15 - j) << 4);
  float y[32];
  quant::ggml_dequantize(quant::GgmlType::MXFP4, blk, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], kv[j] * 0.5f) << j;
    EXPECT_EQ(y[j + 16], kv[15 - j] * 0.5f) << j;
  }
  EXPECT_EQ(quant::ggml_row_bytes(quant::GgmlType::MXFP4, 64), 34);
  EXPECT_STREQ(quant::ggml_type_name(quant::GgmlType::MXFP4), "mxfp4");
}
