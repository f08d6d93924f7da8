#include "distributed/handshake.h"

#include <map>

#include "core/error.h"

namespace ar::dist {

namespace {
std::string who(const std::vector<nlohmann::ordered_json>& ids, const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 4; ++i) {
    const auto& id = ids[size_t(ranks[i])];
    s += (i ? ", " : "") + std::string("rank ") + std::to_string(ranks[i]) +
         (id.contains("host") && id["host"].is_string() ? " (" + id["host"].get<std::string>() + ")" : "");
  }
  if (ranks.size() > 4) s += " and " + std::to_string(ranks.size() - 4) + " more";
  return s;
}

std::string shorten(const std::string& s) { return s.size() <= 80 ? s : s.substr(0, 77) + "..."; }

// What differs between two values of a field: the first differing keys of objects, else both values.
std::string difference(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  if (a.is_object() && b.is_object()) {
    std::string s;
    int shown = 0;
    for (const auto& [k, v] : a.items()) {
      const bool same = b.contains(k) && b[k] == v;
      if (same || shown == 3) continue;
      s += (shown++ ? "; " : "") + k + " " + shorten(v.dump()) + " vs " + (b.contains(k) ? shorten(b[k].dump()) : "absent");
    }
    for (const auto& [k, v] : b.items())
      if (!a.contains(k) && shown < 3) s += (shown++ ? "; " : "") + k + " absent vs " + shorten(v.dump());
    return s;
  }
  return shorten(a.dump()) + " vs " + shorten(b.dump());
}
}  // namespace

std::string handshake_mismatch(const std::vector<nlohmann::ordered_json>& ids) {
  if (ids.empty()) return "";
  for (const auto& [field, mine] : ids[0].items()) {
    if (field == "host") continue;
    std::map<std::string, std::vector<int>> groups;  // value -> ranks, in rank order
    std::vector<std::string> order;
    for (size_t r = 0; r < ids.size(); ++r) {
      const std::string v = ids[r].contains(field) ? ids[r][field].dump() : "null";
      if (!groups.count(v)) order.push_back(v);
      groups[v].push_back(int(r));
    }
    if (groups.size() == 1) continue;
    const auto& first = groups[order[0]];
    const auto& other = groups[order[1]];
    const auto& va = ids[size_t(first[0])][field];
    const nlohmann::ordered_json vb = ids[size_t(other[0])].contains(field) ? ids[size_t(other[0])][field] : nullptr;
    return "handshake: the ranks differ in " + field + ": " + who(ids, first) + " vs " + who(ids, other) + ": " +
           difference(va, vb) + (groups.size() > 2 ? " (" + std::to_string(groups.size()) + " different values)" : "");
  }
  return "";
}

nlohmann::ordered_json parse_identity(const std::string& bytes, int rank, const nlohmann::ordered_json& mine) {
  const std::string where = "handshake: rank " + std::to_string(rank) + "'s identity";
  if (bytes.size() > (64u << 10)) fail(ErrorKind::InvalidInput, where + " is " + std::to_string(bytes.size()) + " bytes");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fail(ErrorKind::InvalidInput, where + " is not a JSON object");
  for (const auto& [k, v] : j.items())
    if (!mine.contains(k)) fail(ErrorKind::InvalidInput, where + " has an unknown field '" + k + "' (a different build?)");
  return j;
}

}  // namespace ar::dist
