// BPE over one pre-tokenized word, shared by byte-level (GPT-2, Llama-3, Qwen) and SentencePiece
// (Llama-2, Mistral, Phi-3) tokenizers. Symbols start as the word's code points; the adjacent pair
// with the lowest rank is merged first (leftmost on ties) until no pair can merge, in O(n log n)
// with a heap over a linked list. Ranks come from an HF merges list, or (tiktoken) from the rank of
// the merged token itself. Unknown code points become byte-fallback tokens <0xXX> or unk.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ar::tok {

// Transparent hash so maps keyed by std::string can be probed with a string_view (no allocation).
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>>;

constexpr int32_t kNoMerge = 0x7fffffff;

struct BpeOptions {
  bool byte_fallback = false;
  bool ignore_merges = false;  // a word that is itself in the vocabulary is emitted whole (Llama-3)
  bool rank_by_merged_id = false;  // tiktoken: rank of a pair = id of the concatenation
  // With rank_by_merged_id: optional rank per merged id (SentencePiece: by descending score);
  // kNoMerge marks pieces that may not be produced by a merge (control, unused, byte).
  std::vector<int32_t> merged_rank;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool cache = true;  // memoize words (byte-level tokenizers see the same words again and again)
};

class BpeModel {
 public:
  BpeModel() = default;
  BpeModel(std::vector<std::string> pieces, const std::vector<std::pair<std::string, std::string>>& merges,
           const BpeOptions& opt);
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;
  int32_t find(std::string_view piece) const;  // -1 if absent
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  int32_t size() const { return int32_t(pieces_.size()); }
  int32_t byte_token(uint8_t b) const { return byte_ids_[b]; }

 private:
  void merge(std::vector<int32_t>& sym, std::vector<std::string_view>& text) const;

  std::vector<std::string> pieces_;
  PieceMap ids_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left,right) -> (rank, merged id)
  BpeOptions opt_;
  int32_t byte_ids_[256];
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace ar::tok
