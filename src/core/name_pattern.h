// Layer-name patterns from outside text (--layer_config keys, a checkpoint's extra_config and gptq
// `dynamic` keys): a regex compiled only within limits that keep std::regex's recursive parser on a
// small stack and its automaton small (at most 512 characters, groups nested at most 16 deep, no
// counted repetition {n}), matched breadth-first where the library offers it (libstdc++'s
// __polynomial: time polynomial in the name's length, whatever the pattern; no back-references).
#pragma once
#include <optional>
#include <regex>
#include <string>

namespace ar {

// The compiled ECMAScript regex, or nullopt with *why set (too long, too deep, or not a regex).
std::optional<std::regex> compile_name_pattern(const std::string& regex, std::string* why);

}  // namespace ar
