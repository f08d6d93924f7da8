#include "model/tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <mutex>

#include "core/error.h"

namespace ar::tok {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  // Match data is per call (thread safety): created on demand from the compiled pattern.
};

RegexSplitter::RegexSplitter(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(ErrorKind::Unsupported, "pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                                     std::to_string(off) + ": " + reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
}

RegexSplitter::~RegexSplitter() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>* out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  size_t pos = 0, gap = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (b > gap) out->push_back(text.substr(gap, b - gap));
    if (e > b) out->push_back(text.substr(b, e - b));
    gap = e;
    if (e == b) {  // empty match: step one code point
      if (e >= text.size()) break;
      size_t n = 1;
      while (e + n < text.size() && (uint8_t(text[e + n]) & 0xC0) == 0x80) ++n;
      pos = e + n;
    } else {
      pos = e;
    }
  }
  if (gap < text.size()) out->push_back(text.substr(gap));
  pcre2_match_data_free(md);
}

}  // namespace ar::tok
