// The tokenizer interface used by eval, generation and calibration. Implementations:
// HfBpeTokenizer (byte-level and SentencePiece BPE from tokenizer.json, vocab.json + merges.txt,
// tiktoken rank files) and the llama2.c format (tokenizer.bin). load_tokenizer() picks by file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ar {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special: add what the tokenizer's config adds by default (BOS for Llama; nothing for GPT-2),
  // like HF's add_special_tokens=True.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;
  virtual int32_t bos() const = 0;  // -1 if none
  virtual int32_t eos() const = 0;  // -1 if none
  virtual int32_t vocab_size() const = 0;
  virtual std::string describe() const = 0;  // e.g. "byte-level BPE (tokenizer.json), 50257 tokens"
};

// Reads the tokenizer of a model directory: tokenizer.json, else vocab.json + merges.txt, else the
// llama2.c tokenizer.bin, else tokenizer.model (tiktoken or SentencePiece). Unsupported types are named.
// A regular file instead of a directory is read as a GGUF model's vocabulary (tokenizer.ggml.*).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir);

}  // namespace ar
