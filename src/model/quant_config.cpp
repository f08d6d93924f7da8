#include "model/quant_config.h"

#include "core/error.h"
#include "core/name_pattern.h"
#include "core/printable.h"

namespace ar {
namespace {

[[noreturn]] void bad_field(const std::string& path, const std::string& field, const std::string& msg) {
  fail(ErrorKind::InvalidInput, path + ": field 'quantization_config." + field + "': " + msg);
}

// An integer member, range-checked before any narrowing.
int64_t q_int(const JsonIn& o, const char* k, int64_t def) {
  if (!o.has(k)) return def;
  const int64_t v = o.at(k).i64();
  if (v < -1 || v > (int64_t(1) << 30)) o.at(k).bad(std::to_string(v) + " is out of range");
  return v;
}

// [rows, cols] of an FP8 block scheme (block_structure, weight_block_size, or a list group_size).
void parse_block(const JsonIn& a, QuantConfig& q) {
  if (!a.is_array() || a.size() != 2) a.bad("must be a list of two block sizes [rows, cols]");
  q.block_rows = a.at(size_t(0)).i64();
  q.block_cols = a.at(size_t(1)).i64();
  if (q.block_rows < 1 || q.block_cols < 1 || q.block_rows > (int64_t(1) << 20) || q.block_cols > (int64_t(1) << 20))
    a.bad("block sizes must be between 1 and 2^20");
}

// The float weight scheme of one compressed-tensors config group.
struct CtWeights {
  int64_t bits = 0, group = -1, block_rows = 0, block_cols = 0;
  std::string strategy;
  bool operator==(const CtWeights&) const = default;
};

// Whether a config group's input_activations are FP8_STATIC's: float, 8 bits, static, one scale per
// tensor. Absent or null: 16-bit activations.
bool ct_static_fp8_activations(const JsonIn& group) {
  if (!group.has("input_activations") || group.at("input_activations").json().is_null()) return false;
  const JsonIn a = group.at("input_activations");
  return a.str("type", "") == "float" && q_int(a, "num_bits", 0) == 8 && !a.boolean("dynamic", true) &&
         a.str("strategy", "") == "tensor";
}

CtWeights ct_weights(const JsonIn& group, const std::string& path, const std::string& name) {
  const JsonIn w = group.at("weights");
  const std::string type = w.str("type", "");
  if (type != "float")
    bad_field(path, "config_groups." + name + ".weights.type",
              "'" + printable(type) + "' is not supported (float; integer compressed-tensors formats are not read)");
  CtWeights c;
  c.bits = q_int(w, "num_bits", 0);
  c.group = q_int(w, "group_size", -1);
  c.strategy = w.str("strategy", "");
  if (c.strategy == "block") {
    QuantConfig q;
    parse_block(w.at("block_structure"), q);
    c.block_rows = q.block_rows;
    c.block_cols = q.block_cols;
  }
  return c;
}

QuantConfig parse_compressed_tensors(const JsonIn& qi, const std::string& path) {
  const std::string format = qi.str("format", "");
  QuantConfig q;
  q.present = true;
  int64_t bits = 8, group = 0;  // what the format implies (group 0: set by the strategy)
  if (format == "mxfp4-pack-quantized") q.fp = FloatQuant::Mxfp4, bits = 4, group = 32;
  else if (format == "nvfp4-pack-quantized") q.fp = FloatQuant::Nvfp4, bits = 4, group = 16;
  else if (format == "mxfp8-quantized") q.fp = FloatQuant::Mxfp8, group = 32;
  else if (format == "float-quantized" || format == "naive-quantized") q.fp = FloatQuant::Fp8;  // naive: FPW8A16
  else
    bad_field(path, "format", "'" + printable(format) +
                                  "' is not supported (mxfp4-pack-quantized, nvfp4-pack-quantized, mxfp8-quantized, "
                                  "float-quantized, naive-quantized)");
  const JsonIn groups = qi.at("config_groups");
  if (!groups.is_object() || groups.size() == 0) groups.bad("must be an object with at least one group");
  CtWeights first;
  bool have = false;
  for (auto it = groups.json().begin(); it != groups.json().end(); ++it) {
    const CtWeights c = ct_weights(groups.at(it.key()), path, printable(it.key()));
    const bool acts = ct_static_fp8_activations(groups.at(it.key()));
    if (have && (!(c == first) || acts != q.act_static))
      bad_field(path, "config_groups", "groups with different weight or activation schemes are not supported");
    first = c;
    q.act_static = acts;
    have = true;
  }
  if (first.bits != bits)
    bad_field(path, "config_groups", std::to_string(first.bits) + "-bit weights do not match format '" + format + "'");
  if (group > 0 && first.group != group)
    bad_field(path, "config_groups", "group_size " + std::to_string(first.group) + " does not match format '" +
                                         format + "' (" + std::to_string(group) + ")");
  if (q.fp == FloatQuant::Fp8 && first.strategy != "channel" && first.strategy != "tensor" && first.strategy != "block")
    bad_field(path, "config_groups", "FP8 weight strategy '" + printable(first.strategy) +
                                         "' is not supported (channel, tensor, block)");
  q.bits = int(bits);
  q.group_size = first.group;
  q.block_rows = first.block_rows;
  q.block_cols = first.block_cols;
  return q;
}

// AutoRound's float schemes: data_type and bits -> the stored layout.
FloatQuant autoround_float(const JsonIn& qi, const std::string& path, int bits) {
  const std::string dt = qi.str("data_type", "int");
  if (dt.rfind("mx_fp", 0) == 0 && (bits == 4 || bits == 8)) return bits == 4 ? FloatQuant::Mxfp4 : FloatQuant::Mxfp8;
  if (dt.rfind("nv_fp", 0) == 0 && bits == 4) return FloatQuant::Nvfp4;
  if (dt == "fp" && bits == 8) return FloatQuant::Fp8;
  bad_field(path, "data_type", "'" + printable(dt) + "' with " + std::to_string(bits) +
                                   " bits is not a float scheme this loader reads (mx_fp 4/8, nv_fp 4, fp 8)");
}

// One per-layer override: its bits and group size over the global ones; false for a 16-bit Linear
// (kept: read from its .weight) or one without packing keys.
bool layer_packing(const JsonIn& e, const QuantConfig& q, QuantConfig::Packing* p) {
  if (!e.is_object()) e.bad("must be an object of scheme keys");
  const std::string dt = e.has("data_type") && !e.at("data_type").is_null() ? e.str("data_type", "int") : "int";
  const int64_t bits = e.has("bits") && !e.at("bits").is_null() ? q_int(e, "bits", q.bits) : q.bits;
  if (bits >= 16 || dt != "int") return false;
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8) e.at("bits").bad(std::to_string(bits) + "-bit packed weights are not supported");
  const int64_t g = e.has("group_size") && !e.at("group_size").is_null() ? q_int(e, "group_size", q.group_size) : q.group_size;
  if (g == 0) e.at("group_size").bad("0 is not a group size");
  *p = {int(bits), g};
  return true;
}

void add_pattern(const JsonIn& at, const std::string& regex, bool from_start, QuantConfig::Packing p, QuantConfig& q) {
  std::string why;
  std::optional<std::regex> re = compile_name_pattern(regex, &why);
  if (!re) at.bad("key '" + printable(regex) + "' is " + why);
  q.patterns.push_back({std::move(*re), from_start, p});
}

// auto_round's extra_config: module names (letters, digits, '_' and '.') and AutoRound's regex keys.
void parse_extra_config(const JsonIn& qi, QuantConfig& q) {
  if (!qi.has("extra_config") || qi.at("extra_config").is_null()) return;
  const JsonIn x = qi.at("extra_config");
  if (!x.is_object()) x.bad("must be an object");
  for (auto it = x.json().begin(); it != x.json().end(); ++it) {
    QuantConfig::Packing p;
    if (!layer_packing(x.at(it.key()), q, &p)) continue;
    const std::string& k = it.key();
    const bool name = std::all_of(k.begin(), k.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; });
    if (name) q.layers[k] = p;
    else add_pattern(x, k, false, p, q);
  }
}

// gptq's `dynamic`: "+:regex" (or a bare regex) gives the modules it matches from the start their own
// scheme; "-:regex" leaves them unquantized (their .weight is read as stored).
void parse_dynamic(const JsonIn& qi, QuantConfig& q) {
  if (!qi.has("dynamic") || qi.at("dynamic").is_null()) return;
  const JsonIn d = qi.at("dynamic");
  if (!d.is_object()) d.bad("must be an object");
  for (auto it = d.json().begin(); it != d.json().end(); ++it) {
    const std::string& k = it.key();
    if (k.rfind("-:", 0) == 0) continue;
    QuantConfig::Packing p;
    if (layer_packing(d.at(k), q, &p)) add_pattern(d, k.rfind("+:", 0) == 0 ? k.substr(2) : k, true, p, q);
  }
}

}  // namespace

// transformers' fine-grained FP8 (FineGrainedFP8Config; DeepSeek-V3/R1, Kimi K2, Qwen3 FP8): E4M3
// weights with one fp32 multiplier per weight_block_size tile ("<prefix>.weight_scale_inv"),
// activations quantized at run time. Modules left in 16 bit simply store a 16-bit weight.
QuantConfig parse_fine_grained_fp8(const JsonIn& qi, const std::string& path) {
  QuantConfig q;
  q.present = true;
  q.fp = FloatQuant::Fp8;
  q.bits = 8;
  q.fp8_scale = "weight_scale_inv";
  if (const std::string fmt = qi.str("fmt", "e4m3"); fmt != "e4m3")
    bad_field(path, "fmt", "'" + printable(fmt) + "' is not supported (e4m3)");
  if (const std::string act = qi.str("activation_scheme", "dynamic"); act != "dynamic")
    bad_field(path, "activation_scheme", "'" + printable(act) + "' is not supported (dynamic)");
  if (qi.has("weight_block_size") && !qi.at("weight_block_size").is_null()) {
    parse_block(qi.at("weight_block_size"), q);
  } else {
    q.block_rows = q.block_cols = 128;  // transformers' default
  }
  return q;
}

QuantConfig parse_quant_config(const JsonIn& qi, const std::string& path) {
  const std::string method = qi.str("quant_method", std::string());
  if (method == "compressed-tensors") return parse_compressed_tensors(qi, path);
  if (method == "fp8") return parse_fine_grained_fp8(qi, path);
  if (method == "mxfp4") {  // gpt-oss's release: the experts (model/mxfp4_experts.cpp); the rest is 16 bit
    QuantConfig q;
    q.mxfp4_experts = true;
    return q;
  }
  const std::string packing =
      qi.str("packing_format", std::string(method == "gptq" ? "auto_gptq" : method == "awq" ? "auto_awq" : ""));
  if (method != "auto-round" && method != "gptq" && method != "awq")
    bad_field(path, "quant_method", "'" + printable(method) + "' is not supported (auto-round, gptq, awq, compressed-tensors, fp8, mxfp4)");
  QuantConfig q;
  q.bits = int(q_int(qi, "bits", 4));
  if (method == "auto-round" && (packing == "auto_round:llm_compressor" || packing == "auto_round:fp8_static" ||
                                 packing == "auto_round:fp8")) {
    q.present = true;
    q.fp = autoround_float(qi, path, q.bits);
    if (qi.has("group_size") && qi.at("group_size").is_array()) parse_block(qi.at("group_size"), q);
    else q.group_size = q_int(qi, "group_size", -1);
    q.act_static = q_int(qi, "act_bits", 16) == 8 && !qi.boolean("act_dynamic", true) &&
                   qi.str("act_data_type", "").rfind("fp", 0) == 0;
    return q;
  }
  if (packing != "auto_round:auto_gptq" && packing != "auto_gptq" && packing != "auto_round" &&
      packing != "auto_round:gptqmodel" && packing != "auto_round:fake" && packing != "auto_round:auto_awq" &&
      packing != "auto_awq")
    bad_field(path, "packing_format", "'" + printable(packing) + "' is not supported");
  q.present = packing != "auto_round:fake";  // fake: dense QDQ weights, nothing to unpack
  q.group_size = q_int(qi, "group_size", 128);
  q.sym = qi.boolean("sym", true);
  q.zero_minus_one = packing == "auto_round:auto_gptq" || packing == "auto_gptq";
  q.awq = packing == "auto_round:auto_awq" || packing == "auto_awq";
  if (q.awq) q.sym = qi.has("zero_point") ? !qi.boolean("zero_point", true) : q.sym;
  if (q.present && (q.awq ? q.bits != 4 : (q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 8)))
    bad_field(path, "bits", std::to_string(q.bits) + "-bit packed weights are not supported");
  if (q.present && !q.awq) {  // AWQ's layout has one scheme per file
    parse_extra_config(qi, q);
    parse_dynamic(qi, q);
  }
  return q;
}

}  // namespace ar
