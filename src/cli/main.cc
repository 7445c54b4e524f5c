// The `sluice` binary: dispatches to the registered sub-commands (src/cli/cmd_*.cc).
#include <algorithm>
#include <iostream>

#include "cli/command.h"
#include "core/log.h"

namespace sluice::cli {
std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace sluice::cli

int main(int argc, char** argv) {
  using sluice::cli::Commands;
  CLI::App app{"sluice: a native serving runtime for rerankers, embedders and classifiers"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version",
      [] { return std::string("sluice ") + SLUICE_VERSION + " (" + SLUICE_BUILD_INFO + ")"; },
      "Print the version and exit");
  // A positional that starts with '-' reads as an option: say how to pass it.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string msg = CLI::FailureMessage::simple(a, e);
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      msg +=
          "(a text that starts with '-' goes after --, e.g. sluice tokenize --model DIR -- "
          "-text)\n";
    }
    return msg;
  });
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  auto& commands = Commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::function<int()> action;
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    auto run = c.setup(sub);
    sub->callback([&action, run] { action = run; });
  }
  CLI11_PARSE(app, argc, argv);
  sluice::InitLogging(log_level);
  return action ? action() : 1;
}
