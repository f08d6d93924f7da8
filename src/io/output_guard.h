// Where the tool may write, decided before any work. Rules (docs/reliability.md, "Output paths"):
// - every output path is made canonical first (absolute, `.`/`..` folded, symlinks of the existing
//   prefix resolved, no trailing slash), so every spelling of one place is judged the same;
// - an output is never `/`, never $HOME or an ancestor of it, never the current directory or an
//   ancestor of it, never an input of the run (the model directory, a checkpoint) nor an ancestor of one;
// - an existing output directory is replaced only with --overwrite, and only when it is empty or holds
//   our marker file (autoround_output.json, written into every directory output we create);
// - an existing output file is replaced only with --overwrite and only when `ours(path)` says we wrote it.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ar {

inline constexpr const char* kOutputMarker = "autoround_output.json";

// Absolute, normalized, symlinks of the existing prefix resolved, no trailing separator.
std::string canonical_path(const std::string& path);
// Whether canonical `inner` equals canonical `outer` or lies below it.
bool path_within(const std::string& inner, const std::string& outer);

struct OutputSpec {
  std::string path;                 // as given by the user
  std::string flag = "--output_dir";  // the option named in errors
  bool overwrite = false;
  bool resumable = false;           // keep "<path>.partial" across failures and continue from it
  std::vector<std::string> inputs;  // paths the run reads: never replaced, never inside the output
  std::string kind = "quantize";    // recorded in the marker
};

// The canonical output path if `spec` may write there; otherwise an InvalidInput error naming the flag,
// the path and the rule. Checks only; creates and removes nothing.
std::string check_output_dir(const OutputSpec& spec);

// Same rules for a single output file (--report, logits --out). `ours` tells whether an existing file at
// the canonical path was written by this tool (nullptr: never replace an existing file).
std::string check_output_file(const std::string& path, const std::string& flag, bool overwrite,
                              const std::vector<std::string>& inputs,
                              const std::function<bool(const std::string&)>& ours);

// Whether `dir` is a real directory (not a symlink) holding our marker as a regular file.
bool is_our_output(const std::string& dir);
// The marker's content for `kind`.
std::string output_marker_json(const std::string& kind);

}  // namespace ar
