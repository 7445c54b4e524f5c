// Sub-command registry for the `sluice` binary. Each src/cli/cmd_*.cc file defines one
// sub-command and registers it with a static Registrar; main.cc only dispatches.
// (CLI sources are compiled into the executable itself, so static registration is safe.)
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace sluice::cli {

struct Command {
  std::string name;
  std::string help;
  // Adds options to `sub`; returns the action run when the sub-command is chosen.
  // The action returns the process exit code.
  std::function<std::function<int()>(CLI::App* sub)> setup;
};

std::vector<Command>& Commands();

struct Registrar {
  explicit Registrar(Command c) { Commands().push_back(std::move(c)); }
};

}  // namespace sluice::cli
