#include "io/output_guard.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"

namespace fs = std::filesystem;

namespace ar {

std::string canonical_path(const std::string& path) {
  if (path.empty()) fail(ErrorKind::InvalidInput, "empty output path");
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(fs::path(path), ec), ec);
  if (ec) fail(ErrorKind::Io, path + ": cannot resolve: " + ec.message());
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool path_within(const std::string& inner, const std::string& outer) {
  if (outer == "/") return true;
  return inner == outer || (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
                            inner[outer.size()] == '/');
}

std::string output_marker_json(const std::string& kind) {
  nlohmann::ordered_json j = {{"generator", "autoround.cpp"}, {"kind", kind},
                              {"note", "written by autoround.cpp; lets --overwrite replace this directory"}};
  return j.dump(2) + "\n";
}

bool is_our_output(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  const std::string marker = dir + "/" + kOutputMarker;
  const auto st = fs::symlink_status(marker, ec);
  if (!fs::is_regular_file(st) || fs::file_size(marker, ec) > 4096) return false;
  auto j = nlohmann::json::parse(read_text_file(marker), nullptr, false);
  return j.is_object() && j.contains("generator") && j["generator"] == "autoround.cpp";
}

namespace {
// The places no output may be or contain, whatever the flags: /, $HOME, the current directory, inputs.
void check_protected(const std::string& out, const std::string& flag, const std::vector<std::string>& inputs) {
  const std::string where = flag + " " + out + ": ";
  if (out == "/") fail(ErrorKind::InvalidInput, where + "refusing to write to the root directory");
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    const std::string c = canonical_path(in);
    if (c == out) fail(ErrorKind::InvalidInput, where + "is an input of this run (" + in + "); choose another path");
    if (path_within(c, out))
      fail(ErrorKind::InvalidInput, where + "contains an input of this run (" + c + "); choose another path");
  }
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  if (!ec && path_within(canonical_path(cwd), out))
    fail(ErrorKind::InvalidInput, where + (canonical_path(cwd) == out ? "is" : "contains") +
                                      " the current directory; choose a new directory for the output");
  const char* home = std::getenv("HOME");
  if (home && *home && path_within(canonical_path(home), out))
    fail(ErrorKind::InvalidInput, where + "is or contains the home directory; choose a new directory for the output");
}
}  // namespace

std::string check_output_dir(const OutputSpec& spec) {
  const std::string out = canonical_path(spec.path);
  check_protected(out, spec.flag, spec.inputs);
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return out;
  const std::string where = spec.flag + " " + out + ": ";
  if (!fs::is_directory(st)) fail(ErrorKind::InvalidInput, where + "exists and is not a directory");
  if (!spec.overwrite)
    fail(ErrorKind::InvalidInput, where + "output directory exists (pass --overwrite to replace it; only an empty "
                                          "directory or an earlier autoround output is replaced)");
  if (!fs::is_empty(out, ec) && !is_our_output(out))
    fail(ErrorKind::InvalidInput, where + "is not empty and has no " + kOutputMarker +
                                      ": not an output of autoround, so --overwrite will not replace it");
  return out;
}

std::string check_output_file(const std::string& path, const std::string& flag, bool overwrite,
                              const std::vector<std::string>& inputs,
                              const std::function<bool(const std::string&)>& ours) {
  const std::string out = canonical_path(path);
  check_protected(out, flag, inputs);
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return out;
  const std::string where = flag + " " + out + ": ";
  if (!fs::is_regular_file(st)) fail(ErrorKind::InvalidInput, where + "exists and is not a regular file");
  if (!overwrite) fail(ErrorKind::InvalidInput, where + "file exists (pass --overwrite to replace an earlier output)");
  if (!ours || !ours(out))
    fail(ErrorKind::InvalidInput, where + "file exists and was not written by autoround, so it is not replaced");
  return out;
}

}  // namespace ar
