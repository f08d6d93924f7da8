#include "model/tokenizer_llama2c.h"

#include <cctype>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "io/mapped_file.h"

namespace ar {

Llama2cTokenizer Llama2cTokenizer::load(const std::string& path) {
  auto f = MappedFile::open(path);
  const uint8_t* p = f->data();
  size_t n = f->size(), off = 4;
  if (n < 4) fail(ErrorKind::InvalidInput, path + ": truncated llama2.c tokenizer (no header)");
  uint32_t max_len;
  std::memcpy(&max_len, p, 4);
  Llama2cTokenizer t;
  while (off < n) {
    if (off + 8 > n) fail(ErrorKind::InvalidInput, path + ": truncated entry at byte " + std::to_string(off));
    float score;
    int32_t len;
    std::memcpy(&score, p + off, 4);
    std::memcpy(&len, p + off + 4, 4);
    off += 8;
    if (len < 0 || uint32_t(len) > max_len || off + size_t(len) > n)
      fail(ErrorKind::InvalidInput, path + ": bad piece length " + std::to_string(len) + " for id " +
                                        std::to_string(t.pieces_.size()));
    t.pieces_.emplace_back(reinterpret_cast<const char*>(p + off), size_t(len));
    t.scores_.push_back(score);
    off += size_t(len);
  }
  if (t.pieces_.size() < 259) fail(ErrorKind::InvalidInput, path + ": vocabulary too small for byte fallback");
  for (size_t i = 0; i < t.pieces_.size(); ++i) t.lookup_.emplace(t.pieces_[i], int32_t(i));  // first id wins
  return t;
}

std::vector<int32_t> Llama2cTokenizer::encode(const std::string& text, bool bos, bool eos) const {
  std::vector<int32_t> ids;
  if (bos) ids.push_back(this->bos());
  if (!text.empty()) {
    auto it = lookup_.find(" ");
    if (it != lookup_.end()) ids.push_back(it->second);
  }
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;  // one UTF-8 code point (at most 4 bytes, as run.c groups them)
    while (i + len < text.size() && (uint8_t(text[i + len]) & 0xC0) == 0x80 && len < 4) ++len;
    std::string cp = text.substr(i, len);
    auto it = lookup_.find(cp);
    if (it != lookup_.end()) {
      ids.push_back(it->second);
    } else {
      for (unsigned char b : cp) ids.push_back(int32_t(b) + 3);
    }
    i += len;
  }
  merge(ids);
  if (eos) ids.push_back(this->eos());
  return ids;
}

// Highest-score-first merging, leftmost pair on ties, in O(n log n): a doubly linked list of symbols
// and a max-heap of candidate pairs keyed (score, -left position). A popped candidate is stale when
// either symbol changed since it was pushed; stale entries are skipped. Equivalent to run.c's
// quadratic rescan.
void Llama2cTokenizer::merge(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  std::vector<int64_t> prev(n), next(n);
  std::vector<uint32_t> version(n, 0);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int64_t(i) - 1;
    next[i] = i + 1 < n ? int64_t(i + 1) : -1;
  }
  struct Cand {
    float score;
    int64_t left, right;
    int32_t id;
    uint32_t vl, vr;
    bool operator<(const Cand& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Cand> heap;
  auto push = [&](int64_t l) {
    if (l < 0 || next[size_t(l)] < 0) return;
    int64_t r = next[size_t(l)];
    auto it = lookup_.find(pieces_[size_t(ids[size_t(l)])] + pieces_[size_t(ids[size_t(r)])]);
    if (it != lookup_.end())
      heap.push({scores_[size_t(it->second)], l, r, it->second, version[size_t(l)], version[size_t(r)]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int64_t(i));
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    size_t l = size_t(c.left), r = size_t(c.right);
    if (!alive[l] || !alive[r] || next[l] != c.right || version[l] != c.vl || version[r] != c.vr) continue;
    ids[l] = c.id;
    ++version[l];
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[size_t(next[r])] = int64_t(l);
    push(prev[l]);
    push(int64_t(l));
  }
  std::vector<int32_t> out;
  out.reserve(n);
  for (int64_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(ids[size_t(i)]);
  ids.swap(out);
}

std::string Llama2cTokenizer::decode(int32_t prev, int32_t token) const {
  if (token < 0 || token >= vocab_size())
    fail(ErrorKind::InvalidInput, "token id " + std::to_string(token) + " outside the tokenizer vocabulary");
  std::string piece = pieces_[size_t(token)];
  if (prev == bos() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  unsigned v;
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
      std::sscanf(piece.c_str(), "<0x%02X>", &v) == 1)
    piece = std::string(1, char(v));
  return piece;
}

std::string Llama2cTokenizer::decode_all(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 1; i < ids.size(); ++i) {
    std::string p = decode(ids[i - 1], ids[i]);
    if (p.size() == 1 && !std::isprint(uint8_t(p[0])) && !std::isspace(uint8_t(p[0]))) continue;
    out += p;
  }
  return out;
}

std::string Llama2cTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    if (!(skip_special && (id == bos() || id == eos()))) {
      std::string p = decode(prev, id);
      if (!(p.size() == 1 && !std::isprint(uint8_t(p[0])) && !std::isspace(uint8_t(p[0])))) out += p;
    }
    prev = id;
  }
  return out;
}

}  // namespace ar
