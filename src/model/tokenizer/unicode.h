// UTF-8 helpers for tokenizers: code point iteration, validation with byte offsets, NFC (utf8proc),
// and GPT-2's reversible byte <-> printable-unicode map used by byte-level BPE.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ar::tok {

// Length of the UTF-8 sequence starting at s[i] (1 for invalid lead bytes, so callers never stall).
size_t utf8_len(std::string_view s, size_t i);
// Offset of the first invalid UTF-8 byte, or npos when s is valid.
size_t utf8_invalid_offset(std::string_view s);
std::string utf8_encode(uint32_t cp);
std::string nfc(std::string_view s);  // Unicode NFC; s must be valid UTF-8

// GPT-2 byte-level alphabet: byte b -> the UTF-8 of a printable code point, and back.
struct ByteLevelMap {
  std::array<std::string, 256> to_unicode;
  ByteLevelMap();
  std::string encode(std::string_view bytes) const;  // bytes -> mapped UTF-8
  // mapped UTF-8 -> bytes; returns false if a code point is outside the alphabet.
  bool decode(std::string_view mapped, std::string* out) const;
};

}  // namespace ar::tok
