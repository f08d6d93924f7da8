#include "pipeline/float_export.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/small_float.h"

namespace ar {

namespace {
using quant::FpFamily;
using quant::FpQdqShape;

bool is_mx(const quant::QuantFormat& f) { return f.fp == FpFamily::Mx || f.fp == FpFamily::MxRceil; }

// compressed-tensors' format name of the scheme.
// Weight-only FP8 is "naive-quantized" (the e4m3 weight stored as it is), as AutoRound writes FPW8A16;
// FP8_STATIC (static FP8 activations too) "float-quantized".
std::string ct_format(const quant::QuantFormat& f) {
  if (f.fp == FpFamily::Nvfp4) return "nvfp4-pack-quantized";
  if (is_mx(f)) return f.bits == 4 ? "mxfp4-pack-quantized" : "mxfp8-quantized";
  return f.act_static() ? "float-quantized" : "naive-quantized";
}

// FP8_STATIC's "input_activations": one static E4M3 scale per Linear input.
nlohmann::ordered_json static_fp8_input_args() {
  return {{"dynamic", false}, {"group_size", nullptr}, {"num_bits", 8}, {"strategy", "tensor"},
          {"symmetric", true}, {"type", "float"}};
}

// The "weights" quantization args, as AutoRound's llm_compressor export writes them.
nlohmann::ordered_json weight_args(const quant::QuantFormat& f) {
  nlohmann::ordered_json w;
  if (f.fp == FpFamily::Fp8 && f.block_rows > 0)
    w["block_structure"] = nlohmann::ordered_json::array({f.block_rows, f.group_size});
  w["dynamic"] = false;
  w["group_size"] = f.fp == FpFamily::Fp8 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.group_size);
  w["num_bits"] = f.bits;
  if (is_mx(f)) w["scale_dtype"] = "torch.uint8";
  if (f.fp == FpFamily::Nvfp4) w["scale_dtype"] = "torch.float8_e4m3fn";
  w["strategy"] = f.fp == FpFamily::Nvfp4 ? "tensor_group"
                  : is_mx(f)              ? "group"
                  : f.block_rows > 0      ? "block"
                  : f.group_size == 0     ? "tensor"
                                          : "channel";
  w["symmetric"] = true;
  w["type"] = "float";
  return w;
}

}  // namespace

std::string float_data_type(const quant::QuantFormat& f) {
  switch (*f.fp) {
    case FpFamily::Mx: return "mx_fp";
    case FpFamily::MxRceil: return "mx_fp_rceil";
    case FpFamily::Nvfp4: return "nv_fp";
    case FpFamily::Fp8: return "fp";
  }
  return "fp";
}

namespace {
Tensor u8_tensor(Context& ctx, const Shape& shape, const std::vector<uint8_t>& bytes) {
  Tensor t = Tensor::empty(shape, DType::U8, ctx);
  std::copy(bytes.begin(), bytes.end(), t.data<uint8_t>());
  return t;
}
}  // namespace

std::string float_scheme_name(const quant::QuantFormat& f) {
  if (!f.fp) return "int" + std::to_string(f.bits);
  if (f.fp == FpFamily::Nvfp4) return "NVFP4";
  if (is_mx(f)) return std::string(f.bits == 4 ? "MXFP4" : "MXFP8") + (f.fp == FpFamily::MxRceil ? " (rceil)" : "");
  return f.block_rows > 0 ? "FP8 per " + std::to_string(f.block_rows) + "x" + std::to_string(f.group_size) + " block"
         : f.group_size == 0 ? std::string("FP8 per tensor")
                             : std::string("FP8 per channel");
}

void check_float_format(const std::string& format, const quant::QuantFormat& fmt) {
  if (format == "fake") return;
  if (!fmt.is_float()) {
    if (format == "llm_compressor")
      fail(ErrorKind::InvalidInput, "--format llm_compressor writes the float schemes (--data_type mx_fp, nv_fp or fp); "
                                    "int weights go to auto_round, auto_gptq or auto_awq");
    return;
  }
  const std::string name = float_scheme_name(fmt);
  if (format == "llm_compressor") return;
  const bool ar_holds = fmt.fp != FpFamily::Fp8 || fmt.act_static();  // auto_round:llm_compressor / fp8_static
  if (format == "auto_round" && ar_holds) return;
  fail(ErrorKind::InvalidInput, "--format " + format + " cannot hold " + name + " weights (" +
                                    (format == "auto_round" ? std::string("weight-only FP8 is written as llm_compressor here")
                                                            : std::string("it packs integers")) +
                                    "); use llm_compressor" + (ar_holds ? ", auto_round" : "") + " or fake");
}

void pack_float_linear(Context& ctx, ShardWriter& w, const std::string& prefix, const quant::TunedLinear& L,
                       bool flat_channel_scale) {
  AR_CHECK(L.fp.has_value(), "pack_float_linear of an int Linear");
  const FpQdqShape& sh = *L.fp;
  const int64_t out = sh.out, in = sh.in;
  std::vector<float> el(size_t(out * in));
  quant::fp_qdq_elements(sh, L.weight->f32(), L.scale.f32(), el.data());
  const float* scale = L.scale.f32();
  const int64_t nt = sh.tiles();
  if (sh.elem == quant::FpElem::E2M1) {
    AR_CHECK(in % 2 == 0, "E2M1 packing of an odd width");
    // compressed-tensors' NVFP4 packer takes the sign from x < 0, so -0 is stored as +0 (AutoRound's
    // MX packer keeps the sign bit).
    const bool plus_zero = sh.family == FpFamily::Nvfp4;
    auto code = [&](float v) { return plus_zero && v == 0.0f ? uint8_t(0) : e2m1_encode(v); };
    std::vector<uint8_t> packed(size_t(out * in / 2));
    for (int64_t i = 0; i < out * in; i += 2)
      packed[size_t(i / 2)] = uint8_t(code(el[size_t(i)]) | (code(el[size_t(i + 1)]) << 4));
    w.add(prefix + ".weight_packed", u8_tensor(ctx, {out, in / 2}, packed));
  } else {
    // AutoRound's FP8 QDQ ends in a straight-through step, (q - x) + x, which turns a -0 (a small
    // negative weight rounded to zero) into +0; its MX QDQ keeps the sign.
    const bool plus_zero = sh.family == FpFamily::Fp8;
    std::vector<uint8_t> codes(el.size());
    for (size_t i = 0; i < el.size(); ++i) codes[i] = plus_zero && el[i] == 0.0f ? uint8_t(0) : e4m3_encode(el[i]);
    Tensor t = Tensor::empty({out, in}, DType::F8E4M3, ctx);
    std::copy(codes.begin(), codes.end(), t.data<uint8_t>());
    w.add(prefix + ".weight", t);
  }
  if (sh.family == FpFamily::Nvfp4) {
    std::vector<uint8_t> s(static_cast<size_t>(nt));
    for (int64_t t = 0; t < nt; ++t) s[size_t(t)] = e4m3_encode(scale[t]);
    Tensor st = Tensor::empty({out, sh.tiles_across()}, DType::F8E4M3, ctx);
    std::copy(s.begin(), s.end(), st.data<uint8_t>());
    w.add(prefix + ".weight_scale", st);
    Tensor g = Tensor::empty({1}, DType::F32, ctx);
    g.f32()[0] = sh.global_scale;
    w.add(prefix + ".weight_global_scale", g);
  } else if (sh.family == FpFamily::Fp8) {
    const Shape shape = sh.tile_rows == out && sh.tile_cols == in ? Shape{1}
                        : sh.tile_rows == 1                       ? (flat_channel_scale ? Shape{out} : Shape{out, 1})
                                                                  : Shape{sh.tiles_down(), sh.tiles_across()};
    Tensor st = Tensor::empty(shape, DType::F32, ctx);
    std::copy(scale, scale + nt, st.f32());
    w.add(prefix + ".weight_scale", st);
  } else {  // MX: E8M0
    std::vector<uint8_t> s(static_cast<size_t>(nt));
    for (int64_t t = 0; t < nt; ++t) s[size_t(t)] = e8m0_encode(int(scale[t]));
    w.add(prefix + ".weight_scale", u8_tensor(ctx, {out, sh.tiles_across()}, s));
  }
  if (L.input_scale > 0) {  // FP8_STATIC: the activation scale, fp32 [1] as AutoRound writes it
    Tensor is = Tensor::empty({1}, DType::F32, ctx);
    is.f32()[0] = L.input_scale;
    w.add(prefix + ".input_scale", is);
  }
}

nlohmann::ordered_json float_quantization_config(const QuantizeOptions& opt, bool lm_head_q,
                                                 const nlohmann::ordered_json& extra, const ConfigNames& names) {
  const quant::QuantFormat& f = opt.fmt;
  nlohmann::ordered_json q;
  if (opt.format == "auto_round" || opt.format == "fake") {
    q["quant_method"] = "auto-round";
    q["packing_format"] = opt.format == "fake" ? "auto_round:fake" : "auto_round:llm_compressor";
    q["bits"] = f.bits;
    q["group_size"] = f.group_size;
    q["sym"] = true;
    q["data_type"] = float_data_type(f);
    if (f.act_static()) {  // as AutoRound writes FP8_STATIC
      q["packing_format"] = opt.format == "fake" ? "auto_round:fake" : "auto_round:fp8_static";
      q["act_bits"] = 8;
      q["act_data_type"] = "fp";
      q["act_dynamic"] = false;
      q["act_group_size"] = 0;
      q["act_sym"] = true;
      q["activation_scheme"] = "static";
      q["fmt"] = "e4m3";
    } else {
      q["act_bits"] = 16;
    }
    q["autoround_version"] = "autoround.cpp-0.1.0";
    q["block_name_to_quantize"] = names.layers;
    if (opt.tune.iters != 200) q["iters"] = opt.tune.iters;
    if (!extra.empty()) q["extra_config"] = extra;
    return q;
  }
  nlohmann::ordered_json group;
  group["format"] = f.fp == FpFamily::Fp8 ? nlohmann::ordered_json(ct_format(f)) : nlohmann::ordered_json(nullptr);
  group["input_activations"] = f.act_static() ? static_fp8_input_args() : nullptr;  // null: 16-bit activations
  group["output_activations"] = nullptr;
  group["targets"] = nlohmann::ordered_json::array({"Linear"});
  group["weights"] = weight_args(f);
  nlohmann::ordered_json ignore = nlohmann::ordered_json::array();
  for (auto it = extra.begin(); it != extra.end(); ++it)
    if (it.value().value("bits", 16) >= 16) ignore.push_back(it.key());
  if (!lm_head_q) ignore.push_back("lm_head");
  for (const std::string& root : names.foreign) ignore.push_back("re:.*" + root + "\\..*");
  q["config_groups"] = {{"group_0", group}};
  q["format"] = ct_format(f);
  q["global_compression_ratio"] = nullptr;
  q["ignore"] = ignore;
  q["kv_cache_scheme"] = nullptr;
  q["provider"] = "autoround.cpp";
  q["quant_method"] = "compressed-tensors";
  q["quantization_status"] = "compressed";
  return q;
}

void check_float_scheme(const QuantizeOptions& opt) {
  const quant::QuantFormat& f = opt.fmt;
  quant::fp_shape(f, 1, 32);  // bits and tiles AutoRound has
  const std::string name = float_scheme_name(f);
  const bool mx = f.fp == quant::FpFamily::Mx || f.fp == quant::FpFamily::MxRceil;
  if (mx && f.group_size != 32)
    fail(ErrorKind::InvalidInput, name + " has blocks of 32 (--group_size " + std::to_string(f.group_size) + ")");
  if (f.fp == quant::FpFamily::Nvfp4 && f.group_size != 16)
    fail(ErrorKind::InvalidInput, "NVFP4 has blocks of 16 (--group_size " + std::to_string(f.group_size) + ")");
  if (!f.sym) fail(ErrorKind::InvalidInput, name + " is symmetric (--asym is for int weights)");
  if (f.act_bits != 16 && f.act_bits != 8)
    fail(ErrorKind::InvalidInput, "--act_bits " + std::to_string(f.act_bits) + ": activations are 16 bit, or 8 bit "
                                  "with FP8_STATIC");
  if (f.act_static() && (f.fp != quant::FpFamily::Fp8 || f.block_rows > 0))
    fail(ErrorKind::Unsupported, name + " with 8-bit activations needs a runtime activation quantizer (dynamic "
                                        "scales), which is not built in; static FP8 activations are FP8_STATIC's "
                                        "(FP8 weights per channel or per tensor)");
  if (f.fp == quant::FpFamily::Fp8 && f.group_size > 0 && f.block_rows == 0)
    fail(ErrorKind::InvalidInput, "FP8 weights are per channel (--group_size -1), per tensor (0) or per 128x128 "
                                  "block (--scheme FP8_BLOCK), not in groups of " + std::to_string(f.group_size));
}

}  // namespace ar
