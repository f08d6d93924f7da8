#include "cli/model_path.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "io/mapped_file.h"

namespace fs = std::filesystem;

namespace ar::cli {

namespace {
// "org/name" with the characters hub repository ids allow.
bool looks_like_hub_name(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size() || s.find('/', slash + 1) != std::string::npos)
    return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  return s.find("..") == std::string::npos && s[0] != '.';
}

std::string hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return std::string(h) + "/hub";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/huggingface/hub";
}

// The snapshot directory: the one refs/main names, else the only one (several without refs/main are
// ambiguous and refused).
std::string pick_snapshot(const std::string& repo, const std::string& name) {
  std::error_code ec;
  const std::string ref = repo + "/refs/main";
  if (fs::is_regular_file(ref, ec)) {
    std::string rev = read_text_file(ref);
    while (!rev.empty() && (rev.back() == '\n' || rev.back() == '\r' || rev.back() == ' ')) rev.pop_back();
    if (!rev.empty() && rev.find('/') == std::string::npos && fs::is_directory(repo + "/snapshots/" + rev, ec))
      return repo + "/snapshots/" + rev;
  }
  std::string only;
  int count = 0;
  for (const auto& e : fs::directory_iterator(repo + "/snapshots", ec))
    if (e.is_directory()) {
      only = e.path().string();
      ++count;
    }
  if (count == 1) return only;
  if (count == 0) return "";
  fail(ErrorKind::InvalidInput, name + ": " + std::to_string(count) + " snapshots in " + repo +
                                    "/snapshots and no refs/main; pass the snapshot directory you mean");
}
}  // namespace

std::string resolve_model_dir(const std::string& arg, const std::string& flag) {
  std::error_code ec;
  if (arg.empty() || fs::exists(arg, ec) || !looks_like_hub_name(arg)) return arg;
  const std::string cache = hub_cache_dir();
  std::string repo = arg;
  for (size_t p = repo.find('/'); p != std::string::npos; p = repo.find('/', p + 2)) repo.replace(p, 1, "--");
  repo = cache + "/models--" + repo;
  const std::string snap = fs::is_directory(repo, ec) ? pick_snapshot(repo, arg) : "";
  if (snap.empty())
    fail(ErrorKind::InvalidInput, flag + " " + arg + ": not a local directory and not in the Hugging Face cache (" +
                                      repo + "); downloading is not supported: fetch it first (e.g. `huggingface-cli "
                                      "download " + arg + "`) or pass the model's local directory");
  return snap;
}

}  // namespace ar::cli
