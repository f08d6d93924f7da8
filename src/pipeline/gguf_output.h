// `--format gguf:<preset>` (docs/gguf.md): one GGUF v3 file, <output>/<model>-<PRESET>.gguf, written
// as the run goes. At construction every tensor is declared (llama.cpp's names, ggml dims, the type
// the preset gives it: quant/gguf_scheme.h) in llama.cpp's converter order: rope_freqs (llama3 rope
// scaling), token_embd, per block its table's tensors (model/block_tensors.h) as attn_norm, MLA's
// attn_q_a_norm / kv_a_norm / q_a / q_b, attn_q/k/v (and biases), MLA's attn_kv_a_mqa / k_b / v_b,
// attn_q_norm/k_norm, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then output_norm and output
// (not when tied). A MoE layer adds its router (f32), exp_probs_b, the stacked experts
// ffn_{gate,up,down}_exps (each expert's rows arrive under its HF name and fill part e of the stack;
// gpt-oss's expert biases likewise) and a shared expert. MLA's kv_b_proj arrives once and fills attn_k_b and attn_v_b.
// Tensors may arrive in any order within that stream; each is held until every tensor declared
// before it is written, so at most one block's packed tensors wait in memory. The llama
// architecture's Q/K rows, qwen35's value heads and Qwen3-Next's in_proj_qkvz split are row moves done here
// (rows of every ggml type are whole blocks); a column move (qwen35's out_proj) is the caller's.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "export/gguf_delta_net.h"
#include "io/gguf_writer.h"
#include "model/loader.h"
#include "quant/gguf_scheme.h"

namespace ar {

class GgufOutput {
 public:
  // `kept(module)`: the tensors of the Linear `module` (model.layers.3.mlp.down_proj, lm_head,
  // model.embed_tokens) are written in their stored type (BF16, F16; F32 otherwise), not the preset's:
  // --fp_layers and 16-bit --layer_config entries. A layer's experts share one stacked tensor of one
  // type: keeping some of them and not the others is refused (InvalidInput, naming them).
  GgufOutput(const std::string& dir, const HfModel& model, const quant::GgufScheme& scheme,
             const std::function<bool(const std::string&)>& kept = {});
  // The HF tensors written in their stored type because they were kept.
  const std::vector<std::string>& kept() const { return kept_names_; }
  // The file's tensors by type, in file order: "39 tensors: q4_k x24 (token_embd, attn_q, ...),
  // f32 x9 (attn_norm, ffn_norm, output_norm), q6_k x6 (attn_v, ffn_down, output)"; a role is a
  // tensor's llama.cpp name without its block and ".weight" (a stack of experts counts once).
  std::string types_summary() const;
  // The ggml type an HF tensor is written in (F32 for 1-D tensors).
  quant::GgmlType type_of(const std::string& hf_name) const;
  // The tensor's rows in its type, HF row order.
  void add(const std::string& hf_name, std::vector<uint8_t> bytes);
  // fp32 values of a 1-D tensor (norms, biases).
  void add_f32(const std::string& hf_name, const float* data, int64_t n);
  bool expects(const std::string& hf_name) const;
  // The column order the file holds the tensor in (gguf_tensor_col_order): the caller quantizes it so.
  std::vector<int64_t> col_order(const std::string& hf_name) const;
  void finish();  // every declared tensor must have been added
  const std::string& path() const { return path_; }

 private:
  struct Decl {
    std::string gguf_name;
    int64_t rows = 1, cols = 0;        // of one part
    int64_t parts = 1;                 // experts stacked in it
    quant::GgmlType type = quant::GgmlType::F32;
    // The checkpoint rows (1-D: elements) this tensor's rows are, in file order (llama's Q/K permutation,
    // qwen35's tiled value heads, a part of in_proj_qkvz); empty: all, as they are. src_units: how many
    // the checkpoint tensor has.
    std::vector<int64_t> row_order;
    int64_t src_units = 0;
    std::vector<int64_t> v_b_rows;   // MLA's kv_b_proj: the rows attn_v_b takes (attn_k_b is key "<hf>#k_b")
    int64_t bytes() const {
      return (v_b_rows.empty() ? rows : int64_t(v_b_rows.size())) * parts * quant::ggml_row_bytes(type, cols);
    }
    std::vector<uint8_t> stack;      // the experts added so far
    std::set<int64_t> filled;
  };
  Decl make_decl(const std::string& hf_name, const Shape& shape, int64_t parts, bool f32) const;
  void enter(const std::string& key, Decl d, const std::vector<uint64_t>& dims);
  void declare(const std::string& hf_name, const Shape& shape, int64_t parts = 1, bool f32 = false);
  void declare_layer(int64_t layer);
  void declare_kv_b(const std::string& hf_name, const Shape& shape);
  void declare_parts(const std::string& hf_name, const Shape& shape, const std::vector<GgufRowPart>& parts);
  void stage_rows(const std::string& key, const Decl& d, const std::vector<uint8_t>& bytes);
  void stage_kv_b(const std::string& hf_name, const Decl& v, const std::vector<uint8_t>& bytes);
  void plan_kept(const HfModel& model, const std::function<bool(const std::string&)>& kept);
  std::pair<const std::string, Decl>* find(const std::string& hf_name, int64_t* part);
  void flush();
  const ModelConfig& cfg_;
  quant::GgufScheme scheme_;
  std::string path_;
  std::unique_ptr<GgufWriter> writer_;
  std::map<std::string, Decl> decl_;
  std::vector<std::string> order_;                     // HF names in file order
  size_t next_ = 0;                                     // the next to write
  std::map<std::string, std::vector<uint8_t>> staged_;  // added, not yet written
  std::vector<std::vector<uint8_t>> extras_;            // rope_freqs: written at the start
  std::map<std::string, std::vector<std::string>> more_parts_;  // HF name -> the keys of its other tensors
  std::map<std::string, quant::GgmlType> kept_;         // HF weight name (an expert stack: expert 0's) -> type
  std::vector<std::string> kept_names_;
};

}  // namespace ar
