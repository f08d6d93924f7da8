#include "model/tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "core/error.h"
#include "model/tokenizer/unicode.h"

namespace ar::tok {

namespace {
uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
}  // namespace

BpeModel::BpeModel(std::vector<std::string> pieces, const std::vector<std::pair<std::string, std::string>>& merges,
                   const BpeOptions& opt)
    : pieces_(std::move(pieces)), opt_(opt) {
  ids_.reserve(pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (!pieces_[i].empty()) ids_.emplace(pieces_[i], int32_t(i));
  for (size_t r = 0; r < merges.size(); ++r) {
    int32_t a = find(merges[r].first), b = find(merges[r].second), m = find(merges[r].first + merges[r].second);
    if (a < 0 || b < 0 || m < 0) continue;  // a merge whose parts are not tokens can never fire
    merges_.emplace(key(a, b), std::make_pair(int32_t(r), m));
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    byte_ids_[b] = find(buf);
  }
}

int32_t BpeModel::find(std::string_view piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

void BpeModel::merge(std::vector<int32_t>& sym, std::vector<std::string_view>& text) const {
  const size_t n = sym.size();
  if (n < 2) return;
  std::vector<int64_t> next(n), prev(n);
  std::vector<uint32_t> ver(n, 0);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? int64_t(i + 1) : -1;
    prev[i] = int64_t(i) - 1;
  }
  struct Cand {
    int32_t rank;
    int64_t left, right;
    int32_t id;
    uint32_t vl, vr;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand> heap;
  auto push = [&](int64_t l) {
    if (l < 0 || next[size_t(l)] < 0) return;
    int64_t r = next[size_t(l)];
    int32_t a = sym[size_t(l)], b = sym[size_t(r)];
    if (a < 0 || b < 0) return;
    if (opt_.rank_by_merged_id) {  // symbols are adjacent in the word: their concatenation is a view
      int32_t m = find(std::string_view(text[size_t(l)].data(), text[size_t(l)].size() + text[size_t(r)].size()));
      int32_t rank = m < 0 ? kNoMerge : opt_.merged_rank.empty() ? m : opt_.merged_rank[size_t(m)];
      if (rank != kNoMerge) heap.push({rank, l, r, m, ver[size_t(l)], ver[size_t(r)]});
    } else if (auto it = merges_.find(key(a, b)); it != merges_.end()) {
      heap.push({it->second.first, l, r, it->second.second, ver[size_t(l)], ver[size_t(r)]});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int64_t(i));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    size_t l = size_t(c.left), r = size_t(c.right);
    if (sym[l] == -2 || sym[r] == -2 || next[l] != c.right || ver[l] != c.vl || ver[r] != c.vr) continue;
    sym[l] = c.id;
    text[l] = std::string_view(text[l].data(), text[l].size() + text[r].size());  // adjacent in the word
    ++ver[l];
    sym[r] = -2;  // dead
    next[l] = next[r];
    if (next[r] >= 0) prev[size_t(next[r])] = int64_t(l);
    push(prev[l]);
    push(int64_t(l));
  }
  size_t w = 0;
  for (int64_t i = 0; i >= 0; i = next[size_t(i)]) {
    sym[w] = sym[size_t(i)];
    text[w] = text[size_t(i)];
    ++w;
  }
  sym.resize(w);
  text.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    if (int32_t id = find(word); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (opt_.cache) {
    std::lock_guard<std::mutex> lk(cache_mu_);
    if (auto it = cache_.find(std::string(word)); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> sym;
  std::vector<std::string_view> text;
  for (size_t i = 0; i < word.size();) {
    size_t n = utf8_len(word, i);
    text.push_back(word.substr(i, n));
    sym.push_back(find(text.back()));  // -1: not in the vocabulary
    i += n;
  }
  merge(sym, text);
  std::vector<int32_t> ids;
  bool last_unk = false;
  for (size_t i = 0; i < sym.size(); ++i) {
    if (sym[i] >= 0) {
      ids.push_back(sym[i]);
      last_unk = false;
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (unsigned char b : text[i]) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : text[i]) ids.push_back(byte_ids_[b]);
        last_unk = false;
        continue;
      }
    }
    if (opt_.unk_id < 0)
      fail(ErrorKind::InvalidInput, "tokenizer has no token for '" + std::string(text[i]) + "' and no unk token");
    if (!(opt_.fuse_unk && last_unk)) ids.push_back(opt_.unk_id);
    last_unk = true;
  }
  if (opt_.cache && word.size() < 256) {
    std::lock_guard<std::mutex> lk(cache_mu_);
    if (cache_.size() > 200000) cache_.clear();
    cache_.emplace(std::string(word), ids);
  }
  out->insert(out->end(), ids.begin(), ids.end());
}

}  // namespace ar::tok
