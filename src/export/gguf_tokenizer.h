// A model directory's tokenizer as llama.cpp's GGUF vocabulary (tokenizer.ggml.*), the inverse of
// model/tokenizer/gguf_vocab.cpp (the reader). Sources, first found wins:
//   tokenizer.bin (llama2.c, written by `autoround convert`) -> "llama": pieces with " " as "▁",
//     the file's scores, types unknown/control/byte/normal, ids 0/1/2 = <unk>/<s>/</s>;
//   tokenizer.json, byte-level BPE -> "gpt2": tokens, merges, types, tokenizer.ggml.pre named from
//     the pre-tokenizer (gpt-2, llama-bpe, qwen2, smollm; others are refused);
//   tokenizer.json, SentencePiece-style BPE (Prepend/Replace normalizer or Metaspace) -> "llama":
//     tokens, types, and scores from the merge ranks (see gguf_tokenizer.cpp);
//   vocab.json + merges.txt -> "gpt2" ("qwen2" for a Qwen2Tokenizer, else "gpt-2").
// A tokenizer.model alone (SentencePiece or tiktoken) is refused: llama.cpp's converter needs
// tokenizer.json for tiktoken too, and we do not parse SentencePiece scores here.
// Special ids, add_bos/add_eos and the chat template follow llama.cpp's SpecialVocab:
// tokenizer_config.json first, then config.json's *_token_id.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ar {

class GgufWriter;

struct GgufVocab {
  std::string model;  // tokenizer.ggml.model: "llama" | "gpt2"
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;  // "llama" only
  std::vector<int32_t> types;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;  // "gpt2" only: "left right"
  int64_t bos = -1, eos = -1, unk = -1, pad = -1;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;
  std::string source;  // the file it came from, for errors and logs
};

// `vocab_size` (config.json) pads the vocabulary with unused "[PAD<i>]" tokens as llama.cpp's
// converter does; a tokenizer with more tokens than that is refused.
GgufVocab read_gguf_vocab(const std::string& model_dir, int64_t vocab_size);
void add_gguf_vocab(GgufWriter& w, const GgufVocab& v);

}  // namespace ar
