// Hash64: a fast streaming 64-bit checksum (not cryptographic) that detects corrupted or truncated
// files we wrote earlier (resume state: activations, shards). Bytes are mixed 8 at a time; the digest
// depends only on the byte sequence, not on how it was split across update() calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ar {

class Hash64 {
 public:
  void update(const void* data, size_t n) {
    auto p = static_cast<const uint8_t*>(data);
    total_ += n;
    while (n && fill_) {  // complete a partial word first
      buf_[fill_++] = *p++;
      --n;
      if (fill_ == 8) mix_buffer();
    }
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    while (n--) buf_[fill_++] = *p++;
  }
  uint64_t digest() const {
    Hash64 h = *this;
    uint64_t w = 0;
    std::memcpy(&w, h.buf_, h.fill_);
    h.mix(w ^ (uint64_t(h.fill_) << 56));
    h.mix(total_);
    return h.h_;
  }

 private:
  void mix(uint64_t w) {
    h_ = (h_ ^ w) * 0x9E3779B97F4A7C15ull;
    h_ ^= h_ >> 29;
  }
  void mix_buffer() {
    uint64_t w;
    std::memcpy(&w, buf_, 8);
    mix(w);
    fill_ = 0;
  }
  uint64_t h_ = 0xCBF29CE484222325ull, total_ = 0;
  uint8_t buf_[8] = {};
  size_t fill_ = 0;
};

// Fixed-width lowercase hex (16 digits), as checksums are stored in JSON state files.
inline std::string hex64(uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[size_t(i)] = kDigits[v & 15];
  return s;
}

inline uint64_t hash64(const void* data, size_t n) {
  Hash64 h;
  h.update(data, n);
  return h.digest();
}

}  // namespace ar
