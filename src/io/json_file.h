// JSON files with errors that name the file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace ar {
nlohmann::json read_json_file(const std::string& path);
}
