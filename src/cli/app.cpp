#include "cli/app.h"

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/top_level.h"
#include "core/printable.h"

namespace ar::cli {

int run_command_line(std::vector<std::string> args) {
  CLI::App app{"autoround: SignRound (AutoRound) weight quantization for Hugging Face LLMs", "autoround"};
  app.require_subcommand(1);
  // Usage errors (unknown or missing options, values out of range: cli/option_checks.h) are one line.
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return "error: " + printable(e.what()) + "\n"; });
  Registry reg;
  register_convert(app, reg);
  register_generate(app, reg);
  register_eval(app, reg);
  register_quantize(app, reg);
  register_logits(app, reg);
  register_launch(app, reg);
  if (const int rc = handle_top_level(app, args); rc >= 0) return rc;  // --version, --help, typos
  // auto-round style: `autoround --model DIR ...` (no subcommand) means `autoround quantize ...`.
  if (!args.empty() && args[0].rfind("--", 0) == 0) args.insert(args.begin(), "quantize");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ExtrasError& e) {
    throw UsageError(explain_extras(app, args, e.what()));
  } catch (const CLI::Success& e) {  // --help, --version of a subcommand
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  return run_selected(app, reg);  // non-zero only from `launch`: a failed rank's code
}

}  // namespace ar::cli
