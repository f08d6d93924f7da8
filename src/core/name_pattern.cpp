#include "core/name_pattern.h"

#include <algorithm>

namespace ar {

namespace {
constexpr size_t kMaxLength = 512;
constexpr int kMaxDepth = 16;
}  // namespace

std::optional<std::regex> compile_name_pattern(const std::string& regex, std::string* why) {
  if (regex.size() > kMaxLength) {
    *why = "longer than " + std::to_string(kMaxLength) + " characters";
    return std::nullopt;
  }
  int depth = 0, worst = 0;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\') {
      // A back-reference \N: meaningless in a layer name, unsupported by the breadth-first matcher, and
      // libstdc++ reads its digits into a long that overflows (undefined behaviour) before refusing it.
      if (i + 1 < regex.size() && regex[i + 1] >= '0' && regex[i + 1] <= '9') {
        *why = "an escaped digit \\N (a back-reference; not read in layer patterns)";
        return std::nullopt;
      }
      ++i;  // an escaped character is literal
      continue;
    }
    if (c == '{') {  // a count multiplies the automaton: {1000} of {1000} would not fit in memory
      *why = "a counted repetition {n} (not read in layer patterns)";
      return std::nullopt;
    }
    if (c == '(' || c == '[') worst = std::max(worst, ++depth);
    if (c == ')' || c == ']') --depth;
  }
  if (worst > kMaxDepth) {
    *why = "groups nested more than " + std::to_string(kMaxDepth) + " deep";
    return std::nullopt;
  }
  auto flags = std::regex::ECMAScript | std::regex::optimize;
#ifdef __GLIBCXX__
  flags |= std::regex_constants::__polynomial;  // libstdc++'s breadth-first matcher: no exponential backtracking
#endif
  try {
    return std::regex(regex, flags);
  } catch (const std::regex_error& e) {
    *why = std::string("not a valid regex (") + e.what() + ")";
    return std::nullopt;
  }
}

}  // namespace ar
