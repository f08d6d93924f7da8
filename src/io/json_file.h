// JSON files with errors that name the file, and checked access to what they hold.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ar {

nlohmann::json read_json_file(const std::string& path);

// A value inside JSON read from `file`, with its key path ("normalizer.normalizers[1].pattern").
// nlohmann's const operator[] on a missing key is undefined behaviour (an assertion) and its
// exceptions name neither file nor key; every access here is checked and fails with one line
// "FILE: PATH: what is wrong" (ar::Error, InvalidInput).
class JsonIn {
 public:
  JsonIn(const nlohmann::json& j, std::string file, std::string where = "")
      : j_(&j), file_(std::move(file)), where_(std::move(where)) {}
  const nlohmann::json& json() const { return *j_; }
  const std::string& where() const { return where_; }
  bool is_null() const { return j_->is_null(); }
  bool is_object() const { return j_->is_object(); }
  bool is_array() const { return j_->is_array(); }
  bool is_string() const { return j_->is_string(); }
  // An object holding `key` with a non-null value.
  bool has(const std::string& key) const;
  // Required member / element; fails if this is not an object/array or the key/index is absent.
  JsonIn at(const std::string& key) const;
  JsonIn at(size_t i) const;
  // Member or JSON null when absent (this must be an object or null).
  JsonIn opt(const std::string& key) const;
  size_t size() const;  // elements of an array, members of an object (fails otherwise)
  std::vector<JsonIn> elements() const;  // array elements (fails if not an array)
  // Typed values; fail naming the key when of another type or out of range.
  std::string str() const;
  int64_t i64() const;
  int32_t i32() const;
  double num() const;
  bool boolean() const;
  // Optional typed members: the default when absent or null, an error when of the wrong type.
  std::string str(const std::string& key, const std::string& def) const;
  bool boolean(const std::string& key, bool def) const;
  [[noreturn]] void bad(const std::string& msg) const;

 private:
  std::string child(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }
  const nlohmann::json* j_;
  std::string file_, where_;
};

}  // namespace ar
