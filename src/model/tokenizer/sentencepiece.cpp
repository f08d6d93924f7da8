// SentencePiece ModelProto reader (protobuf wire format, the fields we use):
//   ModelProto { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2; NormalizerSpec normalizer_spec = 3; }
//   SentencePiece { string piece = 1; float score = 2; Type type = 3; }  NORMAL=1 UNKNOWN=2 CONTROL=3
//     USER_DEFINED=4 UNUSED=5 BYTE=6
//   TrainerSpec { model_type = 3 (UNIGRAM=1, BPE=2); byte_fallback = 35; unk_id = 40; bos_id = 41; eos_id = 42; }
//   NormalizerSpec { name = 1; add_dummy_prefix = 3; remove_extra_whitespaces = 4; escape_whitespaces = 5; }
// BPE merges the adjacent pair whose merged piece has the highest score (leftmost on ties), which is
// BpeModel's rank-by-merged-piece mode with ranks ordered by descending score.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "io/mapped_file.h"
#include "model/tokenizer/hf_bpe.h"

namespace ar {

namespace {
struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  std::string what;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) fail(ErrorKind::InvalidInput, what + ": truncated protobuf varint");
      uint8_t b = *p++;
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(ErrorKind::InvalidInput, what + ": malformed protobuf varint");
  }
  Reader sub() {
    uint64_t n = varint();
    if (n > uint64_t(end - p)) fail(ErrorKind::InvalidInput, what + ": truncated protobuf field");
    Reader r{p, p + n, what};
    p += n;
    return r;
  }
  uint32_t fixed32() {
    if (end - p < 4) fail(ErrorKind::InvalidInput, what + ": truncated protobuf fixed32");
    uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    return v;
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 1) { if (end - p < 8) fail(ErrorKind::InvalidInput, what + ": truncated"); p += 8; }
    else if (wire == 2) sub();
    else if (wire == 5) fixed32();
    else fail(ErrorKind::InvalidInput, what + ": unsupported protobuf wire type " + std::to_string(wire));
  }
};
}  // namespace

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_sentencepiece(const std::string& path, const nlohmann::json& config) {
  auto file = MappedFile::open(path);
  Reader r{file->data(), file->data() + file->size(), path};
  Spec s;
  s.source = "SentencePiece tokenizer.model";
  s.kind = Kind::SentencePiece;
  std::vector<float> scores;
  std::vector<int> types;
  int64_t model_type = 1, unk = -1, bos = -1, eos = -1;
  bool byte_fallback = false, dummy_prefix = true, remove_ws = false;
  while (r.p < r.end) {
    uint64_t tag = r.varint();
    int field = int(tag >> 3), wire = int(tag & 7);
    if (field == 1 && wire == 2) {
      Reader m = r.sub();
      std::string piece;
      float score = 0;
      int type = 1;
      while (m.p < m.end) {
        uint64_t t = m.varint();
        if ((t >> 3) == 1 && (t & 7) == 2) { Reader str = m.sub(); piece.assign(reinterpret_cast<const char*>(str.p), size_t(str.end - str.p)); }
        else if ((t >> 3) == 2 && (t & 7) == 5) { uint32_t b = m.fixed32(); std::memcpy(&score, &b, 4); }
        else if ((t >> 3) == 3 && (t & 7) == 0) type = int(m.varint());
        else m.skip(int(t & 7));
      }
      s.pieces.push_back(piece);
      scores.push_back(score);
      types.push_back(type);
    } else if (field == 2 && wire == 2) {
      Reader t = r.sub();
      while (t.p < t.end) {
        uint64_t g = t.varint();
        int f = int(g >> 3), w = int(g & 7);
        if (w != 0) { t.skip(w); continue; }
        uint64_t v = t.varint();
        if (f == 3) model_type = int64_t(v);
        else if (f == 35) byte_fallback = v != 0;
        else if (f == 40) unk = int64_t(int32_t(v));
        else if (f == 41) bos = int64_t(int32_t(v));
        else if (f == 42) eos = int64_t(int32_t(v));
      }
    } else if (field == 3 && wire == 2) {
      Reader n = r.sub();
      while (n.p < n.end) {
        uint64_t g = n.varint();
        int f = int(g >> 3), w = int(g & 7);
        if (w != 0) { n.skip(w); continue; }
        uint64_t v = n.varint();
        if (f == 3) dummy_prefix = v != 0;
        else if (f == 4) remove_ws = v != 0;
      }
    } else {
      r.skip(wire);
    }
  }
  if (s.pieces.empty()) fail(ErrorKind::InvalidInput, path + ": no pieces (not a SentencePiece model?)");
  if (model_type != 2)
    fail(ErrorKind::Unsupported, path + ": SentencePiece model type " +
                                     std::string(model_type == 1 ? "UNIGRAM" : model_type == 3 ? "WORD" : "CHAR") +
                                     " is not supported (BPE only)");
  if (!dummy_prefix || remove_ws)
    fail(ErrorKind::Unsupported, path + ": normalizer without dummy prefix or with remove_extra_whitespaces");
  (void)config;
  return from_scored_pieces(std::move(s), scores, types, int32_t(unk), int32_t(bos), int32_t(eos), byte_fallback);
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_scored_pieces(Spec s, const std::vector<float>& scores,
                                                                   const std::vector<int>& types, int32_t unk,
                                                                   int32_t bos, int32_t eos, bool byte_fallback) {
  s.kind = Kind::SentencePiece;
  // Merge ranks: normal and user-defined pieces by descending score (ties: lower id first).
  std::vector<int32_t> order(s.pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
  s.bpe.merged_rank.assign(s.pieces.size(), tok::kNoMerge);
  for (size_t k = 0; k < order.size(); ++k)
    if (types[size_t(order[k])] == 1 || types[size_t(order[k])] == 4) s.bpe.merged_rank[size_t(order[k])] = int32_t(k);
  s.bpe.rank_by_merged_id = true;
  s.bpe.byte_fallback = byte_fallback;
  s.bpe.unk_id = unk;
  s.bpe.fuse_unk = true;
  // User-defined pieces are matched in text; control/unknown pieces only decode (and are skipped).
  std::vector<int32_t> controls;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == 3 || types[i] == 2) controls.push_back(int32_t(i));
    else if (types[i] == 4) s.added.push_back({s.pieces[i], int32_t(i), false});
  }
  s.bos = bos;
  s.eos = eos;
  s.add_bos = bos >= 0;
  auto t = std::make_unique<HfBpeTokenizer>(std::move(s));
  for (int32_t c : controls)
    if (size_t(c) < t->is_special_.size()) t->is_special_[size_t(c)] = true;
  return t;
}

}  // namespace ar
