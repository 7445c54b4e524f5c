#include "cli/serve_generate.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/template.h"
#include "core/log.h"
#include "engine/generation_loop.h"
#include "models/registry.h"
#include "server/generation_service.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {

StatusOr<bool> IsGenerationModel(const ModelBundle& b, const std::string& task_flag) {
  Task t;
  if (!task_flag.empty()) {
    if (!ParseTask(task_flag, &t)) return InvalidArgument("--task: unknown task " + task_flag);
    return t == Task::kGenerate;
  }
  const SluiceOverrides& ov = b.overrides;
  if (ov.task) return ParseTask(*ov.task, &t) && t == Task::kGenerate;
  if (ov.yes_token || ov.no_token || ov.yes_token_id || ov.no_token_id) return false;
  return b.arch->default_task == Task::kGenerate;
}

StatusOr<std::string> ResolveChatTemplate(const ModelBundle& b, const std::string& file,
                                          std::string* source) {
  auto read = [](const std::string& path) -> StatusOr<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFound("cannot read chat template " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (!file.empty()) {
    *source = file;
    return read(file);
  }
  const std::string jinja = (std::filesystem::path(b.dir) / "chat_template.jinja").string();
  if (std::filesystem::exists(jinja)) {
    *source = jinja;
    return read(jinja);
  }
  if (b.tokenizer && b.tokenizer->config().chat_template) {
    *source = "tokenizer_config.json";
    return *b.tokenizer->config().chat_template;
  }
  *source = "none";
  return std::string();
}

StatusOr<double> ResolveGpuMemoryUtilization(double given, DeviceKind device,
                                             int64_t kv_cache_memory) {
  if (given == 0) return 0.9;
  if (!(given > 0 && given <= 1)) {
    return InvalidArgument("--gpu-memory-utilization must be in (0, 1]");
  }
  if (device != DeviceKind::kCuda) {
    return InvalidArgument(
        "--gpu-memory-utilization sizes the KV cache from CUDA device memory: it needs --device "
        "cuda (on CPU: --kv-cache-memory)");
  }
  if (kv_cache_memory > 0) {
    return InvalidArgument(
        "--gpu-memory-utilization and --kv-cache-memory: give one (--kv-cache-memory sets the KV "
        "cache's size itself)");
  }
  return given;
}

StatusOr<std::unique_ptr<server::ServedModel>> LoadGenerationModel(const GenerationServeArgs& a) {
  const GenerationServeFlags& g = a.gen;
  if (g.prefix_caching != "on" && g.prefix_caching != "off") {
    return InvalidArgument("--enable-prefix-caching: expected on or off, got \"" +
                           g.prefix_caching + "\"");
  }
  ASSIGN_OR_RETURN(EngineOptions eo, ToEngineOptions(a.model));
  GenerationOptions o;
  o.dtype = eo.dtype;
  o.backend = eo.backend;
  o.activation_residual = eo.activation_residual;
  o.max_model_len = g.max_model_len;
  o.max_num_batched_tokens = g.max_num_batched_tokens;
  o.max_num_seqs = a.model.max_num_seqs;
  o.kv_cache_memory = g.kv_cache_memory;
  if (a.only_model) {
    ASSIGN_OR_RETURN(
        o.gpu_memory_utilization,
        ResolveGpuMemoryUtilization(g.gpu_memory_utilization, o.backend.device, g.kv_cache_memory));
  } else {  // beside other models the flag may be for another one: its range is still checked
    ASSIGN_OR_RETURN(o.gpu_memory_utilization,
                     ResolveGpuMemoryUtilization(g.gpu_memory_utilization, DeviceKind::kCuda, 0));
  }
  o.prefix_caching = g.prefix_caching == "on";
  o.cuda_graphs = a.model.cuda_graphs != "off";
  if (a.model.cuda_graphs == "on" && o.backend.device != DeviceKind::kCuda) {
    return InvalidArgument("--cuda-graphs on needs --device cuda");
  }
  if (a.model.cuda_graphs == "auto") o.cuda_graphs = o.backend.device == DeviceKind::kCuda;

  o.logits_threads = g.logits_threads;
  if (g.logits_threads < 0) return InvalidArgument("--logits-threads must be >= 0");
  if (g.structured_cache_mb < 1) return InvalidArgument("--structured-cache-mb must be >= 1");
  o.structured_cache_bytes = static_cast<size_t>(g.structured_cache_mb) << 20;

  const double t0 = NowSeconds();
  ASSIGN_OR_RETURN(std::shared_ptr<const ModelBundle> bundle, LoadModelBundle(a.model.model));
  ASSIGN_OR_RETURN(o.plugins, LoadModelPlugins(g.plugins, *bundle));
  ASSIGN_OR_RETURN(std::unique_ptr<Generator> gen, Generator::Load(bundle, o));
  const ModelBundle& b = *bundle;
  const GenerationOptions& ro = gen->options();
  const std::string& name = a.served_name;
  SLUICE_LOG_INFO("model {}: {} ({} params, {} layers, hidden {}), task generate, served as \"{}\"",
                  b.dir, b.arch->name, b.weights->TotalParameters(), b.config.num_hidden_layers,
                  b.config.hidden_size, name);
  SLUICE_LOG_INFO("dtype {} (checkpoint {}), device {}", DTypeName(gen->runner().compute_dtype()),
                  DTypeName(gen->runner().checkpoint_dtype()), gen->runner().backend().Describe());
  SLUICE_LOG_INFO(
      "limits: max_model_len {}, max_num_batched_tokens {}, max_num_seqs {}, max_queue_depth "
      "{}; stop tokens {}; loaded in {:.2f} s",
      ro.max_model_len, ro.max_num_batched_tokens, ro.max_num_seqs, a.max_queue_depth,
      gen->stop_token_ids().size(), NowSeconds() - t0);
  const std::shared_ptr<const Tokenizer> tokenizer = b.tokenizer;

  GenerationLoopOptions lo;
  lo.max_queue_depth = a.max_queue_depth;

  // The chat template, parsed once here (a syntax error stops the load with its line); a
  // request's own chat_template is parsed per request.
  std::string tmpl_source;
  ASSIGN_OR_RETURN(std::string tmpl, ResolveChatTemplate(b, g.chat_template, &tmpl_source));
  std::shared_ptr<const chat::Template> parsed;
  if (!tmpl.empty()) {
    auto t = chat::Template::Parse(tmpl);
    if (!t.ok()) return t.status().WithContext("chat template " + tmpl_source);
    parsed = std::make_shared<const chat::Template>(std::move(t).value());
  }
  SLUICE_LOG_INFO("chat template: {}", tmpl.empty() ? "none (/v1/chat/completions needs a "
                                                      "\"chat_template\" per request)"
                                                    : tmpl_source);
  server::GenerationServiceOptions so;
  so.served_name = name;
  so.served_version = a.served_version;
  so.chat_template = tmpl;
  so.render_chat = [parsed, model_tmpl = tmpl](
                       const std::string& text,
                       const std::string& context) -> StatusOr<std::string> {
    ASSIGN_OR_RETURN(chat::Value ctx, chat::ParseJson(context));
    if (parsed && text == model_tmpl) return parsed->Render(ctx);
    ASSIGN_OR_RETURN(chat::Template t, chat::Template::Parse(text));
    return t.Render(ctx);
  };
  so.api_key = a.api_key;
  so.metrics_require_key = a.metrics_require_key;
  so.workers = a.workers;
  return std::unique_ptr<server::ServedModel>(std::make_unique<server::GenerationModel>(
      std::move(gen), bundle, tokenizer.get(), lo, std::move(so)));
}

}  // namespace sluice::cli
