// Parse-time option validation. A value out of range, malformed or contradicting another option is
// a usage error: thrown as CLI::ValidationError from the subcommand's parse-complete callback, so
// main() prints one "error: <why>" line naming the option and exits 2 before any file is read.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "core/error.h"
#include "pipeline/option_limits.h"

namespace ar::cli {

[[noreturn]] inline void usage_error(const std::string& why) { throw CLI::ValidationError(why); }

// Usage error when `why` (a check_limit / check_rate result) is non-empty.
inline void require(const std::string& why) {
  if (!why.empty()) usage_error(why);
}
inline void require_limit(const IntLimit& l, int64_t v) { require(check_limit(l, v)); }

// Runs a library parser of an option value; its InvalidInput/Unsupported becomes a usage error.
template <class F>
auto as_usage(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ar::Error& e) {
    usage_error(e.what());
  }
}

}  // namespace ar::cli
