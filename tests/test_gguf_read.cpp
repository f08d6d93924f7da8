// GGUF files read back as models (model/gguf_source.h): llama.cpp's stories260K.gguf evaluates and
// generates exactly as the model converted from llama2.c; files written by `--format gguf:<preset>
// --iters 0` hold exactly the round-to-nearest weights we computed (every tensor decodes bit for bit to
// gguf_quantize_rtn's dequantized output, the llama Q/K rows back in HF order) and their logits match the
// source model's; bad files fail with one clear error naming the file and tensor; eval, generate and
// logits take a .gguf for --model.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "eval/generate.h"
#include "eval/perplexity.h"
#include "export/gguf_model.h"
#include "io/gguf.h"
#include "io/mapped_file.h"
#include "model/convert_llama2c.h"
#include "model/gguf_source.h"
#include "model/loader.h"
#include "model/synthetic.h"
#include "model/tokenizer/tokenizer.h"
#include "model/transformer.h"
#include "pipeline/quantize.h"
#include "quant/ggml_types.h"
#include "quant/gguf_rtn.h"
#include "test_util.h"
#include "stories260k_model.h"

using namespace ar;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) { return read_text_file(path); }  // any bytes
void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// `quantize --format <format> --iters 0` (plain round-to-nearest) of `model` into `out`; the .gguf path.
std::string write_gguf(const std::string& model, const std::string& out, const std::string& format) {
  QuantizeOptions o;
  o.model_dir = model;
  o.output_dir = out;
  o.format = format;
  o.tune.iters = 0;
  o.disable_opt_rtn = true;  // plain RTN: what gguf_quantize_rtn computes
  o.calib.nsamples = 2;
  o.calib.seqlen = 16;
  o.threads = 2;
  quantize_model(o);
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".gguf") return e.path().string();
  ADD_FAILURE() << "no .gguf in " << out;
  return "";
}

nlohmann::json config_of(const std::string& arch, int64_t hidden, int64_t inter, int64_t vocab, bool tied) {
  nlohmann::json c = tiny_llama_config(2);
  c["architectures"] = {arch};
  c["hidden_size"] = hidden;
  c["intermediate_size"] = inter;
  c["vocab_size"] = vocab;
  c["tie_word_embeddings"] = tied;
  return c;
}

// Every tensor the model reads: the GGUF model's fp32 copy equals, bit for bit, the dequantized output of
// gguf_quantize_rtn of the source weight in the type the file stores it in (1-D tensors: f32, unchanged).
// Returns the number of tensors per ggml type name.
std::map<std::string, int> expect_file_holds_rtn(const HfModel& src, const HfModel& gg, const std::string& gguf_path) {
  std::map<std::string, int> types;
  const GgufFile g = GgufFile::open(gguf_path);
  std::map<std::string, uint32_t> type_of;
  for (const auto& t : g.tensors) type_of[t.name] = t.type;
  const ModelConfig& c = src.config();
  std::vector<std::string> names = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!c.tie_word_embeddings) names.push_back("lm_head.weight");
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const char* t : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                          "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                          "self_attn.v_proj.bias", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                          "self_attn.o_proj.weight", "self_attn.o_proj.bias", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight",
                          "mlp.up_proj.weight", "mlp.down_proj.weight"})
      if (src.has(HfModel::layer_prefix(l) + t)) names.push_back(HfModel::layer_prefix(l) + t);
  Context ctx(Device{}, 2);
  for (const auto& n : names) {
    EXPECT_TRUE(gg.has(n)) << n;
    Tensor a = src.load(n, {}, ctx), b = gg.load(n, a.shape(), ctx);
    const auto type = quant::GgmlType(type_of.at(gguf_tensor_name(n, c)));
    types[quant::ggml_type_name(type)]++;
    std::vector<float> want(size_t(a.numel()));
    if (a.shape().size() == 1) {
      EXPECT_EQ(type, quant::GgmlType::F32) << n;
      std::memcpy(want.data(), a.f32(), want.size() * 4);
    } else {
      quant::gguf_quantize_rtn(ctx, type, a.f32(), a.dim(0), a.dim(1), want.data());
    }
    for (size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(&want[i], b.f32() + i, 4) != 0) {
        ADD_FAILURE() << n << " (" << quant::ggml_type_name(type) << ") element " << i << ": " << b.f32()[i]
                      << " != " << want[i];
        break;
      }
  }
  return types;
}

// Logits of both models on the same ids: the relative L2 error and the largest absolute difference.
std::pair<double, double> logits_diff(const HfModel& a, const HfModel& b, const std::vector<int32_t>& ids) {
  Context ctx(Device{}, 2);
  Transformer ta(a, ctx, false), tb(b, ctx, false);
  Tensor la = ta.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
  Tensor lb = tb.forward_logits(ids.data(), nullptr, 1, int64_t(ids.size()));
  double mx = 0;
  for (int64_t i = 0; i < la.numel(); ++i) mx = std::max(mx, double(std::abs(la.f32()[i] - lb.f32()[i])));
  return {test::rel_err(lb.f32(), la.f32(), size_t(la.numel())), mx};
}

std::vector<int32_t> some_ids(int64_t vocab, size_t n) {
  std::vector<int32_t> ids = {1};
  for (size_t i = 1; i < n; ++i) ids.push_back(int32_t((i * 7919 + 13) % size_t(vocab)));
  return ids;
}

struct Converted {
  std::string dir;
  Converted() {
    const std::string fx = test::fixtures_dir();
    dir = test::temp_path("gguf_read_s260");
    test::convert_stories260k(fx, dir);
  }
  ~Converted() { fs::remove_all(dir); }
};
const Converted& converted() {
  static Converted c;
  return c;
}

std::string gen(Transformer& t, const Tokenizer& tok, const std::string& prompt, int64_t n) {
  return tok.decode(generate_greedy(t, tok.encode(prompt), n));
}

}  // namespace

TEST(GgufRead, Stories260KMatchesTheConvertedLlama2cModel) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string path = fx + "/stories260K/stories260K.gguf", e = fx + "/stories260K/expected/";
  auto gm = open_gguf_model(path);
  auto hm = HfModel::open(converted().dir);
  const ModelConfig &a = gm->config(), &b = hm->config();
  EXPECT_EQ(a.architecture, "LlamaForCausalLM");
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.rms_norm_eps, 1e-5);  // the f32 key at its shortest decimal
  EXPECT_EQ(a.rope_theta, 10000.0);
  EXPECT_EQ(a.max_position_embeddings, 2048);
  EXPECT_FALSE(a.tie_word_embeddings);  // output.weight is a separate copy in this file
  // The weights are the llama2.c tensors; Q/K come back in HF order, as convert_llama2c writes them.
  Context ctx(Device{}, 2);
  for (int64_t l = 0; l < a.num_layers; ++l) {
    BlockWeights x = gm->load_block(l, ctx), y = hm->load_block(l, ctx);
    for (auto [p, q] : {std::pair{&x.wq, &y.wq}, {&x.wk, &y.wk}, {&x.wv, &y.wv}, {&x.wo, &y.wo}, {&x.wd, &y.wd}})
      ASSERT_EQ(std::memcmp(p->raw(), q->raw(), p->nbytes()), 0) << "layer " << l;
  }
  // Tokenizer from the GGUF vocabulary = llama2.c's.
  auto gt = load_tokenizer(*gm), ht = load_tokenizer(*hm);
  const std::string text = read_text_file(fx + "/text/tinystories/tinystories_sample.txt").substr(0, 12000);
  const auto ids = ht->encode(text);
  EXPECT_EQ(gt->encode(text), ids);
  EXPECT_EQ(gt->encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  // Logits, perplexity and greedy generation.
  auto [rel, mx] = logits_diff(*hm, *gm, std::vector<int32_t>(ids.begin(), ids.begin() + 200));
  EXPECT_EQ(mx, 0.0) << "relative " << rel;
  Transformer tg(*gm, ctx, false), th(*hm, ctx, false);
  const PplResult pg = perplexity(tg, ids, 256, gt->bos(), 2), ph = perplexity(th, ids, 256, ht->bos(), 2);
  EXPECT_EQ(pg.tokens_scored, ph.tokens_scored);
  EXPECT_NEAR(pg.ppl, ph.ppl, 1e-9 * ph.ppl) << pg.ppl << " vs " << ph.ppl;
  std::printf("stories260K.gguf: ppl %.6f (converted %.6f) over %lld tokens; logits max |diff| %g\n", pg.ppl, ph.ppl,
              (long long)pg.tokens_scored, mx);
  Transformer tr(*gm, ctx, true);
  EXPECT_EQ(gen(tr, *gt, "", 200), read_text_file(e + "llama2c_test_all_expected_stdout.txt"));
  EXPECT_EQ(gen(tr, *gt, "Once upon a time", 60), read_text_file(e + "prompt_once_upon_a_time_64steps.txt"));
}

// gguf:f16 of llama (Q/K permuted in the file; again with attention_bias and tied embeddings: the q/k
// biases permuted too, an o bias), qwen2 (q/k/v biases) and qwen3 (q/k norms, head_dim 32 != hidden /
// heads, tied embeddings): the file holds the fp16-rounded weights and f32 1-D tensors;
// the logits agree with the source model's within fp16 rounding of the weights.
TEST(GgufRead, F16FilesOfEachArchitectureLoadBack) {
  struct Case { const char* arch; bool tied; int64_t head_dim; bool bias; };
  for (const Case& k : {Case{"LlamaForCausalLM", false, 0, false}, Case{"LlamaForCausalLM", true, 0, true},
                        Case{"Qwen2ForCausalLM", false, 0, false}, Case{"Qwen3ForCausalLM", true, 32, false}}) {
    SCOPED_TRACE(std::string(k.arch) + (k.bias ? " with attention_bias" : ""));
    const std::string m = test::temp_path(std::string("ggr_m_") + k.arch), q = test::temp_path(std::string("ggr_q_") + k.arch);
    nlohmann::json c = config_of(k.arch, 64, 128, 300, k.tied);
    if (k.head_dim) c["head_dim"] = k.head_dim;
    if (k.bias) c["attention_bias"] = true;  // llama: q/k biases permuted like their rows, o bias too
    write_synthetic_model(m, c, 11);
    const std::string path = write_gguf(m, q, "gguf:f16");
    auto src = HfModel::open(m);
    auto gg = open_model(path);
    const ModelConfig& a = gg->config();
    EXPECT_EQ(a.architecture, k.arch);
    EXPECT_EQ(a.tie_word_embeddings, k.tied);
    EXPECT_EQ(a.qkv_bias, src->config().qkv_bias);
    EXPECT_EQ(a.o_bias, src->config().o_bias);
    EXPECT_EQ(a.qk_norm, src->config().qk_norm);
    EXPECT_EQ(a.head_dim, src->config().head_dim);
    EXPECT_EQ(a.vocab_size, 300);
    EXPECT_EQ(a.rms_norm_eps, 1e-5);
    auto types = expect_file_holds_rtn(*src, *gg, path);
    EXPECT_GT(types["f16"], 0);
    auto [rel, mx] = logits_diff(*src, *gg, some_ids(300, 48));
    std::printf("%s%s gguf:f16: logits relative L2 error %.3g, max |diff| %.3g\n", k.arch, k.bias ? " (bias)" : "", rel,
                mx);
    EXPECT_LT(rel, 2e-3);  // fp16 weights: ~2^-11 relative per weight
    auto tok = load_tokenizer(*gg);
    EXPECT_EQ(tok->vocab_size(), 300);
    fs::remove_all(m);
    fs::remove_all(q);
  }
}

// q8_0 and q4_k_m on a model whose rows are multiples of 256 (k-quants used, not their fallbacks): the
// file decodes bit for bit to gguf_quantize_rtn's dequantized weights.
TEST(GgufRead, QuantizedFilesHoldExactlyTheRoundToNearestWeights) {
  const std::string m = test::temp_path("ggr_qm");
  write_synthetic_model(m, config_of("LlamaForCausalLM", 256, 512, 320, false), 12);
  auto src = HfModel::open(m);
  for (const char* fmt : {"gguf:q8_0", "gguf:q4_k_m"}) {
    SCOPED_TRACE(fmt);
    const std::string q = test::temp_path(std::string("ggr_qq_") + (fmt + 5));
    const std::string path = write_gguf(m, q, fmt);
    auto gg = open_gguf_model(path);
    auto types = expect_file_holds_rtn(*src, *gg, path);
    std::string seen;
    for (const auto& [t, n] : types) seen += t + ":" + std::to_string(n) + " ";
    auto [rel, mx] = logits_diff(*src, *gg, some_ids(320, 48));
    std::printf("%s types %s; logits relative L2 error %.3g, max |diff| %.3g\n", fmt, seen.c_str(), rel, mx);
    if (std::string(fmt) == "gguf:q8_0") {
      EXPECT_GT(types["q8_0"], 0) << seen;
      EXPECT_LT(rel, 0.05);  // random weights amplify the rounding; the weights themselves are exact above
    } else {
      EXPECT_GT(types["q4_k"], 0) << seen;
      EXPECT_GT(types["q6_k"], 0) << seen;
      EXPECT_LT(rel, 0.5);
    }
    fs::remove_all(q);
  }
  fs::remove_all(m);
}

namespace {
// A small valid file (llama, f16) shared by the bad-file cases; `bytes` is its content.
struct SmallFile {
  std::string dir, path, bytes;
  SmallFile() {
    dir = test::temp_path("ggr_bad");
    write_synthetic_model(dir + "/m", tiny_llama_config(2), 13);
    path = write_gguf(dir + "/m", dir + "/q", "gguf:f16");
    bytes = slurp(path);
  }
  ~SmallFile() { fs::remove_all(dir); }
};
const SmallFile& small() {
  static SmallFile s;
  return s;
}

// Byte positions of a tensor info's fields: u64 length + name, u32 n_dims, dims (u64 each), u32 type, u64 offset.
struct InfoAt { size_t name, dims, type, offset; };
InfoAt find_info(const std::string& bytes, const std::string& name) {
  std::string key(8, '\0');
  const uint64_t n = name.size();
  std::memcpy(key.data(), &n, 8);
  key += name;
  const size_t p = bytes.find(key);
  EXPECT_NE(p, std::string::npos) << name;
  InfoAt r;
  r.name = p + 8;
  uint32_t nd;
  std::memcpy(&nd, bytes.data() + p + key.size(), 4);
  r.dims = p + key.size() + 4;
  r.type = r.dims + 8 * nd;
  r.offset = r.type + 4;
  return r;
}
template <class T>
void put(std::string& bytes, size_t at, T v) { std::memcpy(bytes.data() + at, &v, sizeof v); }
template <class T>
T get(const std::string& bytes, size_t at) { T v; std::memcpy(&v, bytes.data() + at, sizeof v); return v; }

// Opening (and, with `load`, running) the file fails with one error of `kind` naming the file and `what`.
void expect_refused(const std::string& bytes, ErrorKind kind, const std::vector<std::string>& what, bool load = false) {
  const std::string path = small().dir + "/bad.gguf";
  spit(path, bytes);
  try {
    auto m = open_model(path);
    if (load) {
      Context ctx(Device{}, 1);
      Transformer t(*m, ctx, true);
    }
    ADD_FAILURE() << "accepted; expected an error naming " << what[0];
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& w : what) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    std::printf("refused: %s\n", msg.c_str());
  }
}
}  // namespace

TEST(GgufRead, BadFilesAreRefusedWithOneClearError) {
  const std::string& good = small().bytes;
  ASSERT_NO_THROW(open_gguf_model(small().path));
  {  // truncated data section: the last tensor (output.weight) ends past the file
    expect_refused(good.substr(0, good.size() - 100), ErrorKind::InvalidInput, {"'output.weight'", "end past the file"});
  }
  {  // truncated inside the tensor infos
    expect_refused(good.substr(0, find_info(good, "blk.1.ffn_up.weight").type), ErrorKind::InvalidInput,
                   {"truncated GGUF"});
  }
  {  // a tensor offset past the end, and one that would overflow 64 bits
    for (uint64_t off : {uint64_t(1) << 40, ~uint64_t(31)}) {
      std::string b = good;
      put(b, find_info(b, "blk.0.attn_q.weight").offset, off);
      expect_refused(b, ErrorKind::InvalidInput, {"'blk.0.attn_q.weight'", "end past the file"});
    }
  }
  {  // an offset off the alignment
    std::string b = good;
    const size_t at = find_info(b, "blk.0.attn_k.weight").offset;
    put(b, at, get<uint64_t>(b, at) + 2);
    expect_refused(b, ErrorKind::InvalidInput, {"'blk.0.attn_k.weight'", "alignment"});
  }
  {  // an unknown tensor type (16 = IQ2_XXS)
    std::string b = good;
    put(b, find_info(b, "blk.0.ffn_up.weight").type, uint32_t(16));
    expect_refused(b, ErrorKind::Unsupported, {"'blk.0.ffn_up.weight'", "ggml type 16"});
  }
  {  // a missing tensor (renamed)
    std::string b = good;
    b[find_info(b, "blk.1.ffn_up.weight").name + 11] = 'q';  // blk.1.ffn_uq.weight
    expect_refused(b, ErrorKind::InvalidInput, {"'blk.1.ffn_up.weight' is missing"});
  }
  {  // wrong dims: attn_k with twice its rows
    std::string b = good;
    const size_t at = find_info(b, "blk.0.attn_k.weight").dims + 8;
    put(b, at, get<uint64_t>(b, at) * 2);
    expect_refused(b, ErrorKind::InvalidInput, {"'blk.0.attn_k.weight'", "ggml dims [64, 64]", "imply [64, 32]"});
  }
  {  // a row length the type's blocks do not divide: f16 -> q8_0 on rows of 64 is fine, q4_k (256) is not
    std::string b = good;
    put(b, find_info(b, "blk.0.attn_v.weight").type, uint32_t(12));
    expect_refused(b, ErrorKind::InvalidInput, {"'blk.0.attn_v.weight'", "not a multiple of its block of 256"});
  }
  {  // a tensor the model does not read: without output.weight the embeddings are tied, Output.weight is left
    std::string b = good;
    b[find_info(b, "output.weight").name] = 'O';
    expect_refused(b, ErrorKind::Unsupported, {"'Output.weight' is not part of"});
  }
  {  // an unsupported architecture
    std::string b = good;
    const std::string key = "general.architecture";
    const size_t at = b.find(key) + key.size() + 4 + 8;  // type u32, length u64, then "llama"
    ASSERT_EQ(b.substr(at, 5), "llama");
    b.replace(at, 5, "gemma");
    expect_refused(b, ErrorKind::Unsupported, {"GGUF architecture 'gemma'"});
  }
  {  // a missing hyperparameter
    std::string b = good;
    const size_t at = b.find("llama.block_count");
    b[at + 6] = 'B';
    expect_refused(b, ErrorKind::InvalidInput, {"key 'llama.block_count' is missing"});
  }
  {  // a NaN in a norm weight: found when the tensor is loaded
    std::string b = good;
    const GgufFile g = GgufFile::open(small().path);
    for (const auto& t : g.tensors)
      if (t.name == "output_norm.weight") put(b, size_t(g.data_start + t.offset + 8), std::nanf(""));
    expect_refused(b, ErrorKind::InvalidInput, {"'output_norm.weight'", "non-finite value nan at element 2"}, true);
  }
}

namespace {
// Byte position of a metadata key's value (after its length-prefixed name and u32 type); `type` gets the type.
size_t kv_value_at(const std::string& bytes, const std::string& key, uint32_t* type) {
  std::string k(8, '\0');
  const uint64_t n = key.size();
  std::memcpy(k.data(), &n, 8);
  k += key;
  const size_t p = bytes.find(k);
  EXPECT_NE(p, std::string::npos) << key;
  *type = get<uint32_t>(bytes, p + k.size());
  return p + k.size() + 4;
}
}  // namespace

// Rules the safetensors reader already had, for GGUF: no two tensors share bytes, no metadata key twice,
// every special-token id inside the vocabulary.
TEST(GgufRead, OverlapsDuplicateKeysAndSpecialIdsOutsideTheVocabularyAreRefused) {
  const std::string& good = small().bytes;
  const GgufFile g = GgufFile::open(small().path);
  {  // a projection aliasing the embeddings
    std::string b = good;
    put(b, find_info(b, "blk.0.attn_q.weight").offset, get<uint64_t>(b, find_info(b, "token_embd.weight").offset));
    expect_refused(b, ErrorKind::InvalidInput, {"'blk.0.attn_q.weight' and 'token_embd.weight' overlap"});
  }
  {  // every tensor at offset 0
    std::string b = good;
    for (const auto& t : g.tensors) put(b, find_info(b, t.name).offset, uint64_t(0));
    expect_refused(b, ErrorKind::InvalidInput, {"overlap (data bytes 0 <"});
  }
  {  // a metadata key given twice (before, the last value won): the second of two same-length keys renamed
    std::string b = good, first, second;
    for (const auto& [k1, v1] : g.kv)
      for (const auto& [k2, v2] : g.kv)
        if (first.empty() && k1 < k2 && k1.size() == k2.size()) {
          first = k1;
          second = k2;
        }
    ASSERT_FALSE(first.empty());
    uint32_t type = 0;
    const size_t at = kv_value_at(b, second, &type) - 4 - second.size();
    b.replace(at, first.size(), first);
    expect_refused(b, ErrorKind::InvalidInput, {"metadata key '" + first + "' appears twice"});
  }
  const int64_t vocab = int64_t(g.strings("tokenizer.ggml.tokens").size());
  int ids = 0;
  for (const auto& [key, v] : g.kv) {  // every special id the writer stores, one past the vocabulary
    if (key.size() < 9 || key.compare(key.size() - 9, 9, "_token_id") != 0) continue;
    ++ids;
    std::string b = good;
    uint32_t type = 0;
    const size_t at = kv_value_at(b, key, &type);
    ASSERT_TRUE(type == 4 || type == 5) << key;  // u32 / i32
    put(b, at, uint32_t(vocab));
    expect_refused(b, ErrorKind::InvalidInput,
                   {key + " " + std::to_string(vocab) + " is outside the vocabulary of " + std::to_string(vocab)});
    spit(small().dir + "/bad.gguf", b);  // the tokenizer alone refuses it too
    EXPECT_THROW(load_tokenizer(small().dir + "/bad.gguf"), Error) << key;
    put(b, at, uint32_t(0xFFFFFFFF));  // llama.cpp's "no such token" stays accepted
    spit(small().dir + "/none.gguf", b);
    EXPECT_NO_THROW(open_model(small().dir + "/none.gguf")) << key;
  }
  EXPECT_GE(ids, 2) << "bos and eos at least";
}

#ifdef AR_CLI_PATH
namespace {
std::string run_cli(const std::string& args, int* rc) {
  FILE* p = popen((std::string(AR_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *rc = pclose(p);
  return out;
}
}  // namespace

TEST(GgufRead, EvalGenerateAndLogitsTakeAGgufFile) {
  AR_REQUIRE_FIXTURES(fx);
  const std::string gguf = fx + "/stories260K/stories260K.gguf", dir = converted().dir;
  const std::string tmp = test::temp_path("ggr_cli");
  fs::create_directories(tmp);
  spit(tmp + "/t.txt", read_text_file(fx + "/text/tinystories/tinystories_sample.txt").substr(0, 6000));
  int rc = 0;
  const std::string g = run_cli("generate --model " + gguf + " --prompt 'Once upon a time' -n 60 --threads 2", &rc);
  EXPECT_EQ(rc, 0) << g;
  EXPECT_NE(g.find(read_text_file(fx + "/stories260K/expected/prompt_once_upon_a_time_64steps.txt")), std::string::npos) << g;
  auto ppl = [&](const std::string& model) {
    const std::string out = run_cli("eval --model " + model + " --text " + tmp + "/t.txt --ctx 128 --json --threads 2", &rc);
    EXPECT_EQ(rc, 0) << out;
    return nlohmann::json::parse(out.substr(out.rfind('{')))["ppl"].get<double>();
  };
  const double a = ppl(gguf), b = ppl(dir);
  EXPECT_NEAR(a, b, 1e-9 * b);
  std::printf("eval --model stories260K.gguf: ppl %.6f; converted directory: %.6f\n", a, b);
  const std::string kl = run_cli("eval --model " + gguf + " --ref-model " + dir + " --text " + tmp +
                                 "/t.txt --ctx 128 --json --threads 2", &rc);
  EXPECT_EQ(rc, 0) << kl;
  EXPECT_EQ(nlohmann::json::parse(kl.substr(kl.rfind('{')))["kl_max"].get<double>(), 0.0) << kl;
  for (const auto& [model, out] : {std::pair{gguf, tmp + "/g.bin"}, {dir, tmp + "/d.bin"}}) {
    const std::string r = run_cli("logits --model " + model + " --text 'Once upon a time' --out " + out, &rc);
    EXPECT_EQ(rc, 0) << r;
  }
  EXPECT_EQ(slurp(tmp + "/g.bin"), slurp(tmp + "/d.bin"));
  EXPECT_EQ(slurp(tmp + "/g.bin.ids"), slurp(tmp + "/d.bin.ids"));
  // A bad file through the CLI: one error line naming it, nonzero exit.
  spit(tmp + "/bad.gguf", slurp(gguf).substr(0, 500000));
  const std::string bad = run_cli("eval --model " + tmp + "/bad.gguf --text " + tmp + "/t.txt", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad.find(tmp + "/bad.gguf: tensor '"), std::string::npos) << bad;
  fs::remove_all(tmp);
}

// A context length below what the command needs is named as the file's key (before: eval blamed a --ctx
// nobody gave, generate printed nothing with exit 0).
TEST(GgufRead, ContextLengthBelowWhatTheCommandNeedsNamesTheKey) {
  std::string b = small().bytes;
  uint32_t type = 0;
  const size_t at = kv_value_at(b, "llama.context_length", &type);
  ASSERT_EQ(type, 4u);  // u32
  put(b, at, uint32_t(1));
  const std::string path = small().dir + "/ctx1.gguf";
  spit(path, b);
  spit(small().dir + "/t.txt", "The quick brown fox jumps over the lazy dog. The quick brown fox jumps again.");
  int rc = 0;
  const std::string e = run_cli("eval --model " + path + " --text " + small().dir + "/t.txt", &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << e;
  EXPECT_EQ(e, "error: " + path + ": llama.context_length 1 is smaller than the 4 tokens eval needs\n");
  const std::string g = run_cli("generate --model " + path + " -n 4", &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << g;
  EXPECT_NE(g.find("error: " + path + ": llama.context_length 1 is smaller than the 2 tokens generate needs"),
            std::string::npos) << g;
  const std::string l = run_cli("logits --model " + path + " --text hello --out " + small().dir + "/l.bin", &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << l;
  EXPECT_NE(l.find(path + ": llama.context_length 1 is smaller than the"), std::string::npos) << l;
  EXPECT_FALSE(fs::exists(small().dir + "/l.bin"));
}
#endif

// llama.cpp's gpt-oss files keep the experts in ggml's MXFP4 (quant/ggml_mxfp4.h): a q8_0 file whose
// blk.0.ffn_gate_exps is rewritten in place as MXFP4 blocks (the type id changed, the blocks in the
// first 17/34 of its bytes, the rest a gap) reads back each expert's rows from its part of the stack.
TEST(GgufRead, Mxfp4ExpertsReadBack) {
  test::TempDir dir("ggr_mxfp4");
  nlohmann::json c = tiny_moe_config("gpt_oss", 1);
  c["hidden_size"] = 32, c["vocab_size"] = 260, c["num_local_experts"] = 4, c["intermediate_size"] = 32;
  c["num_attention_heads"] = 2, c["num_key_value_heads"] = 1, c["swiglu_limit"] = 7.0;
  write_synthetic_model(dir.path + "/m", c, 23);
  const std::string path = write_gguf(dir.path + "/m", dir.path + "/q", "gguf:q8_0");
  std::string bytes = slurp(path);
  const GgufFile g = GgufFile::open(path);
  const std::string name = "blk.0.ffn_gate_exps.weight";
  const auto t = std::find_if(g.tensors.begin(), g.tensors.end(), [&](const GgufTensorInfo& x) { return x.name == name; });
  ASSERT_NE(t, g.tensors.end());
  ASSERT_EQ(t->dims, (std::vector<uint64_t>{32, 32, 4}));  // {C, I, E}: one block per row
  put<uint32_t>(bytes, find_info(bytes, name).type, uint32_t(quant::GgmlType::MXFP4));
  std::mt19937 rng(5);
  std::vector<uint8_t> blocks(size_t(32 * 4 * 17));
  for (size_t b = 0; b < blocks.size() / 17; ++b) {
    blocks[b * 17] = uint8_t(120 + rng() % 12);  // scales 2^-8 .. 2^3
    for (int j = 1; j < 17; ++j) blocks[b * 17 + size_t(j)] = uint8_t(rng());
  }
  std::memcpy(bytes.data() + g.data_start + t->offset, blocks.data(), blocks.size());
  spit(path, bytes);
  const auto m = open_model(path);
  Context ctx(Device{}, 1);
  const BlockWeights w = m->load_block(0, ctx);
  ASSERT_EQ(w.eg.size(), 4u);
  for (size_t e = 0; e < 4; ++e) {
    std::vector<float> want(32 * 32);
    quant::ggml_dequantize(quant::GgmlType::MXFP4, blocks.data() + e * 32 * 17, want.data(), 32 * 32);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(w.eg[e].f32()[i], want[i]) << "expert " << e << " [" << i << "]";
  }
}

// Regenerates the committed fuzz seeds (fuzz/corpus/gguf_tensors: one-layer models of each architecture
// in q4_0, q8_0 and f16; deepseek2 and glm4moe with a dense and a MoE layer, gpt-oss with a full and a
// sliding layer) when AR_WRITE_GGUF_SEEDS names a directory; skipped otherwise.
TEST(GgufRead, WritesFuzzSeeds) {
  const char* out = std::getenv("AR_WRITE_GGUF_SEEDS");
  if (!out) GTEST_SKIP() << "set AR_WRITE_GGUF_SEEDS=<dir> to regenerate fuzz/corpus/gguf_tensors";  // MoE seeds too
  struct Seed { const char* arch; const char* format; bool tied; const char* name; };
  for (const Seed& s : {Seed{"LlamaForCausalLM", "gguf:q4_0", false, "llama_q4_0.gguf"},
                        Seed{"Qwen2ForCausalLM", "gguf:q8_0", false, "qwen2_q8_0.gguf"},
                        Seed{"Qwen3ForCausalLM", "gguf:f16", true, "qwen3_f16_tied.gguf"},
                        Seed{"qwen2_moe", "gguf:q4_0", false, "qwen2moe_q4_0.gguf"},
                        Seed{"mixtral", "gguf:q8_0", false, "mixtral_q8_0.gguf"},
                        Seed{"deepseek_v3", "gguf:q4_0", false, "deepseek2_q4_0.gguf"},
                        Seed{"glm4_moe", "gguf:q8_0", false, "glm4moe_q8_0.gguf"},
                        Seed{"gpt_oss", "gguf:q8_0", false, "gpt_oss_q8_0.gguf"}}) {
    const std::string m = test::temp_path("ggr_seed_m"), q = test::temp_path("ggr_seed_q");
    const bool moe = std::string(s.arch).find("For") == std::string::npos;  // tiny_moe_config's names
    nlohmann::json c = moe ? tiny_moe_config(s.arch, 1) : config_of(s.arch, 32, 32, 260, s.tied);
    if (moe) {  // 4 experts of 32, top-2 (a shared expert of 32 for Qwen2-MoE)
      c["hidden_size"] = 32;
      c["vocab_size"] = 260;
      c[c.contains("num_local_experts") ? "num_local_experts" : "num_experts"] = 4;
      c[c.contains("moe_intermediate_size") ? "moe_intermediate_size" : "intermediate_size"] = 32;
      if (c.contains("shared_expert_intermediate_size")) c["shared_expert_intermediate_size"] = 32;
    }
    const bool sigmoid = c.contains("first_k_dense_replace");  // a dense layer 0, then a MoE layer
    const bool gpt_oss = std::string(s.arch) == "gpt_oss";      // a full layer, then a sliding one
    c["num_hidden_layers"] = sigmoid || gpt_oss ? 2 : 1;
    if (gpt_oss) c["swiglu_limit"] = 7.0, c["layer_types"] = {"full_attention", "sliding_attention"};
    c["num_attention_heads"] = 2;
    c["num_key_value_heads"] = c.contains("kv_lora_rank") ? 2 : 1;
    c["max_position_embeddings"] = 64;
    write_synthetic_model(m, c, 21);
    const std::string path = write_gguf(m, q, s.format);
    ASSERT_NO_THROW(open_gguf_model(path));
    fs::create_directories(out);
    fs::copy_file(path, std::string(out) + "/" + s.name, fs::copy_options::overwrite_existing);
    fs::remove_all(m);
    fs::remove_all(q);
  }
}
