#include "engine_calls.h"

#include "cli/app.h"
#include "core/float_mode.h"
#include "io/text_source.h"

namespace nb = nanobind;

namespace ar::py {

namespace {
template <class F>
auto engine_call(LogBridge& bridge, F&& f) {
  nb::gil_scoped_release nogil;
  LogBridge::Scope scope(bridge);
  DenormalsFlushed ftz;  // this thread's arithmetic as the CLI's main thread runs it (core/float_mode.h)
  return f();
}
}  // namespace

int run_command(const std::vector<std::string>& args, LogBridge& bridge) {
  return engine_call(bridge, [&] { return cli::run_command_line(args); });
}

std::string evaluate(const cli::EvalRequest& req, const std::string& text_path, const std::string& field,
                     const std::string& text, LogBridge& bridge) {
  return engine_call(bridge, [&] {
    return cli::evaluate_text(req, [&] {
             TextSourceOptions src;
             src.option = "text";
             return text_path.empty() ? text : read_all_text(text_path, field, src);
           }).dump();
  });
}

cli::LogitsResult logits(const std::string& model, const std::string& text, LogBridge& bridge) {
  return engine_call(bridge, [&] { return cli::text_logits(model, text); });
}

}  // namespace ar::py
