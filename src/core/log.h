// Logging: the only globals in the project are the log sink's level and tag (set once by the CLI).
#pragma once
#include <string>

namespace ar {
enum class LogLevel { Debug, Info, Warn, Error, Quiet };
void set_log_level(LogLevel l);
void set_log_tag(const std::string& tag);  // "rank 1": every line names its process ("" = none)
void log(LogLevel l, const std::string& msg);
inline void log_info(const std::string& m) { log(LogLevel::Info, m); }
inline void log_warn(const std::string& m) { log(LogLevel::Warn, m); }
}  // namespace ar
