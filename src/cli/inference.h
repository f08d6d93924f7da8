// `eval` and `logits` as library calls: the CLI's subcommands print what these return, and the Python
// module (python/) returns it as a dict and a numpy array.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ar::cli {

struct EvalRequest {
  std::string model, ref_model;  // directories, GGUF files or Hugging Face cache names; ref "": none
  int64_t ctx = 0;               // window length (0: min(512, the model's context))
  int64_t batch = 4;             // windows per forward pass
  int threads = 0;               // 0: every core
  bool progress = false;         // a progress line on stderr
};

// Perplexity of the text under req.model (llama.cpp's windows), and with a reference its KL divergence,
// top-1 agreement and delta perplexity: the object `eval --json` prints (ppl, ppl_stderr, tokens, ...).
// `read_text` is called once the model and its tokenizer are open (their errors come first).
nlohmann::ordered_json evaluate_text(const EvalRequest& req, const std::function<std::string()>& read_text);

// The object above as `eval` prints it without --json.
std::string eval_summary(const nlohmann::ordered_json& figures);

struct LogitsResult {
  std::vector<int32_t> ids;   // the text's tokens, special tokens included
  std::vector<float> logits;  // [ids.size(), vocab], row-major fp32
  int64_t vocab = 0;
};

// The model's logits for every position of `text` (encoded with the model's tokenizer).
LogitsResult text_logits(const std::string& model, const std::string& text);

}  // namespace ar::cli
