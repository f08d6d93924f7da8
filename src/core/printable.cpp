#include "core/printable.h"

#include <cstdint>

namespace ar {

namespace {
// Length of the well-formed UTF-8 sequence starting at s[i] and its code point, or 0 when the bytes
// there are not one (RFC 3629: shortest form only, no surrogates, at most U+10FFFF).
size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const uint8_t c = uint8_t(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t k = 1; k < n; ++k) {
    const uint8_t b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3Fu);
  }
  const uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < min_for_length[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

// Characters that are valid but change what the terminal shows: controls and invisible reordering.
bool is_unsafe(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void append_escaped(std::string& out, uint8_t b) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}
}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence(s, i, &cp);
    if (n == 0) {  // one bad byte; the next byte may start a good sequence
      append_escaped(out, uint8_t(s[i++]));
      continue;
    }
    if (is_unsafe(cp)) {
      for (size_t k = 0; k < n; ++k) append_escaped(out, uint8_t(s[i + k]));
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace ar
