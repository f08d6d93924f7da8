#include "pipeline/outputs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/printable.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "quant/gguf_scheme.h"
#include "io/mapped_file.h"
#include "model/dequant_float.h"
#include "pipeline/export_format.h"
#include "pipeline/float_export.h"

namespace ar {

namespace {
const char* const kFormats[] = {"auto_round", "auto_gptq", "auto_awq", "llm_compressor", "fake"};

// Values an fp16 output cannot hold are an error, not infinities.
void check_fp16_range(const Tensor& t, const std::string& what, const std::string& format, const std::string& hint) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::fabs(t.f32()[i]) > 65504.f)
      fail(ErrorKind::InvalidInput, what + " has a value beyond the fp16 range (" + std::to_string(t.f32()[i]) +
                                        ") that --format " + format + " would store in fp16" + hint);
}

// The blocks and the top-level modules outside the language model under transformers' module names
// ("model.language_model.layers"; "vision_tower", "multi_modal_projector" in either stored layout).
ConfigNames config_names(const HfModel& model) {
  ConfigNames c;
  c.layers = model.names().module("model.layers.");
  c.layers.pop_back();
  for (const std::string& name : model.foreign_names()) {
    std::string root = name.substr(name.rfind("model.", 0) == 0 ? 6 : 0);
    root = root.substr(0, root.find('.'));
    if (std::find(c.foreign.begin(), c.foreign.end(), root) == c.foreign.end()) c.foreign.push_back(root);
  }
  return c;
}

// AutoRound's choice: asymmetric 4-bit auto_round outputs use the AWQ layout.
bool awq_layout(const std::string& format, const quant::QuantFormat& f) {
  return format == "auto_awq" || (format == "auto_round" && !f.sym && f.bits == 4);
}

// What --layer_config may ask of these formats: per-Linear int formats where the outputs can say so
// (auto_round's extra_config, auto_gptq's dynamic, fake), 16-bit Linears everywhere.
void check_layer_config(const QuantizeOptions& opt, const std::vector<std::string>& formats) {
  for (const LayerConfigEntry& e : opt.layer_config.entries()) {
    if (e.keeps_fp()) continue;
    const std::string what = "--layer_config '" + printable(e.key) + "' (" + e.describe() + ")";
    if (opt.fmt.is_float())
      fail(ErrorKind::InvalidInput, what + ": per-layer formats are for the int schemes; under " +
                                        float_scheme_name(opt.fmt) + " an entry can only keep Linears in 16 bit");
    const quant::QuantFormat f = e.format(opt.fmt);
    if (f.bits == 8 && !f.sym)
      fail(ErrorKind::InvalidInput, what + ": 8-bit asymmetric weights load nowhere (vLLM's W8 GPTQ kernels are "
                                        "symmetric-only, Marlin has zero points at 4 bits only); use sym, or 7 or "
                                        "fewer bits");
    for (const auto& fm : formats) {
      if (quant::is_gguf_format(fm))
        fail(ErrorKind::InvalidInput, what + ": --format " + fm + " takes each tensor's type from the preset");
      const bool same = f.bits == opt.fmt.bits && f.group_size == opt.fmt.group_size && f.sym == opt.fmt.sym;
      if (awq_layout(fm, opt.fmt) && !same)
        fail(ErrorKind::InvalidInput, what + ": the AWQ layout of --format " + fm + " (" +
                                          (fm == "auto_awq" ? "" : "asymmetric 4-bit auto_round, ") +
                                          "one bits, group_size and zero point per file) holds no per-layer format");
    }
  }
}
}  // namespace

std::vector<std::string> parse_formats(const QuantizeOptions& opt) {
  std::vector<std::string> out;
  // An empty entry is a typo (a format left out), not something to skip silently.
  const std::string& spec = opt.format;
  if (!spec.empty() && (spec.front() == ',' || spec.back() == ',' || spec.find(",,") != std::string::npos))
    fail(ErrorKind::InvalidInput, "--format '" + spec + "' has an empty entry (formats are separated by single commas)");
  std::stringstream ss(spec);
  for (std::string f; std::getline(ss, f, ',');) {
    if (quant::is_gguf_format(f)) {
      quant::parse_gguf_scheme(f);  // a known preset
    } else if (std::find(std::begin(kFormats), std::end(kFormats), f) == std::end(kFormats))
      fail(ErrorKind::InvalidInput, "--format '" + f + "' is not supported (auto_round, auto_gptq, auto_awq, llm_compressor, fake, gguf:<preset>)");
    if (quant::is_gguf_format(f) && opt.fmt.is_float())
      fail(ErrorKind::InvalidInput, "--format " + f + " uses the GGUF preset's own types; it cannot be combined with " +
                                        float_scheme_name(opt.fmt) + " weights");
    if (!quant::is_gguf_format(f)) check_float_format(f, opt.fmt);
    if (std::find(out.begin(), out.end(), f) != out.end())
      fail(ErrorKind::InvalidInput, "--format lists '" + f + "' twice");
    if (f == "auto_awq" && opt.fmt.bits != 4)
      fail(ErrorKind::InvalidInput, "--format auto_awq needs --bits 4 (got " + std::to_string(opt.fmt.bits) + ")");
    out.push_back(f);
  }
  if (out.empty()) fail(ErrorKind::InvalidInput, "--format '" + opt.format + "' names no format");
  check_layer_config(opt, out);
  const auto gguf = std::find_if(out.begin(), out.end(), [](const std::string& f) { return quant::is_gguf_format(f); });
  if (gguf != out.end())
    for (auto f = gguf + 1; f != out.end(); ++f)
      if (quant::is_gguf_format(*f))
        fail(ErrorKind::InvalidInput, "--format lists two GGUF presets (" + *gguf + ", " + *f +
                                          "): one GGUF output per run");
  return out;
}

FormatPlan plan_formats(const QuantizeOptions& opt) {
  FormatPlan p;
  const std::vector<std::string> all = parse_formats(opt);
  const bool any_int = std::any_of(all.begin(), all.end(), [](const std::string& f) {
    return f != "fake" && !quant::is_gguf_format(f);
  });
  for (const auto& f : all)
    if (quant::is_gguf_format(f)) p.gguf = f;
    else if (f == "fake" && !any_int && std::any_of(all.begin(), all.end(), quant::is_gguf_format)) p.gguf_fake = true;
    else p.int_formats.push_back(f);
  p.several = all.size() > 1;
  return p;
}

std::string format_subdir(const std::string& format) {
  std::string s = format;
  for (char& c : s)
    if (c == '_' || c == ':') c = '-';
  return s;
}

OutputSet::OutputSet(const QuantizeOptions& opt, const std::string& root, uint64_t shard_bytes, const HfModel& model)
    : model_(model), sym_(opt.fmt.sym), bits_(opt.fmt.bits), group_(opt.fmt.group_size), opt_fmt_(opt.fmt),
      rules_(LayerRules::of(opt)) {
  const FormatPlan plan = plan_formats(opt);
  for (const auto& f : plan.int_formats) {
    Sink s;
    s.format = f;
    s.dir = plan.several ? root + "/" + format_subdir(f) : root;
    std::filesystem::create_directories(s.dir);
    s.flt = opt.fmt.is_float();
    s.awq = !s.flt && awq_layout(f, opt.fmt);
    s.gptq = f == "auto_gptq";
    s.fp16 = s.awq || s.gptq;  // GPTQ and AWQ kernels run in fp16: those outputs are fp16 throughout
    s.writer = std::make_unique<ShardWriter>(s.dir, shard_bytes, [names = model.names()](const std::string& n) {
      return names.stored(n);
    });
    sinks_.push_back(std::move(s));
  }
}

// A plain (fake) model is read by transformers' own loader, which fuses a Mixtral checkpoint's experts
// from their original spelling (block_sparse_moe.experts.E.w1/w3/w2); the packed formats keep AutoRound's
// gate_proj/up_proj/down_proj, which transformers + auto-round reads.
std::string OutputSet::Sink::tensor_name(const std::string& name) const {
  if (format != "fake" || name.find(".block_sparse_moe.experts.") == std::string::npos) return name;
  for (auto [from, to] : {std::pair{".gate_proj.", ".w1."}, {".up_proj.", ".w3."}, {".down_proj.", ".w2."}})
    if (const size_t at = name.rfind(from); at != std::string::npos)
      return name.substr(0, at) + to + name.substr(at + std::string(from).size());
  return name;
}

void OutputSet::copy_tensor(const HfModel& m, const std::string& name, Context& ctx, const std::string& out_name) {
  const std::string& out = out_name.empty() ? name : out_name;
  const uint8_t* bytes = nullptr;
  const StTensorInfo& info = m.raw_info(name, &bytes);
  switch (fp8_part(m, name)) {  // an FP8 source: its Linears are written in 16 bit, without their scales
    case Fp8Part::Scale: return;
    case Fp8Part::Weight: return add_tensor(ctx, out, m.load(name, info.shape, ctx), DType::BF16);
    case Fp8Part::None: break;
  }
  Tensor half;  // converted once, shared by every fp16 output
  for (auto& s : sinks_) {
    if (!s.fp16 || (info.dtype != DType::BF16 && info.dtype != DType::F32)) {
      s.writer->add_raw(s.tensor_name(out), info.dtype, info.shape, bytes, info.end - info.begin);
      continue;
    }
    if (!half.defined()) {
      Tensor t = m.load(name, {}, ctx);
      check_fp16_range(t, m.dir() + ": tensor '" + name + "'", s.format, "; use the auto_round format");
      half = t.to(DType::F16, ctx);
    }
    s.writer->add(s.tensor_name(out), half);
  }
}

void OutputSet::add_tensor(Context& ctx, const std::string& name, const Tensor& t, DType dtype) {
  for (auto& s : sinks_) {
    const DType d = s.fp16 ? DType::F16 : dtype;
    if (d == DType::F16) check_fp16_range(t, "tensor '" + name + "'", s.format, "");
    s.writer->add(s.tensor_name(name), t.to(d, ctx));
  }
}

void OutputSet::add_linear(Context& ctx, const std::string& name, const quant::TunedLinear& L, bool lm_head) {
  const std::string layers = "model.layers.";
  std::string in_block;  // "model.layers.3.mlp.down_proj" -> "mlp.down_proj"
  if (name.rfind(layers, 0) == 0)
    if (size_t dot = name.find('.', layers.size()); dot != std::string::npos) in_block = name.substr(dot + 1);
  for (auto& s : sinks_) {
    if (!in_block.empty()) s.in_block.insert(in_block);
    if (s.format == "fake") {
      s.writer->add(s.tensor_name(name + ".weight"), L.weight->to(DType::F16, ctx));
      continue;
    }
    if (L.fp) {
      pack_float_linear(ctx, *s.writer, name, L, /*flat_channel_scale=*/s.format == "auto_round");
      if (lm_head && s.format == "auto_round")  // outside the blocks: listed, as for the int schemes
        s.extra[name] = {{"bits", bits_}, {"group_size", group_}, {"data_type", float_data_type(opt_fmt_)}};
      continue;
    }
    // The packing format is the file's (auto_round:auto_gptq stores zp - 1 for every Linear); the
    // codes are each Linear's own (its --layer_config sym).
    pack_linear(ctx, *s.writer, name, L, L.shape.sym, !s.awq && (s.gptq || sym_), s.gptq, s.awq);
    const quant::QuantFormat f = layer_choice(name, L.shape.out, L.shape.in, rules_).fmt;
    if (lm_head && !s.gptq) {
      s.extra[name] = {{"bits", f.bits}, {"group_size", f.group_size}, {"sym", f.sym}, {"data_type", "int"}};
      continue;
    }
    // A Linear of its own --layer_config format: the keys that differ from the global config, as
    // AutoRound writes them (auto_gptq: bits, group_size and sym, its `dynamic` override's keys).
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    if (f.bits != bits_ || s.gptq) e["bits"] = f.bits;
    if (f.group_size != group_ || s.gptq) e["group_size"] = f.group_size;
    if (f.sym != sym_ || s.gptq) e["sym"] = f.sym;
    if (f.bits != bits_ || f.group_size != group_ || f.sym != sym_) s.extra[name] = e;
  }
}

void OutputSet::copy_foreign(Context& ctx) {
  for (const std::string& name : model_.foreign_names()) copy_tensor(model_, name, ctx);
}

// A 16-bit layer's extra_config entry holds the keys where it differs from the global config, as
// AutoRound 0.16.1 writes them: {bits 16, data_type "fp"} under the int schemes; under the float ones
// data_type and act_data_type "float", plus act_bits 16 where the global act_bits is not (FP8_STATIC).
void OutputSet::keep_fp(const std::string& name) {
  for (auto& s : sinks_) {
    if (!s.flt) {
      s.extra[name] = {{"bits", 16}, {"data_type", "fp"}};
      continue;
    }
    nlohmann::ordered_json e;
    if (opt_fmt_.act_static()) e["act_bits"] = 16;
    e["act_data_type"] = "float";
    e["bits"] = 16;
    e["data_type"] = "float";
    s.extra[name] = e;
  }
}

void OutputSet::finish(const QuantizeOptions& opt, int64_t seqlen, bool lm_head_q, const std::string& gguf_preset) {
  for (auto& s : sinks_) {
    s.writer->finish();
    QuantizeOptions fo = opt;
    fo.format = s.format;
    fo.calib.seqlen = seqlen;
    const ConfigNames names = config_names(model_);
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (auto it = s.extra.begin(); it != s.extra.end(); ++it) extra[model_.names().module(it.key())] = it.value();
    nlohmann::ordered_json q = s.flt ? float_quantization_config(fo, lm_head_q, extra, names)
                                     : quantization_config(fo, s.awq, lm_head_q, extra, s.in_block, names);
    if (!gguf_preset.empty()) {  // the weights of a GGUF file: its types vary per tensor
      for (const char* k : {"bits", "group_size", "sym", "extra_config"}) q.erase(k);
      q["data_type"] = "gguf:" + gguf_preset;
    }
    nlohmann::ordered_json config = nlohmann::ordered_json::parse(read_text_file(opt.model_dir + "/config.json"));
    if (s.format != "fake") config["quantization_config"] = q;
    else config.erase("quantization_config");  // dense weights (an FP8 source's config no longer applies)
    if (s.fp16) {
      if (config.contains("dtype")) config["dtype"] = "float16";  // transformers >= 5 spelling
      if (config.contains("torch_dtype") || !config.contains("dtype")) config["torch_dtype"] = "float16";
    }
    write_file_atomic(s.dir + "/config.json", config.dump(2) + "\n");
    write_file_atomic(s.dir + "/quantization_config.json", q.dump(2) + "\n");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                          "merges.txt", "tokenizer.model", "tokenizer.bin", "added_tokens.json",
                          "generation_config.json", "chat_template.jinja", "chat_template.json",
                          "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json"})
      if (file_exists(opt.model_dir + "/" + f)) write_file_atomic(s.dir + "/" + f, read_text_file(opt.model_dir + "/" + f));
  }
}

std::vector<ResumeOutput> OutputSet::resume_outputs() {
  std::vector<ResumeOutput> out;
  for (auto& s : sinks_) out.push_back({s.writer.get(), &s.extra});
  return out;
}

void OutputSet::keep_files() {
  for (auto& s : sinks_) s.writer->keep_files();
}

}  // namespace ar
