// `sluice serve` for a generation model (task generate): the generation engine behind the
// OpenAI completions API (server/generation_service.h).
#pragma once

#include <string>
#include <vector>

#include "cli/common.h"
#include "engine/model_bundle.h"
#include "server/served_model.h"

namespace sluice::cli {

struct GenerationServeFlags {
  int max_model_len = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t kv_cache_memory = 0;
  double gpu_memory_utilization = 0;  // 0: not given (0.9 on CUDA without --kv-cache-memory)
  std::string prefix_caching = "on";
  std::string chat_template;           // --chat-template FILE
  std::vector<std::string> plugins;    // --plugin (repeatable)
  int logits_threads = 0;              // --logits-threads
  int64_t structured_cache_mb = 1024;  // --structured-cache-mb
  bool given = false;                  // any of the above was set on the command line
};

struct GenerationServeArgs {
  ModelFlags model;  // model.model: the version's directory
  GenerationServeFlags gen;
  std::string served_name, served_version = "1", api_key;
  int workers = 2, max_queue_depth = 256;
  bool metrics_require_key = false;  // /metrics behind --api-key
  bool only_model = true;            // the server's one model: flags it does not use are refused
};

// --gpu-memory-utilization (0: not given) for a generation model on `device` with
// `kv_cache_memory` bytes (0: not given): the fraction it uses, or an error when it would be
// ignored (on CPU, or beside --kv-cache-memory, which sizes the KV cache itself).
StatusOr<double> ResolveGpuMemoryUtilization(double given, DeviceKind device,
                                             int64_t kv_cache_memory);

// Whether the model directory is served as a generation model: --task generate, or no
// --task and the architecture's default task is generate (causal LMs without yes/no tokens
// or a task in sluice.json).
StatusOr<bool> IsGenerationModel(const ModelBundle& bundle, const std::string& task_flag);

// Loads a generation model (the generation engine, its chat template) and the service in
// front of it, for the model registry; logs the resolved model, dtype, device and limits.
StatusOr<std::unique_ptr<server::ServedModel>> LoadGenerationModel(const GenerationServeArgs& args);

// The model's chat template: --chat-template FILE, else DIR/chat_template.jinja, else
// tokenizer_config.json's chat_template; "" when none. `source` says which.
StatusOr<std::string> ResolveChatTemplate(const ModelBundle& bundle, const std::string& file,
                                          std::string* source);

}  // namespace sluice::cli
