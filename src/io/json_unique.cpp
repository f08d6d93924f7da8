#include "io/json_unique.h"

#include <set>
#include <vector>

#include "core/error.h"
#include "core/printable.h"

namespace ar {

namespace {
struct DuplicateKey {
  std::string key;
  bool top;
};
}  // namespace

nlohmann::json parse_json_unique(const char* first, const char* last, const std::string& what,
                                 const std::string& top_label) {
  std::vector<std::set<std::string>> open;  // keys seen so far in each enclosing object
  auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) open.emplace_back();
    else if (ev == E::object_end && !open.empty()) open.pop_back();
    else if (ev == E::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second)
      throw DuplicateKey{parsed.get<std::string>(), depth == 1};  // depth 1: a key of the outermost object
    return true;
  };
  try {
    return nlohmann::json::parse(first, last, cb);
  } catch (const DuplicateKey& d) {
    fail(ErrorKind::InvalidInput,
         what + ": " + (d.top ? top_label : std::string("key")) + " '" + printable(d.key) + "' appears twice");
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::InvalidInput, what + ": not valid JSON: " + e.what());
  }
}

}  // namespace ar
