// load_tokenizer: picks the tokenizer implementation from the files of a model directory.
#include <filesystem>

#include "core/error.h"
#include "io/json_file.h"
#include "io/mapped_file.h"
#include "model/tokenizer/hf_bpe.h"
#include "model/tokenizer_llama2c.h"

namespace ar {

namespace {
// Order: tokenizer.json, vocab.json + merges.txt, tokenizer.bin (llama2.c), tokenizer.model (tiktoken text
// or SentencePiece protobuf).
// tiktoken rank files are text lines "base64 rank"; SentencePiece models are binary protobuf.
bool looks_like_tiktoken(const std::string& path) {
  std::string head = read_text_file(path).substr(0, 256);
  size_t nl = head.find('\n');
  if (nl == std::string::npos) return false;
  std::string line = head.substr(0, nl);
  size_t sp = line.find(' ');
  if (sp == std::string::npos || sp == 0) return false;
  for (size_t i = sp + 1; i < line.size(); ++i)
    if (line[i] < '0' || line[i] > '9') return false;
  return true;
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec)) return HfBpeTokenizer::from_gguf(dir);  // a GGUF model file
  nlohmann::json cfg = nlohmann::json::object();
  if (file_exists(dir + "/tokenizer_config.json")) cfg = read_json_file(dir + "/tokenizer_config.json");
  if (file_exists(dir + "/tokenizer.json")) return HfBpeTokenizer::from_tokenizer_json(dir + "/tokenizer.json", cfg);
  if (file_exists(dir + "/vocab.json") && file_exists(dir + "/merges.txt"))
    return HfBpeTokenizer::from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt", cfg);
  if (file_exists(dir + "/tokenizer.bin"))  // written by `autoround convert`: the model's own tokenizer
    return std::make_unique<Llama2cTokenizer>(Llama2cTokenizer::load(dir + "/tokenizer.bin"));
  if (file_exists(dir + "/tokenizer.model")) {
    if (looks_like_tiktoken(dir + "/tokenizer.model"))
      return HfBpeTokenizer::from_tiktoken(dir + "/tokenizer.model", cfg);
    return HfBpeTokenizer::from_sentencepiece(dir + "/tokenizer.model", cfg);
  }
  fail(ErrorKind::InvalidInput, dir + ": no tokenizer found (tokenizer.json, vocab.json + merges.txt, "
                                      "tokenizer.model or tokenizer.bin)");
}

}  // namespace ar
