// The `sluice` binary: dispatches to the registered sub-commands (src/cli/cmd_*.cc).
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>

#include "cli/command.h"
#include "core/log.h"

namespace sluice::cli {
std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace sluice::cli

namespace {

// A fatal signal (a bug: sluice never means to raise one) writes its name and a backtrace to
// stderr before the default action ends the process, so a crash under load leaves a trace in
// the server log instead of a silent exit. Only async-signal-safe calls; the main thread gets
// an alternate stack so that a stack overflow there is reported too. Frames print as
// `sluice(+0xOFFSET)`: `addr2line -Cfe sluice 0xOFFSET` names them.
void OnFatalSignal(int sig) {
  const char* name = sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGFPE  ? "SIGFPE"
                     : sig == SIGILL  ? "SIGILL"
                     : sig == SIGABRT ? "SIGABRT"
                                      : "?";
  const char head[] = "\nsluice: fatal signal ";
  (void)!write(STDERR_FILENO, head, sizeof(head) - 1);
  (void)!write(STDERR_FILENO, name, strlen(name));
  const char tail[] = "; backtrace:\n";
  (void)!write(STDERR_FILENO, tail, sizeof(tail) - 1);
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallFatalSignalHandlers() {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  static char alt_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  using sluice::cli::Commands;
  InstallFatalSignalHandlers();
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
