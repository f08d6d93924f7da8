// Pre-tokenizer split with the regex a tokenizer declares (PCRE2, UTF + Unicode properties, JIT).
// "Isolated" behaviour: every match is a piece and so is every gap between matches.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ar::tok {

class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern);  // throws ar::Error naming the pattern
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;
  void split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Patterns of the pre-tokenizers in the wild.
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

}  // namespace ar::tok
