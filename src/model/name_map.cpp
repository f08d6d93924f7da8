#include "model/name_map.h"

#include "core/error.h"
#include "core/printable.h"

namespace ar {

namespace {
constexpr const char* kTextRoots[] = {"model.embed_tokens.", "model.layers.", "model.norm.", "lm_head."};
constexpr char kModel[] = "model.", kHead[] = "lm_head.";

bool starts(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// `name` with `from` (a prefix ending in '.', or that prefix without its dot as the whole name) replaced by `to`.
std::optional<std::string> swap_prefix(const std::string& name, const std::string& from, const std::string& to) {
  if (starts(name, from)) return to + name.substr(from.size());
  if (name + "." == from) return to.substr(0, to.size() - 1);
  return std::nullopt;
}
}  // namespace

bool NameMap::is_text(const std::string& name) {
  for (const char* r : kTextRoots)
    if (starts(name, r)) return true;
  return false;
}

NameMap NameMap::detect(const std::vector<std::string>& stored, const std::string& where) {
  size_t legacy = 0, v5 = 0;
  for (const std::string& n : stored) {
    legacy += starts(n, "language_model.model.") || starts(n, "language_model.lm_head.");
    v5 += starts(n, "model.language_model.");
  }
  if ((legacy == 0) == (v5 == 0))
    fail(ErrorKind::InvalidInput, where + (legacy ? ": tensors under both language_model.model. and "
                                                    "model.language_model.: which one is the language model is ambiguous"
                                                  : ": no tensor under language_model.model. or model.language_model. "
                                                    "(a multimodal checkpoint's language model)"));
  NameMap m;
  m.model_stored_ = legacy ? "language_model.model." : "model.language_model.";
  m.head_stored_ = legacy ? "language_model.lm_head." : kHead;
  m.model_module_ = "model.language_model.";
  m.head_module_ = kHead;
  for (const std::string& n : stored)
    if (!m.text_name(n) && is_text(n))
      fail(ErrorKind::InvalidInput, where + ": tensor '" + printable(n) + "' is outside the language model (" +
                                        m.model_stored_ + "*) but has one of its names; mixed layouts are not read");
  return m;
}

std::string NameMap::stored(const std::string& name) const {
  if (!multimodal() || !is_text(name)) return name;
  return starts(name, kHead) ? head_stored_ + name.substr(sizeof kHead - 1) : model_stored_ + name.substr(sizeof kModel - 1);
}

std::string NameMap::module(const std::string& name) const {
  if (!multimodal() || !is_text(name)) return name;
  return starts(name, kHead) ? head_module_ + name.substr(sizeof kHead - 1) : model_module_ + name.substr(sizeof kModel - 1);
}

std::optional<std::string> NameMap::text_name(const std::string& stored) const {
  if (!multimodal()) return stored;
  if (auto n = swap_prefix(stored, model_stored_, kModel); n && starts(stored, model_stored_)) return n;
  if (auto n = swap_prefix(stored, head_stored_, kHead); n && starts(stored, head_stored_)) return n;
  return std::nullopt;
}

std::string NameMap::from_user(const std::string& name) const {
  if (!multimodal()) return name;
  for (const auto& [from, to] : {std::pair{model_stored_, std::string(kModel)}, {head_stored_, std::string(kHead)},
                                 {model_module_, std::string(kModel)}, {head_module_, std::string(kHead)}})
    if (auto n = swap_prefix(name, from, to)) return *n;
  return name;
}

}  // namespace ar
