#include "pipeline/export_format.h"

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gptq_pack.h"

namespace ar {

// Packs one tuned Linear in the GPTQ layout: qweight, qzeros, scales (fp16, [groups, out]).
// zero_minus_one: auto_round:auto_gptq and auto_gptq store zp - 1; the "auto_round" packing stores zp.
// AWQ layout (awq): qweight [in, out/8], qzeros [groups, out/8], zero points stored as is.
void pack_linear(Context& ctx, ShardWriter& w, const std::string& prefix, const quant::TunedLinear& L, bool sym,
                 bool zero_minus_one, bool g_idx, bool awq) {
  const auto& sh = L.shape;
  const int64_t out = sh.out, in = sh.in, ng = sh.groups(), bits = sh.bits;
  const int m = 1 << (bits - 1);
  std::vector<uint8_t> codes(size_t(out * in));
  std::vector<int32_t> zeros(size_t(ng * out));
  Tensor scales = Tensor::empty({ng, out}, DType::F16, ctx);
  const float* W = L.weight->f32();  // the QDQ weight: exactly scale * (code - zero)
  for (int64_t o = 0; o < out; ++o)
    for (int64_t g = 0; g < ng; ++g) {
      const float s = L.scale.f32()[o * ng + g];
      const int32_t z = sym ? m : int32_t(L.zero.f32()[o * ng + g]);
      zeros[size_t(g * out + o)] = zero_minus_one ? z - 1 : z;
      scales.data<uint16_t>()[g * out + o] = f32_to_f16(s);
      for (int64_t i = g * sh.group; i < std::min(in, (g + 1) * sh.group); ++i) {
        const int32_t u = int32_t(std::lrint(W[o * in + i] / s)) + z;
        if (u < 0 || u >= (1 << bits)) fail(ErrorKind::Internal, prefix + ": code out of range");
        codes[size_t(o * in + i)] = uint8_t(u);
      }
    }
  if (awq) {
    std::vector<uint8_t> rows(size_t(in * out)), zrows(size_t(ng * out));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) rows[size_t(i * out + o)] = codes[size_t(o * in + i)];
    for (size_t k = 0; k < zrows.size(); ++k) zrows[k] = uint8_t(zeros[k] + (zero_minus_one ? 1 : 0));
    auto qw = awq_pack_rows(rows, in, out), qz = awq_pack_rows(zrows, ng, out);
    w.add_raw(prefix + ".qweight", DType::I32, {in, out / 8}, qw.data(), qw.size() * 4);
    w.add_raw(prefix + ".qzeros", DType::I32, {ng, out / 8}, qz.data(), qz.size() * 4);
    w.add(prefix + ".scales", scales);
    return;
  }
  auto qw = gptq_pack_qweight(codes, out, in, int(bits));
  auto qz = gptq_pack_qzeros(zeros, ng, out, int(bits));
  w.add_raw(prefix + ".qweight", DType::I32, {in * bits / 32, out}, qw.data(), qw.size() * 4);
  w.add_raw(prefix + ".qzeros", DType::I32, {ng, (out * bits + 31) / 32}, qz.data(), qz.size() * 4);
  w.add(prefix + ".scales", scales);
  if (g_idx) {
    std::vector<int32_t> gi(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) gi[size_t(i)] = int32_t(i / sh.group);
    w.add_raw(prefix + ".g_idx", DType::I32, {in}, gi.data(), gi.size() * 4);
  }
}

namespace {
bool kept_16bit(const nlohmann::ordered_json& entry) { return entry.value("bits", 0) >= 16; }
}  // namespace

nlohmann::ordered_json quantization_config(const QuantizeOptions& opt, bool awq, bool lm_head_q,
                                           const nlohmann::ordered_json& extra, const std::set<std::string>& in_block,
                                           const ConfigNames& names) {
  nlohmann::ordered_json q;
  if (opt.format == "auto_awq") {
    q["quant_method"] = "awq";
    q["zero_point"] = !opt.fmt.sym;
    q["version"] = "gemm";
    q["bits"] = opt.fmt.bits;
    q["group_size"] = opt.fmt.group_size;
    nlohmann::ordered_json skip = nlohmann::ordered_json::array();
    for (auto it = extra.begin(); it != extra.end(); ++it) skip.push_back(it.key());
    for (const std::string& root : names.foreign) skip.push_back(root);  // matched as substrings
    q["modules_to_not_convert"] = skip.empty() ? nlohmann::ordered_json(nullptr) : skip;
  } else if (opt.format == "auto_gptq") {
    q["quant_method"] = "gptq";
    q["bits"] = opt.fmt.bits;
    q["group_size"] = opt.fmt.group_size;
    q["sym"] = opt.fmt.sym;
    q["desc_act"] = false;
    q["true_sequential"] = false;
    q["damp_percent"] = 0.01;
    q["provider"] = "auto-round";
    q["lm_head"] = lm_head_q;
    // gptqmodel's per-module overrides: "-:" skips a module kept in 16 bit, "+:" gives one its own
    // bits, group_size and sym (--layer_config), as AutoRound's convert_to_autogptq_dynamic writes them.
    if (!extra.empty()) {
      nlohmann::ordered_json dyn = nlohmann::ordered_json::object();
      for (auto it = extra.begin(); it != extra.end(); ++it) {
        std::string re;
        for (char ch : it.key()) re += (ch == '.') ? std::string("\\.") : std::string(1, ch);
        if (kept_16bit(it.value())) dyn["-:" + re] = nlohmann::ordered_json::object();
        else dyn["+:" + re] = it.value();
      }
      q["dynamic"] = dyn;
    }
    for (const std::string& root : names.foreign) q["dynamic"]["-:.*" + root + "\\..*"] = nlohmann::ordered_json::object();
    if (!names.foreign.empty()) q["block_name_to_quantize"] = names.layers;
    bool some_block_kept = false;
    for (auto it = extra.begin(); it != extra.end(); ++it)
      some_block_kept |= it.key().rfind(names.layers + ".", 0) == 0 && kept_16bit(it.value());
    if (some_block_kept)
      q["modules_in_block_to_quantize"] = nlohmann::ordered_json::array({nlohmann::ordered_json(in_block)});
  } else {
    q["quant_method"] = "auto-round";
    q["packing_format"] = opt.format == "fake" ? "auto_round:fake"
                        : awq              ? "auto_round:auto_awq"
                        : opt.fmt.sym      ? "auto_round:auto_gptq"
                                           : "auto_round";
    q["bits"] = opt.fmt.bits;
    q["group_size"] = opt.fmt.group_size;
    q["sym"] = opt.fmt.sym;
    q["data_type"] = "int";
    q["autoround_version"] = "autoround.cpp-0.1.0";
    q["block_name_to_quantize"] = names.layers;
    if (opt.tune.iters != 200) q["iters"] = opt.tune.iters;
    if (opt.calib.nsamples != 128) q["nsamples"] = opt.calib.nsamples;
    if (opt.calib.seqlen != 2048) q["seqlen"] = opt.calib.seqlen;
    if (!extra.empty()) q["extra_config"] = extra;
  }
  return q;
}

}  // namespace ar
