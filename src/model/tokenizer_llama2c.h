// llama2.c tokenizer (tok512.bin / tokenizer.bin): u32 max_token_length, then per id
// {f32 score, i32 len, len bytes}. Encoding follows run.c: optional BOS, a dummy-prefix " " token
// for non-empty text, one token per UTF-8 code point (byte fallback id = byte + 3), then repeated
// merging of the adjacent pair whose concatenation is in the vocabulary with the highest score
// (first such pair on ties). Decoding strips the leading space after BOS and maps "<0xHH>" to bytes.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace ar {

class Llama2cTokenizer : public Tokenizer {
 public:
  static Llama2cTokenizer load(const std::string& path);
  std::vector<int32_t> encode(const std::string& text, bool bos, bool eos) const;
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const override {
    return encode(std::string(text), add_special, false);
  }
  // run.c printing: BOS/EOS skipped, the space after BOS stripped, non-printable bytes dropped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const override;
  std::string describe() const override {
    return "llama2.c BPE (tokenizer.bin), " + std::to_string(pieces_.size()) + " tokens";
  }
  // Text of `token` when it follows `prev` (run.c decode semantics).
  std::string decode(int32_t prev, int32_t token) const;
  // Concatenated text of a token sequence, as run.c prints it (non-printable single bytes dropped).
  std::string decode_all(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const override { return int32_t(pieces_.size()); }
  int32_t bos() const override { return 1; }
  int32_t eos() const override { return 2; }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  float score(int32_t id) const { return scores_[size_t(id)]; }

 private:
  void merge(std::vector<int32_t>& ids) const;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> lookup_;
};

// The same tokenizer as Hugging Face's tokenizer.json (SentencePiece-style BPE: the Prepend/Replace
// normalizer, which prepends "▁" unconditionally as run.c's dummy prefix does; byte fallback; merges
// ranked by the merged piece's score, as run.c merges), so transformers loads a converted model
// without sentencepiece. Ids 0/1/2 are <unk>/<s>/</s>; every other piece keeps its id.
std::string llama2c_tokenizer_json(const Llama2cTokenizer& tok);

}  // namespace ar
