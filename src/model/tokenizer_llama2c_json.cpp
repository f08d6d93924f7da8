#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "model/tokenizer_llama2c.h"

namespace ar {

namespace {
const char* const kSpace = "\xE2\x96\x81";  // U+2581 "▁"
const char* const kSpecial[] = {"<unk>", "<s>", "</s>"};

std::string hf_piece(const std::string& p) {
  std::string s;
  for (char c : p) {
    if (c == ' ') s += kSpace;
    else s.push_back(c);
  }
  return s;
}

bool utf8_boundary(const std::string& s, size_t i) { return i == 0 || i == s.size() || (uint8_t(s[i]) & 0xC0) != 0x80; }

nlohmann::ordered_json added_token(int32_t id) {
  return {{"id", id},          {"content", kSpecial[id]}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false},      {"special", true}};
}
}  // namespace

std::string llama2c_tokenizer_json(const Llama2cTokenizer& tok) {
  using json = nlohmann::ordered_json;
  const int32_t n = tok.vocab_size();
  json vocab = json::object();
  std::map<std::string, int32_t> id_of;
  for (int32_t i = 0; i < n; ++i) {
    const std::string p = i < 3 ? kSpecial[i] : hf_piece(tok.piece(i));
    if (!id_of.emplace(p, i).second) continue;  // a duplicate piece keeps its first id, as run.c looks it up
    vocab[p] = i;
  }
  // Every split of a piece into two pieces is a merge; run.c merges by the merged piece's score
  // (highest first), so that is the rank, ties by the merged id, then the left piece's id.
  std::vector<std::tuple<float, int32_t, int32_t, std::string, std::string>> merges;
  for (int32_t i = 3; i < n; ++i) {
    const std::string p = hf_piece(tok.piece(i));
    if (id_of.at(p) != i || (p.size() == 6 && p.compare(0, 3, "<0x") == 0)) continue;
    for (size_t k = 1; k < p.size(); ++k) {
      if (!utf8_boundary(p, k)) continue;
      auto l = id_of.find(p.substr(0, k)), r = id_of.find(p.substr(k));
      if (l == id_of.end() || r == id_of.end() || l->second < 3 || r->second < 3) continue;
      merges.emplace_back(-tok.score(i), i, l->second, l->first, r->first);
    }
  }
  std::sort(merges.begin(), merges.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a), std::get<2>(a)) < std::tie(std::get<0>(b), std::get<1>(b), std::get<2>(b));
  });
  json merge_list = json::array();
  for (const auto& m : merges) merge_list.push_back(json::array({std::get<3>(m), std::get<4>(m)}));

  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({added_token(0), added_token(1), added_token(2)});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSpace}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}})}};
  j["pre_tokenizer"] = nullptr;
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array({bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", json::array({"<s>"})}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},           {"dropout", nullptr},         {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                {"byte_fallback", true},   {"ignore_merges", false},     {"vocab", vocab},
                {"merges", merge_list}};
  return j.dump(1) + "\n";
}

}  // namespace ar
