// Plugins (include/sluice/plugin.h, docs/plugins.md): shared libraries loaded with dlopen at
// start-up whose ABI version must equal this sluice's (and whose minor version is not newer),
// and which register named logits processors and IO processors. A PluginSet holds the
// libraries of one model (the --plugin flags plus the model's sluice.json "plugins") and the
// processors they registered; the generation engine creates one instance of each logits
// processor, a scoring model serves each IO processor (io/plugin_io.h). Errors name the file
// and the reason.
//
// Load/Register before sharing; const afterwards (Find, Validate and Create are thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/logits_processor.h"
#include "sluice/plugin.h"
#include "sluice/status.h"

namespace sluice {

class LogitsProcessorFactory {
 public:
  LogitsProcessorFactory(const sluice_logits_processor& desc, std::string origin);
  const std::string& name() const { return name_; }
  const std::string& origin() const { return origin_; }  // the plugin file (or "builtin")
  uint32_t flags() const { return desc_.flags; }
  // InvalidArgument "logits_processors: <name>: <the plugin's message>".
  Status Validate(const sluice_request_params& params) const;
  StatusOr<std::unique_ptr<LogitsProcessor>> Create(int vocab_size, int max_rows) const;

 private:
  sluice_logits_processor desc_{};
  std::string name_, origin_;
};

// A registered IO processor: its descriptor (name copied) and the file that registered it.
struct IoProcessorEntry {
  sluice_io_processor desc{};
  std::string name, origin;
};

// "embed", "classify", "score", "token-classify", "clip" (nullptr for an unknown
// SLUICE_TASK_*).
const char* IoTaskName(uint32_t task);

class PluginSet {
 public:
  PluginSet() = default;
  ~PluginSet();
  PluginSet(const PluginSet&) = delete;
  PluginSet& operator=(const PluginSet&) = delete;

  // dlopen + ABI check + init. FailedPrecondition "plugin <path>: <reason>" (missing file or
  // symbol, ABI mismatch, an error of its init or of a registration). A file already loaded
  // (same canonical path) is not loaded twice.
  Status LoadLibrary(const std::string& path);
  // Registers a processor directly (tests; libraries call this through the host table).
  Status Register(const sluice_logits_processor& desc, const std::string& origin);
  Status RegisterIo(const sluice_io_processor& desc, const std::string& origin);

  const LogitsProcessorFactory* Find(const std::string& name) const;
  const std::vector<std::unique_ptr<LogitsProcessorFactory>>& processors() const {
    return processors_;
  }
  const std::vector<std::string>& libraries() const { return paths_; }
  bool empty() const { return processors_.empty(); }
  // "a, b" (or "none").
  std::string Names() const;

  const std::vector<std::unique_ptr<IoProcessorEntry>>& io_processors() const {
    return io_processors_;
  }
  const IoProcessorEntry* FindIo(const std::string& name) const;
  std::string IoNames() const;  // "a, b" (or "none")

 private:
  std::vector<std::unique_ptr<LogitsProcessorFactory>> processors_;
  std::vector<std::unique_ptr<IoProcessorEntry>> io_processors_;
  std::vector<std::string> paths_;  // canonical paths of the loaded libraries
  std::vector<void*> handles_;
};

// A set of the given libraries (in order); the first failure stops.
StatusOr<std::shared_ptr<PluginSet>> LoadPlugins(const std::vector<std::string>& paths);

}  // namespace sluice
