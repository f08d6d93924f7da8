// After a tokenizer file parsed, the fuzz targets use the tokenizer it describes: encode a fixed
// text (ASCII, multi-byte UTF-8, whitespace runs, special-token look-alikes) and the input's own
// leading bytes, decode the result, and decode ids at the edges of the vocabulary. A parser that
// accepts a file must leave a tokenizer that works or fails with ar::Error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace ar::fuzz {

inline void exercise_tokenizer(const Tokenizer& t, const uint8_t* data, size_t size) {
  static const std::string kText =
      "Hello world! 123 4567  \t\n spaces   x <s></s><|endoftext|> caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD "
      "\xF0\x9F\x98\x80 don't";
  std::vector<int32_t> ids = t.encode(kText, true);
  (void)t.decode(ids, true);
  (void)t.decode(ids, false);
  // The input's first bytes as text (Tokenizer::encode may refuse invalid UTF-8 with ar::Error).
  std::string head(reinterpret_cast<const char*>(data), size < 64 ? size : 64);
  try {
    std::vector<int32_t> h = t.encode(head, false);
    (void)t.decode(h, false);
  } catch (const ar::Error&) {
  }
  const int32_t v = t.vocab_size();
  for (int32_t id : {0, v / 2, v - 1, t.bos(), t.eos()})
    if (id >= 0 && id < v) (void)t.decode({id}, false);
}

}  // namespace ar::fuzz
