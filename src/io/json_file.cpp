// read_json_file and the checked JSON access of JsonIn (json_file.h).
#include "io/json_file.h"

#include <limits>

#include "core/error.h"
#include "io/mapped_file.h"

namespace ar {
nlohmann::json read_json_file(const std::string& path) {
  std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(ErrorKind::InvalidInput, path + ": invalid JSON: " + e.what());
  }
}

namespace {
const nlohmann::json& null_json() {
  static const nlohmann::json n;  // immutable shared null
  return n;
}
const char* type_name(const nlohmann::json& j) { return j.type_name(); }
}  // namespace

void JsonIn::bad(const std::string& msg) const {
  fail(ErrorKind::InvalidInput, file_ + ": " + (where_.empty() ? std::string("top level") : where_) + ": " + msg);
}

bool JsonIn::has(const std::string& key) const {
  if (!j_->is_object()) return false;
  auto it = j_->find(key);
  return it != j_->end() && !it->is_null();
}

JsonIn JsonIn::at(const std::string& key) const {
  if (!j_->is_object()) bad(std::string("must be an object, not ") + type_name(*j_));
  auto it = j_->find(key);
  if (it == j_->end()) fail(ErrorKind::InvalidInput, file_ + ": " + child(key) + ": missing");
  return JsonIn(*it, file_, child(key));
}

JsonIn JsonIn::at(size_t i) const {
  if (!j_->is_array()) bad(std::string("must be an array, not ") + type_name(*j_));
  if (i >= j_->size()) bad("has " + std::to_string(j_->size()) + " elements, element " + std::to_string(i) + " is missing");
  return JsonIn((*j_)[i], file_, where_ + "[" + std::to_string(i) + "]");
}

JsonIn JsonIn::opt(const std::string& key) const {
  if (j_->is_null()) return JsonIn(null_json(), file_, child(key));
  if (!j_->is_object()) bad(std::string("must be an object, not ") + type_name(*j_));
  auto it = j_->find(key);
  return JsonIn(it == j_->end() ? null_json() : *it, file_, child(key));
}

size_t JsonIn::size() const {
  if (!j_->is_array() && !j_->is_object()) bad(std::string("must be an array or object, not ") + type_name(*j_));
  return j_->size();
}

std::vector<JsonIn> JsonIn::elements() const {
  if (!j_->is_array()) bad(std::string("must be an array, not ") + type_name(*j_));
  std::vector<JsonIn> out;
  out.reserve(j_->size());
  for (size_t i = 0; i < j_->size(); ++i) out.emplace_back((*j_)[i], file_, where_ + "[" + std::to_string(i) + "]");
  return out;
}

std::string JsonIn::str() const {
  if (!j_->is_string()) bad(std::string("must be a string, not ") + type_name(*j_));
  return j_->get<std::string>();
}

int64_t JsonIn::i64() const {
  if (j_->is_number_unsigned()) {
    if (j_->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) bad("is out of range");
    return int64_t(j_->get<uint64_t>());
  }
  if (!j_->is_number_integer()) bad(std::string("must be an integer, not ") + type_name(*j_));
  return j_->get<int64_t>();
}

int32_t JsonIn::i32() const {
  const int64_t v = i64();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    bad(std::to_string(v) + " is out of range");
  return int32_t(v);
}

double JsonIn::num() const {
  if (!j_->is_number()) bad(std::string("must be a number, not ") + type_name(*j_));
  return j_->get<double>();
}

bool JsonIn::boolean() const {
  if (!j_->is_boolean()) bad(std::string("must be true or false, not ") + type_name(*j_));
  return j_->get<bool>();
}

std::string JsonIn::str(const std::string& key, const std::string& def) const {
  JsonIn v = opt(key);
  return v.is_null() ? def : v.str();
}

bool JsonIn::boolean(const std::string& key, bool def) const {
  JsonIn v = opt(key);
  return v.is_null() ? def : v.boolean();
}

}  // namespace ar
