#include "model/config.h"
#include "model/quant_config.h"

#include <cmath>

#include "core/error.h"
#include "core/printable.h"
#include "io/json_file.h"
#include "model/arch/arch.h"

namespace ar {

namespace {
[[noreturn]] void bad_field(const std::string& path, const std::string& field, const std::string& msg) {
  fail(ErrorKind::InvalidInput, path + ": field '" + field + "': " + msg);
}

int64_t req_int(const nlohmann::json& j, const std::string& path, const char* key) {
  if (!j.contains(key)) bad_field(path, key, "missing");
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) bad_field(path, key, "must be a positive integer");
  return j[key].get<int64_t>();
}

int64_t opt_int(const nlohmann::json& j, const std::string& path, const char* key, int64_t def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) bad_field(path, key, "must be a positive integer");
  return j[key].get<int64_t>();
}

double opt_num(const nlohmann::json& j, const std::string& path, const char* key, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number() || !(j[key].get<double>() > 0) || !std::isfinite(j[key].get<double>()))
    bad_field(path, key, "must be a positive finite number");
  return j[key].get<double>();
}

int64_t token_id(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return -1;
  const auto& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
  return -1;
}

// One RoPE description from either spelling: transformers 4 (top-level `rope_theta`, `rope_scaling`) or
// transformers 5 (`rope_parameters` holding `rope_theta`, `rope_type` and the scaling fields). Both may
// be present (configs converted between versions); when they disagree the run is refused, since either
// choice could silently run the wrong positions.
// YaRN (DeepSeek-V3, Kimi K2, Qwen long-context configs): factor and original_max_position_embeddings
// are required; beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor and truncate as transformers
// reads them (null: its default).
void parse_yarn(const nlohmann::json& rs, const std::string& path, const std::string& field, RopeScaling& out) {
  out.type = "yarn";
  auto num = [&](const char* k, double def, bool required) {
    if (!rs.contains(k) || rs[k].is_null()) {
      if (required) bad_field(path, field + "." + k, "missing (rope_type yarn needs it)");
      return def;
    }
    if (!rs[k].is_number() || !(rs[k].get<double>() >= 0) || !(rs[k].get<double>() <= 0x1p53))
      bad_field(path, field + "." + k, "must be a number in [0, 2^53]");
    return rs[k].get<double>();
  };
  out.factor = num("factor", 1, true);
  const double omp = num("original_max_position_embeddings", 0, true);
  if (omp < 1 || omp != std::floor(omp)) bad_field(path, field + ".original_max_position_embeddings", "must be a positive whole number");
  out.original_max_position_embeddings = int64_t(omp);
  out.beta_fast = num("beta_fast", 32, false);
  out.beta_slow = num("beta_slow", 1, false);
  if (out.beta_fast == 0) out.beta_fast = 32;  // transformers: `or 32`, `or 1`
  if (out.beta_slow == 0) out.beta_slow = 1;
  out.mscale = num("mscale", 0, false);
  out.mscale_all_dim = num("mscale_all_dim", 0, false);
  out.attention_factor = num("attention_factor", 0, false);
  if (out.factor <= 0) bad_field(path, field + ".factor", "must be positive");
  if (rs.contains("truncate") && !rs["truncate"].is_null()) out.truncate = JsonIn(rs, path, field).boolean("truncate", true);
}

void parse_scaling(const nlohmann::json& rs, const std::string& path, const std::string& field, RopeScaling& out) {
  if (!rs.is_object()) bad_field(path, field, "must be an object or null");
  const JsonIn in(rs, path, field);
  const std::string type = rs.contains("rope_type") ? in.at("rope_type").str()
                           : rs.contains("type")    ? in.at("type").str()
                                                    : std::string("default");
  if (type == "default") return;
  if (type == "yarn") return parse_yarn(rs, path, field, out);
  if (type == "linear") {  // transformers' _compute_linear_scaling_rope_parameters: inv_freq / factor
    if (!rs.contains("factor") || !rs["factor"].is_number() || !(rs["factor"].get<double>() > 0) ||
        !(rs["factor"].get<double>() <= 0x1p53))
      bad_field(path, field + ".factor", "missing or not a positive number (at most 2^53) for rope_type linear");
    out.type = type;
    out.factor = rs["factor"].get<double>();
    return;
  }
  if (type != "llama3")
    bad_field(path, field, "rope_type '" + printable(type) + "' is not supported (default, linear, llama3, yarn)");
  out.type = type;
  for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    if (!rs.contains(k) || !rs[k].is_number() || !(rs[k].get<double>() > 0) || !(rs[k].get<double>() <= 0x1p53))
      bad_field(path, field + "." + k, "missing or not a positive number (at most 2^53) for rope_type llama3");
  if (rs["original_max_position_embeddings"].get<double>() != std::floor(rs["original_max_position_embeddings"].get<double>()))
    bad_field(path, field + ".original_max_position_embeddings", "must be a whole number");
  out.factor = rs["factor"].get<double>();
  out.low_freq_factor = rs["low_freq_factor"].get<double>();
  out.high_freq_factor = rs["high_freq_factor"].get<double>();
  out.original_max_position_embeddings = int64_t(rs["original_max_position_embeddings"].get<double>());
  if (out.high_freq_factor <= out.low_freq_factor) bad_field(path, field + ".high_freq_factor", "must exceed low_freq_factor");
}

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  return a.type == b.type &&
         (a.type == "default" ||
          (a.factor == b.factor && a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
           a.original_max_position_embeddings == b.original_max_position_embeddings && a.beta_fast == b.beta_fast &&
           a.beta_slow == b.beta_slow && a.mscale == b.mscale && a.mscale_all_dim == b.mscale_all_dim &&
           a.attention_factor == b.attention_factor && a.truncate == b.truncate));
}

// rope_parameters' (or one layer type's entry's) theta and scaling over the legacy fields' values, which
// must agree with them where both are given.
void parse_rope_parameters(const nlohmann::json& rp, const std::string& path, const std::string& field, bool legacy_theta,
                           bool legacy_scaling, double& theta, RopeScaling& scaling) {
  if (!rp.is_object()) bad_field(path, field, "must be an object or null");
  if (rp.contains("rope_theta")) {
    if (!rp["rope_theta"].is_number() || !(rp["rope_theta"].get<double>() > 0) || !std::isfinite(rp["rope_theta"].get<double>()))
      bad_field(path, field + ".rope_theta", "must be a positive number");
    const double t = rp["rope_theta"].get<double>();
    if (legacy_theta && t != theta)
      bad_field(path, field + ".rope_theta", std::to_string(t) + " contradicts rope_theta " + std::to_string(theta));
    theta = t;
  }
  RopeScaling fresh;
  parse_scaling(rp, path, field, fresh);
  if (legacy_scaling && !same_scaling(fresh, scaling))
    bad_field(path, field, "rope_type '" + printable(fresh.type) + "' contradicts rope_scaling '" + printable(scaling.type) + "'");
  scaling = fresh;
}

// transformers 5 may key rope_parameters by layer type (Gemma 3): full_attention is the model's RoPE,
// sliding_attention the sliding layers' own (ModelConfig::sliding_rope; its theta defaults to the
// family's, set by the family's hook when the entry names none).
void parse_rope(const nlohmann::json& j, const std::string& path, ModelConfig& c) {
  const bool legacy_theta = j.contains("rope_theta") && !j["rope_theta"].is_null();
  c.rope_theta = opt_num(j, path, "rope_theta", 10000.0);
  const bool legacy_scaling = j.contains("rope_scaling") && !j["rope_scaling"].is_null();
  if (legacy_scaling) parse_scaling(j["rope_scaling"], path, "rope_scaling", c.rope_scaling);
  if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) return;
  const auto& rp = j["rope_parameters"];
  if (!rp.is_object()) bad_field(path, "rope_parameters", "must be an object or null");
  if (rp.contains("rope_theta") || rp.contains("rope_type"))
    return parse_rope_parameters(rp, path, "rope_parameters", legacy_theta, legacy_scaling, c.rope_theta, c.rope_scaling);
  for (const auto& [k, v] : rp.items())
    if (k != "full_attention" && k != "sliding_attention")
      bad_field(path, "rope_parameters." + printable(k), "is not a layer type (full_attention, sliding_attention)");
  if (rp.contains("full_attention") && !rp["full_attention"].is_null())
    parse_rope_parameters(rp["full_attention"], path, "rope_parameters.full_attention", legacy_theta, legacy_scaling,
                          c.rope_theta, c.rope_scaling);
  if (rp.contains("sliding_attention") && !rp["sliding_attention"].is_null()) {
    ModelConfig::LayerRope r;
    r.theta = 0;  // none named: the family's default (configure)
    parse_rope_parameters(rp["sliding_attention"], path, "rope_parameters.sliding_attention", false, false, r.theta, r.scaling);
    c.sliding_rope = r;
  }
}
}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe() || layer < moe.first_dense) return false;
  for (int64_t l : moe.mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % moe.sparse_step == 0;
}

BlockDims ModelConfig::block_dims(int64_t layer) const {
  BlockDims d;
  d.C = hidden_size;
  d.I = intermediate_size;
  d.H = num_heads;
  d.Hkv = num_kv_heads;
  d.D = head_dim;
  d.eps = rms_norm_eps;
  d.qk_norm = qk_norm;
  d.rope = rotary_dims;
  if (layer < int64_t(sliding_layers.size()) && sliding_layers[size_t(layer)]) d.window = sliding_window;
  d.sinks = attn_sinks;
  d.act = ffn_act;
  d.scale = attn_scale;
  d.sandwich = sandwich_norms;
  d.out_gate = attn_out_gate;
  if (is_delta_layer(layer)) {
    d.attn = AttnKind::DeltaNet;
    d.delta = delta;
    d.out_gate = false;
  }
  if (is_mla()) {
    d.attn = AttnKind::Mla;
    d.Hkv = num_heads;
    d.D = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
    d.mla = {mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim,
             mla.rope_interleave, attention_scale()};
  }
  if (is_moe_layer(layer)) {
    d.moe.E = moe.num_experts;
    d.moe.K = moe.top_k;
    d.moe.I = moe.expert_intermediate;
    d.moe.Is = moe.shared_intermediate;
    d.moe.norm_topk = moe.norm_topk_prob;
    d.moe.routing = moe.routing;
    d.moe.groups = moe.n_group;
    d.moe.topk_groups = moe.topk_group;
    d.moe.scaling = moe.routed_scaling_factor;
    d.moe.shared_gate = moe.shared_gate;
    d.moe.expert_bias = moe.gpt_oss;
  }
  return d;
}

double ModelConfig::attention_scale() const {
  if (!is_mla()) return attn_scale;
  double scale = 1 / std::sqrt(double(mla.qk_nope_head_dim + mla.qk_rope_head_dim));
  const RopeScaling& r = rope_scaling;
  if (r.type == "yarn" && r.mscale_all_dim != 0 && r.factor > 1) {  // transformers' yarn_apply_mscale
    const double m = 0.1 * r.mscale_all_dim * std::log(r.factor) + 1;
    scale *= m * m;
  }
  return scale;
}

// The language model's fields: config.json itself, or a multimodal checkpoint's text_config (with the
// top-level tie_word_embeddings, which transformers ties by); the family's defaults where a field is absent.
static nlohmann::json text_fields(const nlohmann::json& top, const std::string& path, const ArchSpec& spec) {
  nlohmann::json j = top;
  if (spec.multimodal) {
    if (!top.contains("text_config") || !top["text_config"].is_object())
      bad_field(path, "text_config", "missing or not an object (" + std::string(spec.name) +
                                         " keeps its language model's fields there)");
    j = top["text_config"];
    if (top.contains("tie_word_embeddings")) j["tie_word_embeddings"] = top["tie_word_embeddings"];
  }
  if (spec.defaults) spec.defaults(j);
  return j;
}

static ModelConfig parse_checked(const nlohmann::json& top, const std::string& top_path) {
  if (!top.is_object()) fail(ErrorKind::InvalidInput, top_path + ": not a JSON object");
  ModelConfig c;
  if (!top.contains("architectures") || !top["architectures"].is_array() || top["architectures"].empty() ||
      !top["architectures"][0].is_string())
    bad_field(top_path, "architectures", "missing (expected e.g. [\"LlamaForCausalLM\"])");
  c.architecture = top["architectures"][0].get<std::string>();
  const ArchSpec* spec = find_arch(c.architecture);
  if (!spec)
    fail(ErrorKind::Unsupported, top_path + ": unknown architecture '" + printable(c.architecture) + "' (supported: " +
                                     supported_archs() + ")");
  c.multimodal = spec->multimodal;
  const nlohmann::json j = text_fields(top, top_path, *spec);
  const std::string path = spec->multimodal ? top_path + " text_config" : top_path;
  c.hidden_size = req_int(j, path, "hidden_size");
  c.intermediate_size = req_int(j, path, "intermediate_size");
  c.num_layers = req_int(j, path, "num_hidden_layers");
  c.num_heads = req_int(j, path, "num_attention_heads");
  c.num_kv_heads = opt_int(j, path, "num_key_value_heads", c.num_heads);
  c.vocab_size = req_int(j, path, "vocab_size");
  c.max_position_embeddings = opt_int(j, path, "max_position_embeddings", 2048);
  c.rms_norm_eps = opt_num(j, path, "rms_norm_eps", 1e-6);
  const JsonIn in(j, path);  // checked access: wrong types are refused naming the field
  c.tie_word_embeddings = in.boolean("tie_word_embeddings", false);
  c.bos_token_id = token_id(j, "bos_token_id");
  c.eos_token_id = token_id(j, "eos_token_id");
  if (c.num_heads % c.num_kv_heads)
    bad_field(path, "num_key_value_heads", std::to_string(c.num_kv_heads) + " does not divide num_attention_heads " +
                                               std::to_string(c.num_heads));
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = opt_int(j, path, "head_dim", 0);
  } else {
    if (c.hidden_size % c.num_heads)
      bad_field(path, "hidden_size", std::to_string(c.hidden_size) + " not divisible by num_attention_heads " +
                                         std::to_string(c.num_heads) + " and no head_dim given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2) bad_field(path, "head_dim", "must be even for rotary embeddings");
  const std::string act = in.str("hidden_act", std::string("silu"));
  if (in.boolean("mlp_bias", false)) bad_field(path, "mlp_bias", "true is not supported");
  parse_rope(j, path, c);
  if (top.contains("quantization_config") && top["quantization_config"].is_object())
    c.quant = parse_quant_config(JsonIn(top, top_path).at("quantization_config"), top_path);
  spec->configure(c, j, path);
  if (act != "silu" && c.ffn_act.kind != GateKind::GeluTanh)  // a family with another activation checks its own
    bad_field(path, "hidden_act", "'" + printable(act) + "' is not supported (only silu)");
  if (c.sliding_rope && (c.sliding_layers.empty() || c.sliding_rope->theta <= 0))
    bad_field(path, "rope_parameters", "per-layer-type RoPE parameters are not supported for " + c.architecture +
                                           " (expected rope_theta, rope_type)");
  if (c.quant.mxfp4_experts && !c.moe.gpt_oss)
    bad_field(path, "quantization_config.quant_method", "'mxfp4' is read for gpt-oss's experts only, not for " +
                                                            c.architecture);
  for (const auto* o : {&j, j.contains("rope_parameters") ? &j["rope_parameters"] : nullptr})  // an arch without
    if (o && o->is_object() && o->contains("partial_rotary_factor") && !c.rotary_dims &&  // partial RoPE
        (*o)["partial_rotary_factor"] != 1.0)
      bad_field(path, "partial_rotary_factor", "only 1.0 is supported for " + c.architecture);
  return c;
}

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& path) {
  try {
    ModelConfig c = parse_checked(j, path);
    check_config_limits(c, path);
    return c;
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
    fail(ErrorKind::InvalidInput, path + ": " + e.what());
  }
}

ModelConfig load_model_config(const std::string& config_json_path) {
  return parse_model_config(read_json_file(config_json_path), config_json_path);
}

}  // namespace ar
