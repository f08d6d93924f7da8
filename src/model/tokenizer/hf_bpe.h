// Hugging Face-compatible BPE tokenizers.
//  - byte-level (GPT-2, Llama-3, Qwen2/2.5/3, SmolLM, DeepSeek): optional NFC, regex pre-tokenizer
//    (the pattern the files declare), optional individual digits, GPT-2 byte->unicode map, BPE;
//  - SentencePiece-style BPE (Llama-2, TinyLlama, Mistral, Phi-3): "▁" prefix + spaces -> "▁",
//    BPE over the whole segment, byte fallback <0xXX>. Both spellings HF writes: the Prepend/Replace
//    normalizer pair (transformers 4) and the Metaspace pre-tokenizer (transformers 5: prepend_scheme
//    first/always/never, split true/false).
// Added/special tokens are matched literally (longest first) before anything else.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/regex_split.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace ar {

class HfBpeTokenizer : public Tokenizer {
 public:
  enum class Kind { ByteLevel, SentencePiece };
  // Where "▁" is prepended to a segment (text between added tokens), SentencePiece kind only:
  //   Legacy: the Prepend normalizer, at the start of the input, unconditionally;
  //   First/Always: Metaspace, to the first segment / every segment, unless it starts with "▁" already;
  //   Never: Metaspace prepend_scheme "never".
  enum class Prepend { Legacy, First, Always, Never };
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };
  struct Spec {
    Kind kind = Kind::ByteLevel;
    bool nfc = false;
    Prepend prepend = Prepend::Legacy;
    bool split_at_space = false;  // Metaspace split=true: every "▁" starts a new word (MergedWithNext)
    // Byte-level pre-tokenizer: regex splits applied one after the other, each cutting every piece
    // into matches and gaps (HF Sequence of Split/Digits/ByteLevel, llama.cpp regex lists).
    std::vector<std::string> splits;
    std::vector<std::string> pieces;  // id -> token string (in the model's alphabet)
    std::vector<std::pair<std::string, std::string>> merges;
    tok::BpeOptions bpe;
    std::vector<Added> added;
    int32_t bos = -1, eos = -1;
    bool add_bos = false;
    std::string source;  // for describe() and errors
  };

  explicit HfBpeTokenizer(Spec spec);
  static std::unique_ptr<HfBpeTokenizer> from_tokenizer_json(const std::string& path, const nlohmann::json& config);
  static std::unique_ptr<HfBpeTokenizer> from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt,
                                                           const nlohmann::json& config);
  static std::unique_ptr<HfBpeTokenizer> from_tiktoken(const std::string& path, const nlohmann::json& config);
  // llama.cpp GGUF vocabulary (tokenizer.ggml.*): "gpt2" BPE with a known pre-tokenizer, "llama" SPM.
  static std::unique_ptr<HfBpeTokenizer> from_gguf(const std::string& path);
  // SentencePiece-style BPE from pieces with scores and types (1 normal, 2 unknown, 3 control,
  // 4 user-defined, 5 unused, 6 byte): merges by descending score of the merged piece.
  static std::unique_ptr<HfBpeTokenizer> from_scored_pieces(Spec s, const std::vector<float>& scores,
                                                            const std::vector<int>& types, int32_t unk, int32_t bos,
                                                            int32_t eos, bool byte_fallback);
  // SentencePiece ModelProto (tokenizer.model of Llama-2, Mistral, TinyLlama): BPE models only.
  static std::unique_ptr<HfBpeTokenizer> from_sentencepiece(const std::string& path, const nlohmann::json& config);

  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const override;
  int32_t bos() const override { return spec_.bos; }
  int32_t eos() const override { return spec_.eos; }
  int32_t vocab_size() const override { return model_->size(); }
  std::string describe() const override;

 private:
  void encode_segment(std::string_view text, bool first, std::vector<int32_t>* out) const;
  void encode_spm_segment(std::string_view text, bool first, std::vector<int32_t>* out) const;

  Spec spec_;
  std::unique_ptr<tok::BpeModel> model_;
  std::vector<std::unique_ptr<tok::RegexSplitter>> splitters_;
  tok::ByteLevelMap bytes_;
  std::vector<bool> is_special_;
  std::vector<const Added*> added_by_byte_[256];  // added tokens by first byte, longest first
  bool spm_split_words_ = false;  // no token has "▁" after another character: words can be encoded apart
};

}  // namespace ar
