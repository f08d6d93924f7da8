// JSON text parsed with every object's keys required to be unique. nlohmann::json keeps the last of
// two equal keys silently, so a file could say one thing to us and another to a different reader
// (two tensors of one name in a safetensors header). Errors name the file (`what`) and the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace ar {

// `top_label` names what a key of the outermost object is ("tensor name", "field"); deeper keys are
// called "key". Syntax errors and duplicates throw ar::Error (InvalidInput).
nlohmann::json parse_json_unique(const char* first, const char* last, const std::string& what,
                                 const std::string& top_label);

}  // namespace ar
