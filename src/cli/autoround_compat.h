// auto-round's command-line habits on `quantize` (issue 11): its flags and spellings are accepted.
// Flags that change nothing here print a one-line note; values we cannot honour are usage errors that
// say what is supported. Also: the nearest known word for a typo'd option or subcommand.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipeline/quantize.h"

namespace ar::cli {

struct CompatFlags {
  bool sym = false, low_gpu_mem_usage = false, disable_eval = false, torch_compile = false;
  std::string data_type, model_dtype, scale_dtype, tasks;
  int64_t nblocks = 1, act_bits = 16;
};

void register_compat_flags(CLI::App* sub, CompatFlags& f);

// Checks the flags against what this build does and applies --sym; returns one note per flag that
// has no effect here. `asym` is the value of --asym (both given is a contradiction).
std::vector<std::string> apply_compat_flags(const CompatFlags& f, const std::function<bool(const char*)>& given,
                                            bool asym);

// The candidate closest to `word` by edit distance, if it is close enough to be a typo (at most a third
// of the word's length, at least 1), else "".
std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ar::cli
