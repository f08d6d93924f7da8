// make_seeds FIXTURES_DIR OUT_DIR: writes the generated seed corpora of the fuzz targets into
// OUT_DIR/<target>/. Seeds are derived from the shared fixtures (tokenizers, stories260K, texts) at
// build time, shrunk to a few hundred tokens so that the fuzzer mutates structure, not bulk data;
// binary seeds that need no fixture (safetensors, llama2.c checkpoints) are synthesized. A missing
// fixture is skipped with a note: the committed seeds in fuzz/corpus/ still apply.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/context.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/tokenizer_llama2c.h"
#include "resume_fixture.h"

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {
constexpr size_t kTokens = 400;  // vocabulary size of the shrunk tokenizer seeds
std::string g_fix, g_out;

Bytes read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write(const std::string& target, const std::string& name, const void* data, size_t n) {
  fs::create_directories(g_out + "/" + target);
  std::ofstream(g_out + "/" + target + "/" + name, std::ios::binary).write(static_cast<const char*>(data), std::streamsize(n));
}
void write(const std::string& target, const std::string& name, const std::string& s) { write(target, name, s.data(), s.size()); }
bool have(const fs::path& p) {
  if (fs::exists(p)) return true;
  std::fprintf(stderr, "make_seeds: %s missing, skipped\n", p.c_str());
  return false;
}
std::string stem_of(const fs::path& p) { return p.parent_path().filename().string() + "_" + p.stem().string(); }

// tokenizer.json with ids < kTokens, merges whose parts and result survive, added tokens renumbered.
void shrink_tokenizer_json(const fs::path& p) {
  nlohmann::json j = nlohmann::json::parse(read(p));
  auto& m = j["model"];
  nlohmann::json vocab = nlohmann::json::object();
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it)
    if (it.value().get<int64_t>() < int64_t(kTokens)) vocab[it.key()] = it.value();
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& e : m["merges"]) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) continue;
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    }
    if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merges.push_back(e);
  }
  m["vocab"] = vocab;
  m["merges"] = merges;
  int64_t next = int64_t(kTokens);
  if (j.contains("added_tokens"))
    for (auto& a : j["added_tokens"])
      if (a["id"].get<int64_t>() >= int64_t(kTokens)) a["id"] = next++;
  write("tokenizer_json", stem_of(p) + ".json", j.dump(1));
}

// GGUF writer for the shrunk vocabularies (metadata and tensor infos, no tensor data).
struct GgufOut {
  Bytes b;
  template <class T> void put(T v) { const auto* p = reinterpret_cast<const uint8_t*>(&v); b.insert(b.end(), p, p + sizeof v); }
  void str(const std::string& s) { put<uint64_t>(s.size()); b.insert(b.end(), s.begin(), s.end()); }
  void num(ar::GgufType t, double v) {
    using T = ar::GgufType;
    switch (t) {
      case T::U8: case T::Bool: put<uint8_t>(uint8_t(v)); break;
      case T::I8: put<int8_t>(int8_t(v)); break;
      case T::U16: put<uint16_t>(uint16_t(v)); break;
      case T::I16: put<int16_t>(int16_t(v)); break;
      case T::U32: put<uint32_t>(uint32_t(v)); break;
      case T::I32: put<int32_t>(int32_t(v)); break;
      case T::F32: put<float>(float(v)); break;
      case T::U64: put<uint64_t>(uint64_t(v)); break;
      case T::I64: put<int64_t>(int64_t(v)); break;
      default: put<double>(v); break;
    }
  }
};

void shrink_gguf(const fs::path& p) {
  ar::GgufFile g = ar::GgufFile::open(p.string());
  std::set<std::string> kept;
  if (auto* t = g.find("tokenizer.ggml.tokens"))
    for (size_t i = 0; i < t->strs.size() && i < kTokens; ++i) kept.insert(t->strs[i]);
  GgufOut o;
  o.b = {'G', 'G', 'U', 'F'};
  o.put<uint32_t>(g.version);
  o.put<uint64_t>(g.tensors.size());
  o.put<uint64_t>(g.kv.size());
  for (auto& [key, v] : g.kv) {
    o.str(key);
    o.put<uint32_t>(uint32_t(v.type));
    if (v.type == ar::GgufType::String) {
      o.str(v.str);
    } else if (v.type == ar::GgufType::Array) {
      std::vector<std::string> strs;
      if (key == "tokenizer.ggml.merges") {
        for (const auto& m : v.strs) {
          const size_t sp = m.find(' ', 1);
          if (sp != std::string::npos && kept.count(m.substr(0, sp)) && kept.count(m.substr(sp + 1)) &&
              kept.count(m.substr(0, sp) + m.substr(sp + 1)))
            strs.push_back(m);
        }
      } else {
        // An index loop: vector::assign over a sub-range trips -Wnull-dereference in the TSan build.
        for (size_t i = 0; i < std::min(v.strs.size(), kTokens); ++i) strs.push_back(v.strs[i]);
      }
      const size_t n = v.elem == ar::GgufType::String ? strs.size() : std::min(v.nums.size(), kTokens);
      o.put<uint32_t>(uint32_t(v.elem));
      o.put<uint64_t>(n);
      for (size_t i = 0; i < n; ++i) v.elem == ar::GgufType::String ? o.str(strs[i]) : o.num(v.elem, v.nums[i]);
    } else {
      o.num(v.type, v.num);
    }
  }
  for (const auto& t : g.tensors) {
    o.str(t.name);
    o.put<uint32_t>(uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) o.put<uint64_t>(d);
    o.put<uint32_t>(t.type);
    o.put<uint64_t>(t.offset);
  }
  write("gguf", p.stem().string() + ".gguf", o.b.data(), o.b.size());
}

// SentencePiece ModelProto with its first kTokens pieces (other top-level fields kept as they are).
void shrink_sentencepiece(const fs::path& p) {
  const Bytes in = read(p);
  Bytes out;
  size_t i = 0, pieces = 0;
  auto varint = [&](size_t& k) {
    uint64_t v = 0;
    for (int s = 0; k < in.size(); s += 7) {
      const uint8_t c = in[k++];
      v |= uint64_t(c & 0x7F) << s;
      if (!(c & 0x80)) break;
    }
    return v;
  };
  while (i < in.size()) {
    const size_t start = i;
    const uint64_t tag = varint(i);
    const int wire = int(tag & 7);
    if (wire == 0) varint(i);
    else if (wire == 1) i += 8;
    else if (wire == 5) i += 4;
    else if (wire == 2) i += size_t(varint(i));
    else break;
    i = std::min(i, in.size());
    if ((tag >> 3) == 1 && ++pieces > kTokens) continue;
    out.insert(out.end(), in.begin() + long(start), in.begin() + long(i));
  }
  write("tokenizer_model", stem_of(p) + ".model", out.data(), out.size());
}

// llama2.c checkpoint with the given header and deterministic small weights.
void llama2c_checkpoint(const std::string& name, int dim, int hid, int layers, int heads, int kv, int vocab, int seq) {
  const int32_t h[7] = {dim, hid, layers, heads, kv, vocab, seq};
  const size_t V = size_t(vocab < 0 ? -vocab : vocab), D = size_t(dim), H = size_t(hid), L = size_t(layers),
               hs = D / size_t(heads), KV = hs * size_t(kv);
  const size_t n = V * D + L * D * 2 + L * D * D * 2 + L * KV * D * 2 + L * H * D * 3 + D + size_t(seq) * hs +
                   (vocab < 0 ? V * D : 0);
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = float(int(i % 17) - 8) / 64.f;
  Bytes b(28 + n * 4);
  std::memcpy(b.data(), h, 28);
  std::memcpy(b.data() + 28, w.data(), n * 4);
  write("llama2c_checkpoint", name, b.data(), b.size());
}

void safetensors_seeds() {
  ar::Context ctx({}, 1);
  const std::string tmp = g_out + "/.tmp.safetensors";
  auto save = [&](const std::string& name, const std::vector<ar::StEntry>& t, const std::map<std::string, std::string>& meta) {
    ar::write_safetensors(tmp, t, meta);
    const Bytes b = read(tmp);
    write("safetensors", name, b.data(), b.size());
    fs::remove(tmp);
  };
  auto t = [&](ar::Shape s, ar::DType d) { return ar::Tensor::zeros(s, d, ctx); };
  save("f32.safetensors", {{"w", t({2, 3}, ar::DType::F32)}}, {{"format", "pt"}});
  save("mixed.safetensors",
       {{"a.weight", t({4, 2}, ar::DType::BF16)}, {"b.weight", t({3}, ar::DType::F16)}, {"c.qweight", t({2, 2}, ar::DType::I32)},
        {"empty", t({0, 4}, ar::DType::F32)}},
       {});
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds FIXTURES_DIR OUT_DIR\n");
    return 2;
  }
  g_fix = argv[1];
  g_out = argv[2];
  fs::create_directories(g_out);
  try {
    safetensors_seeds();
    {  // a valid resume state of the fuzz target's fixed run, with and without x_q and extra_config
      ar::ResumeState st;
      st.next_block = 2;
      st.x_fp = ar::resume_act_name("x_fp", 2);
      st.x_fp_hash = 0x0123456789abcdefULL;
      st.outputs.push_back({ar::fuzz::make_partial_dir(g_out + "/.tmp_partial"), nlohmann::ordered_json::object()});
      fs::remove_all(g_out + "/.tmp_partial");
      write("resume_state", "plain.json", ar::resume_state_json(st, ar::fuzz::resume_expect().fingerprint));
      st.x_q = ar::resume_act_name("x_q", 2);
      st.x_q_hash = 42;
      st.outputs[0].extra = {{"model.layers.1.mlp.down_proj", {{"bits", 8}, {"data_type", "int"}}}};
      write("resume_state", "x_q_extra.json", ar::resume_state_json(st, ar::fuzz::resume_expect().fingerprint));
    }
    llama2c_checkpoint("tiny_shared.bin", 8, 16, 1, 2, 2, 259, 4);
    llama2c_checkpoint("tiny_gqa_cls.bin", 8, 12, 2, 4, 2, -300, 8);
    const fs::path fx(g_fix);
    for (const char* d : {"gpt2", "llama2-spm", "phi-3-mini", "smollm"})
      if (have(fx / "tokenizers" / d / "tokenizer.json")) shrink_tokenizer_json(fx / "tokenizers" / d / "tokenizer.json");
    // transformers 5's Metaspace spelling (AutoRound goldens, committed) and convert's tokenizer.json.
    const fs::path golden = fs::path(AR_SOURCE_DIR) / "tests/data/autoround_golden";
    if (have(golden / "tokenizer/tokenizer.json")) shrink_tokenizer_json(golden / "tokenizer/tokenizer.json");
    for (const char* v : {"metaspace_always_split_true", "metaspace_first_split_true"})
      if (have(golden / "tokenizer_variants" / (std::string(v) + ".tokenizer.json")))
        shrink_tokenizer_json(golden / "tokenizer_variants" / (std::string(v) + ".tokenizer.json"));
    // Float-scheme checkpoints (committed): byte 0 picks the configuration (fuzz_float_ckpt.cpp's order).
    const char* float_cases[] = {"mxfp4_llm_compressor", "mxfp8_llm_compressor", "nvfp4_llm_compressor",
                                 "nvfp4_auto_round", "fp8_static_llm_compressor", "fp8_static_auto_round",
                                 "fp8_block_llm_compressor"};
    for (uint8_t i = 0; i < 7; ++i) {
      const fs::path p = fs::path(AR_SOURCE_DIR) / "tests/data/float_ckpt" / float_cases[i] / "model.safetensors";
      if (!have(p)) continue;
      Bytes b = read(p);
      b.insert(b.begin(), i);
      write("float_ckpt", std::string(float_cases[i]) + ".bin", b.data(), b.size());
    }
    if (const fs::path p = fs::path(AR_SOURCE_DIR) / "tests/data/gpt_oss/mxfp4/model/model.safetensors"; have(p)) {
      Bytes b = read(p);  // case 7: gpt-oss's MXFP4 experts
      b.insert(b.begin(), uint8_t(7));
      write("float_ckpt", "gpt_oss_mxfp4.bin", b.data(), b.size());
    }
    if (have(fx / "stories260K/tok512.bin"))
      write("tokenizer_json", "llama2c_converted.json",
            ar::llama2c_tokenizer_json(ar::Llama2cTokenizer::load((fx / "stories260K/tok512.bin").string())));
    for (const char* d : {"llama2-spm", "mistral-7b-v0.1"})
      if (have(fx / "tokenizers" / d / "tokenizer.model")) shrink_sentencepiece(fx / "tokenizers" / d / "tokenizer.model");
    for (const char* d : {"llama3", "llama4"}) {  // tiktoken rank files: the first kTokens lines
      if (!have(fx / "tokenizers" / d / "tokenizer.model")) continue;
      std::ifstream in(fx / "tokenizers" / d / "tokenizer.model");
      std::string line, out;
      for (size_t n = 0; n < kTokens && std::getline(in, line); ++n) out += line + "\n";
      write("tokenizer_model", std::string(d) + "_tiktoken.model", out);
    }
    if (have(fx / "stories260K/tok512.model")) {
      const Bytes b = read(fx / "stories260K/tok512.model");
      write("tokenizer_model", "tok512.model", b.data(), b.size());
    }
    if (have(fx / "stories260K/tok512.bin")) {
      const Bytes b = read(fx / "stories260K/tok512.bin");
      write("llama2c_tokenizer", "tok512.bin", b.data(), b.size());
    }
    if (have(fx / "stories260K/stories260K.gguf")) shrink_gguf(fx / "stories260K/stories260K.gguf");
    if (have(fx / "tokenizers/llama.cpp-vocab"))
      for (const auto& e : fs::directory_iterator(fx / "tokenizers/llama.cpp-vocab"))
        if (e.path().extension() == ".gguf") shrink_gguf(e.path());
    for (const char* t : {"text/tinystories/tinystories_sample.txt", "text/tinyshakespeare/input.txt",
                          "text/wikitext-2-raw/wiki.test.raw"}) {
      if (!have(fx / t)) continue;
      Bytes b = read(fx / t);
      b.resize(std::min<size_t>(b.size(), 3000));
      std::string txt(1, '\0');  // mode byte 0: plain text
      txt.append(b.begin(), b.end());
      write("text_source", fs::path(t).stem().string() + ".txt", txt);
      std::string jl(1, '\1');  // mode byte 1: JSONL, field "text"
      std::string line;
      for (char c : txt.substr(1)) {
        if (c != '\n') { line += c; continue; }
        jl += nlohmann::json({{"text", line}, {"id", jl.size()}}).dump() + "\n";
        line.clear();
      }
      write("text_source", fs::path(t).stem().string() + ".jsonl", jl);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
