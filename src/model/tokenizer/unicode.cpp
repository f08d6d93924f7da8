#include "model/tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <map>

#include "core/error.h"

namespace ar::tok {

size_t utf8_len(std::string_view s, size_t i) {
  uint8_t c = uint8_t(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

size_t utf8_invalid_offset(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(reinterpret_cast<const uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &cp);
    if (n <= 0) return i;
    i += size_t(n);
  }
  return std::string_view::npos;
}

std::string utf8_encode(uint32_t cp) {
  uint8_t buf[4];
  auto n = utf8proc_encode_char(utf8proc_int32_t(cp), buf);
  return std::string(reinterpret_cast<char*>(buf), size_t(n));
}

std::string nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const uint8_t*>(s.data()), utf8proc_ssize_t(s.size()), &out,
                        utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail(ErrorKind::InvalidInput, std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  std::string r(reinterpret_cast<char*>(out), size_t(n));
  std::free(out);
  return r;
}

ByteLevelMap::ByteLevelMap() {
  // Printable Latin-1 bytes map to themselves; the other 68 map to U+0100.. in byte order.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    to_unicode[size_t(b)] = utf8_encode(keep ? uint32_t(b) : next++);
  }
}

std::string ByteLevelMap::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += to_unicode[b];
  return out;
}

bool ByteLevelMap::decode(std::string_view mapped, std::string* out) const {
  for (size_t i = 0; i < mapped.size();) {
    size_t n = utf8_len(mapped, i);
    uint32_t cp = 0;
    if (n == 1) cp = uint8_t(mapped[i]);
    else if (n == 2) cp = (uint32_t(uint8_t(mapped[i]) & 0x1F) << 6) | (uint8_t(mapped[i + 1]) & 0x3F);
    else return false;
    int b = -1;
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
      b = int(cp);
    } else if (cp >= 256 && cp < 256 + 68) {  // invert the enumeration of the non-printable bytes
      uint32_t k = cp - 256;
      for (int c = 0; c < 256; ++c) {
        bool keep = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        if (!keep && k-- == 0) { b = c; break; }
      }
    }
    if (b < 0) return false;
    out->push_back(char(b));
    i += n;
  }
  return true;
}

}  // namespace ar::tok
