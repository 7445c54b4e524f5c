// Options and helpers shared by the sub-commands that load a model.
#pragma once

#include <simdjson.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "engine/engine.h"
#include "engine/model_bundle.h"
#include "engine/plugins.h"

namespace sluice::cli {

struct ModelFlags {
  std::string model;
  std::string dtype = "auto";
  std::string device = "cpu";
  std::string task;
  int threads = 0;
  int64_t max_batch_tokens = 0;  // 0: the device's default (8192 CPU, 65536 CUDA)
  int max_num_seqs = 0;          // 0: the device's default (256 CPU, 1024 CUDA)
  bool profile = false;
  std::string prefix_reuse = "auto";
  std::string cuda_graphs = "auto";
  int64_t cuda_graph_max_tokens = kDefaultCudaGraphMaxTokens;
  std::string residual_dtype = "f32";
  bool batch_invariant = false;
};

// model_option: register --model (required) too; `serve` registers its own.
void AddModelFlags(CLI::App* app, ModelFlags* f, bool model_option = true);
// Turns flags into engine options; errors name the bad flag.
StatusOr<EngineOptions> ToEngineOptions(const ModelFlags& f);
// Loads the engine and logs the resolved model, task, dtype, device and limits.
StatusOr<std::unique_ptr<Engine>> LoadEngine(const ModelFlags& f);
// The plugins of a model: `first` (the --plugin flags; for `serve`, those of a --model entry
// and then its model.json "plugins"), then the model's sluice.json "plugins" (the same file
// twice is loaded once); an error names the file and the reason. A generation model refuses
// IO processors, a scoring model logits processors (naming the file and the processor). Null
// when there are none.
StatusOr<std::shared_ptr<const PluginSet>> LoadModelPlugins(const std::vector<std::string>& first,
                                                            const ModelBundle& bundle,
                                                            bool generation = true);
// The same for a model without a bundle (a CLIP directory): `first`, then `dir`'s sluice.json
// "plugins"; served as a scoring model (logits processors are refused).
StatusOr<std::shared_ptr<const PluginSet>> LoadModelPlugins(const std::vector<std::string>& first,
                                                            const std::string& dir);
// Models materialised in the model cache (`--model-cache DIR`: pulled from an archive or a URL)
// may name native plugins in their sluice.json only with allow_plugins
// (--allow-pulled-model-plugins): a downloaded model must not load code by default. Set once by
// `serve` before any model loads; the --plugin flags and model.json "plugins" (the operator's)
// are not affected.
void SetPulledModelPolicy(const std::string& cache_dir, bool allow_plugins);

// Prints "error: ..." to stderr and returns the CLI exit code for a status.
int ReportError(const Status& s);

// A progress bar on stderr, redrawn at most ~10 times per second: done/total `what`, the rate
// in `unit`/s and, when tokens are counted, tokens/s.
class ProgressBar {
 public:
  ProgressBar(std::string what, size_t total, std::string unit = "seq", bool tokens = true);
  void Update(size_t done, int64_t tokens);
  void Finish(size_t done, int64_t tokens);

 private:
  std::string what_;
  size_t total_;
  std::string unit_;
  bool tokens_;
  double start_;
  double last_draw_ = -1;
  size_t last_done_ = static_cast<size_t>(-1);
  bool tty_;
};

double NowSeconds();

// Reads a JSONL file: fn(line number, line text, parsed line) for every non-blank line.
// Stops at fn's first error; a line that is not JSON is InvalidArgument "path:N: invalid
// JSON (...)", a missing file NotFound "cannot open <what> <path>".
Status ForEachJsonLine(
    const std::string& path, const std::string& what,
    const std::function<Status(size_t, const std::string&, simdjson::dom::element)>& fn);

}  // namespace sluice::cli
