// Fuzz target: a multimodal checkpoint's tensor names (ar::NameMap::detect, which HfModel::open runs on
// the safetensors headers' names), one name per line. Besides "ar::Error or success", an accepted layout
// must be a bijection between the two spellings: every stored name of the language model maps to a
// text-model name whose stored spelling is the same name again, no tensor outside the language model
// reads as a text-model name, and a user's name in either spelling maps to the text-model name; a
// violation aborts as a finding.
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "model/name_map.h"

namespace {
void finding(const char* what, const std::string& name) {
  std::fprintf(stderr, "fuzz: FINDING: %s: '%s'\n", what, name.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ar::fuzz::guarded([&] {
    std::vector<std::string> names(1);
    for (size_t i = 0; i < size && names.size() <= 4096; ++i)
      if (data[i] == '\n') names.emplace_back();
      else names.back() += char(data[i]);
    const ar::NameMap m = ar::NameMap::detect(names, "fuzz");
    for (const std::string& stored : names) {
      const std::optional<std::string> text = m.text_name(stored);
      if (!text) {
        if (ar::NameMap::is_text(stored)) finding("a tensor outside the language model reads as one of its names", stored);
        continue;
      }
      if (ar::NameMap::is_text(*text) && m.stored(*text) != stored) finding("stored(text_name(n)) != n", stored);
      if (ar::NameMap::is_text(*text) && m.from_user(stored) != *text) finding("from_user(stored) != text name", stored);
      if (ar::NameMap::is_text(*text) && m.from_user(m.module(*text)) != *text)
        finding("from_user(module) != text name", stored);
    }
  });
}
