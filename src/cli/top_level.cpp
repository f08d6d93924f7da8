#include "cli/top_level.h"

#include <cstdio>

#include "cli/autoround_compat.h"
#include "core/printable.h"

#ifndef AR_VERSION
#define AR_VERSION "unknown"
#endif

namespace ar::cli {

namespace {
std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> option_names(CLI::App* sub) {
  std::vector<std::string> names;
  for (const auto* opt : sub->get_options())
    for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
  return names;
}
}  // namespace

int handle_top_level(CLI::App& app, const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--version" || args[0] == "-V")) {
    std::printf("autoround.cpp %s\n", AR_VERSION);
    return 0;
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s\n", app.help().c_str());
    std::printf("Without a subcommand, `autoround --model DIR ...` runs quantize:\n\n%s",
                app.get_subcommand("quantize")->help().c_str());
    return args.empty() ? 2 : 0;
  }
  if (args[0].empty() || args[0][0] == '-') return -1;
  const auto names = subcommand_names(app);
  for (const auto& n : names)
    if (n == args[0]) return -1;
  const std::string near = nearest_word(args[0], names);
  std::fprintf(stderr, "error: unknown subcommand '%s'%s (subcommands: quantize, convert, eval, generate, logits, launch; "
               "`autoround --model DIR ...` quantizes)\n",
               ar::printable(args[0]).c_str(), near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str());
  return 2;
}

std::string explain_extras(CLI::App& app, const std::vector<std::string>& args, const std::string& what) {
  CLI::App* sub = args.empty() ? nullptr : app.get_subcommand_ptr(args[0]).get();
  if (!sub) return what;
  const auto known = option_names(sub);
  for (const auto& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string near = nearest_word(name, known);
    return "unknown option " + name + " for " + sub->get_name() + (near.empty() ? "" : " (did you mean " + near + "?)") +
           "; `autoround " + sub->get_name() + " --help` lists them";
  }
  return what;
}

}  // namespace ar::cli
