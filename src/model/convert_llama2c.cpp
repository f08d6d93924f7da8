#include "model/convert_llama2c.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"
#include "io/atomic_file.h"
#include "io/llama2c.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/tokenizer_llama2c.h"

namespace ar {

namespace {
// Tensor from a slice of a llama2.c array, optionally with the per-head rotary row permutation.
Tensor slice(Context& ctx, const std::vector<float>& src, size_t offset, Shape shape, DType dtype, int64_t head_dim) {
  Tensor t = Tensor::empty(shape, DType::F32, ctx);
  const float* s = src.data() + offset;
  float* d = t.f32();
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t from = r;
    if (head_dim > 0) {
      int64_t h = r / head_dim, i = r % head_dim, half = head_dim / 2;
      from = h * head_dim + (i < half ? 2 * i : 2 * (i - half) + 1);
    }
    std::copy(s + from * cols, s + (from + 1) * cols, d + r * cols);
  }
  return dtype == DType::F32 ? t : t.to(dtype, ctx);
}
}  // namespace

void convert_llama2c(const ConvertOptions& opt) {
  OutputSpec spec;
  spec.path = opt.out_dir;
  spec.flag = "--out";
  spec.overwrite = opt.overwrite;
  spec.inputs = {opt.checkpoint, opt.tokenizer};
  spec.kind = "convert";
  check_output_dir(spec);  // before any work
  Llama2cCheckpoint c = read_llama2c(opt.checkpoint);
  Llama2cTokenizer tok = Llama2cTokenizer::load(opt.tokenizer);  // validates the tokenizer file
  if (tok.vocab_size() != c.vocab_size)
    fail(ErrorKind::InvalidInput, opt.tokenizer + ": " + std::to_string(tok.vocab_size()) +
                                      " tokens but the checkpoint has vocab_size " + std::to_string(c.vocab_size));
  Context ctx(Device{}, 1);
  const int64_t D = c.dim / c.n_heads, dim = c.dim, hid = c.hidden_dim, kv = D * c.n_kv_heads, V = c.vocab_size;
  std::vector<StEntry> t;
  t.push_back({"model.embed_tokens.weight", slice(ctx, c.token_embedding, 0, {V, dim}, opt.dtype, 0)});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const size_t L = size_t(l);
    t.push_back({p + "input_layernorm.weight", slice(ctx, c.rms_att, L * dim, {dim}, opt.dtype, 0)});
    t.push_back({p + "self_attn.q_proj.weight", slice(ctx, c.wq, L * dim * dim, {dim, dim}, opt.dtype, D)});
    t.push_back({p + "self_attn.k_proj.weight", slice(ctx, c.wk, L * kv * dim, {kv, dim}, opt.dtype, D)});
    t.push_back({p + "self_attn.v_proj.weight", slice(ctx, c.wv, L * kv * dim, {kv, dim}, opt.dtype, 0)});
    t.push_back({p + "self_attn.o_proj.weight", slice(ctx, c.wo, L * dim * dim, {dim, dim}, opt.dtype, 0)});
    t.push_back({p + "post_attention_layernorm.weight", slice(ctx, c.rms_ffn, L * dim, {dim}, opt.dtype, 0)});
    t.push_back({p + "mlp.gate_proj.weight", slice(ctx, c.w1, L * hid * dim, {hid, dim}, opt.dtype, 0)});
    t.push_back({p + "mlp.down_proj.weight", slice(ctx, c.w2, L * dim * hid, {dim, hid}, opt.dtype, 0)});
    t.push_back({p + "mlp.up_proj.weight", slice(ctx, c.w3, L * hid * dim, {hid, dim}, opt.dtype, 0)});
  }
  t.push_back({"model.norm.weight", slice(ctx, c.rms_final, 0, {dim}, opt.dtype, 0)});
  if (!c.shared_classifier) t.push_back({"lm_head.weight", slice(ctx, c.wcls, 0, {V, dim}, opt.dtype, 0)});

  nlohmann::ordered_json cfg;
  cfg["architectures"] = {"LlamaForCausalLM"};
  cfg["model_type"] = "llama";
  cfg["hidden_size"] = dim;
  cfg["intermediate_size"] = hid;
  cfg["num_hidden_layers"] = c.n_layers;
  cfg["num_attention_heads"] = c.n_heads;
  cfg["num_key_value_heads"] = c.n_kv_heads;
  cfg["head_dim"] = D;
  cfg["vocab_size"] = V;
  cfg["max_position_embeddings"] = c.seq_len;
  cfg["rms_norm_eps"] = 1e-5;
  cfg["rope_theta"] = 10000.0;
  cfg["hidden_act"] = "silu";
  cfg["tie_word_embeddings"] = c.shared_classifier;
  cfg["attention_bias"] = false;
  cfg["mlp_bias"] = false;
  cfg["bos_token_id"] = tok.bos();
  cfg["eos_token_id"] = tok.eos();
  cfg["torch_dtype"] = opt.dtype == DType::F32 ? "float32" : opt.dtype == DType::BF16 ? "bfloat16" : "float16";

  nlohmann::ordered_json tcfg;
  tcfg["tokenizer_class"] = "LlamaTokenizer";
  tcfg["bos_token"] = "<s>";
  tcfg["eos_token"] = "</s>";
  tcfg["unk_token"] = "<unk>";
  tcfg["add_bos_token"] = true;
  tcfg["add_eos_token"] = false;

  AtomicDir out(spec);
  write_file_atomic(out.file("config.json"), cfg.dump(2) + "\n");
  write_file_atomic(out.file("tokenizer_config.json"), tcfg.dump(2) + "\n");
  write_safetensors(out.file("model.safetensors"), t, {{"format", "pt"}});
  write_file_atomic(out.file("tokenizer.bin"), read_text_file(opt.tokenizer));
  write_file_atomic(out.file("tokenizer.json"), llama2c_tokenizer_json(tok));  // transformers needs no extra package
  // A SentencePiece model next to the llama2.c tokenizer (same stem, .model) travels along for HF tools.
  std::filesystem::path spm = std::filesystem::path(opt.tokenizer).replace_extension(".model");
  if (file_exists(spm.string())) write_file_atomic(out.file("tokenizer.model"), read_text_file(spm.string()));
  out.commit();
}

}  // namespace ar
