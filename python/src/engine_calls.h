// The engine calls the module exposes. Each runs on the calling thread with the GIL released and
// subnormals flushed (as the CLI runs), the bridge installed as the log observer; errors propagate as
// ar::Error / ar::cli::UsageError (module.cpp maps them to Python exceptions).
#pragma once
#include <string>
#include <vector>

#include "cli/inference.h"
#include "log_bridge.h"

namespace ar::py {

// The autoround command line without the program name (cli/app.h); returns its exit code.
int run_command(const std::vector<std::string>& args, LogBridge& bridge);

// What `eval --json` prints, as JSON text. The text is read from `text_path` (a plain file, JSONL with the
// text in `field`, or a directory of them, as `eval --text`) or, when that is empty, is `text` itself.
std::string evaluate(const cli::EvalRequest& req, const std::string& text_path, const std::string& field,
                     const std::string& text, LogBridge& bridge);

cli::LogitsResult logits(const std::string& model, const std::string& text, LogBridge& bridge);

}  // namespace ar::py
