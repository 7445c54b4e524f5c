#include "cli/common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/log.h"

namespace sluice::cli {

void AddModelFlags(CLI::App* app, ModelFlags* f, bool model_option) {
  if (model_option)
    app->add_option("--model", f->model, "Hugging Face model directory")->required();
  app->add_option("--dtype", f->dtype,
                  "auto (checkpoint dtype) | float32 | bfloat16 | float16 | int8 (CPU scoring "
                  "models: linear layers int8 per-channel, activations quantised per token)")
      ->capture_default_str();
  app->add_option("--device", f->device, "cpu | cuda[:N]")->capture_default_str();
  app->add_option("--task", f->task,
                  "embed | classify | score | generate (default: from the architecture)");
  app->add_option("--threads", f->threads, "CPU threads (0 = all available)")
      ->capture_default_str();
  app->add_option("--max-batch-tokens", f->max_batch_tokens,
                  "token budget of one packed batch (0 = 8192 on CPU, 65536 on CUDA)")
      ->capture_default_str();
  app->add_option("--max-num-seqs", f->max_num_seqs,
                  "sequences per batch at most (0 = 256 on CPU, 1024 on CUDA)")
      ->capture_default_str();
  app->add_option("--prefix-reuse", f->prefix_reuse,
                  "auto | on | off: compute a prefix shared by every sequence of a batch once "
                  "(causal models with last-token pooling; auto = on for CUDA)")
      ->capture_default_str();
  app->add_option("--cuda-graphs", f->cuda_graphs,
                  "auto | on | off: replay the forward of small batches from CUDA graphs "
                  "recorded at load, one per token-count bucket (auto = on for CUDA; off = "
                  "launch every kernel, like vLLM's --enforce-eager)")
      ->capture_default_str();
  app->add_option("--cuda-graph-max-tokens", f->cuda_graph_max_tokens,
                  "largest token-count bucket recorded as a CUDA graph (batches above it run "
                  "eagerly)")
      ->capture_default_str();
  app->add_option("--residual-dtype", f->residual_dtype,
                  "f32 | activation: the residual stream of pre-norm decoders (Qwen3) and "
                  "ModernBERT in f32, or "
                  "in the activation dtype (bf16/f16 on CUDA, as transformers and vLLM keep it; "
                  "a few percent faster, slightly less accurate)")
      ->capture_default_str();
  app->add_flag("--batch-invariant", f->batch_invariant,
                "CUDA: results of a sequence independent of the batch around it (generation: the "
                "same tokens alone, batched, chunked or after preemption); slower. CPU results "
                "are batch invariant without it");
  app->add_flag("--profile", f->profile,
                "time every backend op (synchronising) and print a breakdown at the end");
}

StatusOr<EngineOptions> ToEngineOptions(const ModelFlags& f) {
  EngineOptions o;
  o.model_dir = f.model;
  if (f.dtype != "auto") {
    DType t;
    if (!ParseDType(f.dtype, &t)) {
      return InvalidArgument("--dtype: unknown dtype \"" + f.dtype +
                             "\" (auto, float32, bfloat16, float16, int8)");
    }
    o.dtype = t;
  }
  if (!f.task.empty()) {
    Task t;
    if (!ParseTask(f.task, &t)) {
      return InvalidArgument("--task: unknown task \"" + f.task +
                             "\" (embed, classify, score, token-classify, generate)");
    }
    o.task = t;
  }
  if (f.device == "cpu") {
    o.backend.device = DeviceKind::kCpu;
  } else if (f.device.rfind("cuda", 0) == 0) {
    o.backend.device = DeviceKind::kCuda;
    if (f.device.size() > 5 && f.device[4] == ':')
      o.backend.device_index = std::stoi(f.device.substr(5));
  } else {
    return InvalidArgument("--device: expected cpu or cuda[:N], got \"" + f.device + "\"");
  }
  if (f.threads < 0) return InvalidArgument("--threads must be >= 0");
  o.backend.num_threads = f.threads;
  if (f.max_batch_tokens < 0) return InvalidArgument("--max-batch-tokens must be >= 0");
  if (f.max_num_seqs < 0) return InvalidArgument("--max-num-seqs must be >= 0");
  // 0 = the device's default, resolved by Engine::Load (a GPU needs far larger batches).
  const bool gpu = o.backend.device == DeviceKind::kCuda;
  o.max_batch_tokens = f.max_batch_tokens;
  o.max_num_seqs = f.max_num_seqs;
  o.profile = f.profile;
  if (f.prefix_reuse == "auto") {
    o.prefix_reuse = PrefixReuse::kAuto;
  } else if (f.prefix_reuse == "on") {
    o.prefix_reuse = PrefixReuse::kOn;
  } else if (f.prefix_reuse == "off") {
    o.prefix_reuse = PrefixReuse::kOff;
  } else {
    return InvalidArgument("--prefix-reuse: expected auto, on or off, got \"" + f.prefix_reuse +
                           "\"");
  }
  if (f.cuda_graphs == "auto") {
    o.cuda_graphs = CudaGraphs::kAuto;
  } else if (f.cuda_graphs == "on") {
    o.cuda_graphs = CudaGraphs::kOn;
  } else if (f.cuda_graphs == "off") {
    o.cuda_graphs = CudaGraphs::kOff;
  } else {
    return InvalidArgument("--cuda-graphs: expected auto, on or off, got \"" + f.cuda_graphs +
                           "\"");
  }
  if (f.cuda_graphs == "on" && !gpu) {
    return InvalidArgument("--cuda-graphs on needs --device cuda");
  }
  if (f.cuda_graphs == "on" && f.profile) {
    return InvalidArgument(
        "--cuda-graphs on and --profile exclude each other (profiling "
        "synchronises after every op)");
  }
  if (f.batch_invariant && !gpu) {
    return InvalidArgument(
        "--batch-invariant needs --device cuda (CPU results are batch invariant already)");
  }
  o.backend.batch_invariant = f.batch_invariant;
  if (f.cuda_graph_max_tokens < 0) return InvalidArgument("--cuda-graph-max-tokens must be >= 0");
  if (f.residual_dtype != "f32" && f.residual_dtype != "activation") {
    return InvalidArgument("--residual-dtype: expected f32 or activation, got \"" +
                           f.residual_dtype + "\"");
  }
  o.activation_residual = f.residual_dtype == "activation";
  o.cuda_graph_max_tokens = f.cuda_graph_max_tokens;
  return o;
}

namespace {

struct PulledModelPolicy {
  std::string cache_root;  // canonical; empty: no cache
  bool allow_plugins = false;
};
PulledModelPolicy& Pulled() {
  static PulledModelPolicy p;
  return p;
}

// Whether dir lies inside the model cache (a pulled model).
bool InModelCache(const std::string& dir) {
  const std::string& root = Pulled().cache_root;
  if (root.empty()) return false;
  std::error_code ec;
  const std::string d = std::filesystem::weakly_canonical(dir, ec).string();
  if (ec) return false;
  return d.size() > root.size() && d.compare(0, root.size(), root) == 0 && d[root.size()] == '/';
}

}  // namespace

void SetPulledModelPolicy(const std::string& cache_dir, bool allow_plugins) {
  Pulled().allow_plugins = allow_plugins;
  Pulled().cache_root.clear();
  if (cache_dir.empty()) return;
  std::error_code ec;
  const auto c = std::filesystem::weakly_canonical(cache_dir, ec);
  if (!ec) Pulled().cache_root = c.string();
}

namespace {

StatusOr<std::shared_ptr<const PluginSet>> LoadPluginPaths(const std::vector<std::string>& first,
                                                           const std::vector<std::string>& more,
                                                           const std::string& dir,
                                                           bool generation) {
  if (!more.empty() && !Pulled().allow_plugins && InModelCache(dir)) {
    std::string names;
    for (const std::string& m : more) names += (names.empty() ? "" : ", ") + m;
    return FailedPrecondition(
        dir + " was pulled into the model cache and its sluice.json names plugins (" + names +
        "): a downloaded model does not load native code unless the server runs with "
        "--allow-pulled-model-plugins");
  }
  std::vector<std::string> paths = first;
  paths.insert(paths.end(), more.begin(), more.end());
  if (paths.empty()) return std::shared_ptr<const PluginSet>();
  ASSIGN_OR_RETURN(std::shared_ptr<PluginSet> set, LoadPlugins(paths));
  if (generation && !set->io_processors().empty()) {
    const IoProcessorEntry& e = *set->io_processors()[0];
    return FailedPrecondition("plugin " + e.origin + ": IO processor " + e.name +
                              " needs a scoring model (task " + IoTaskName(e.desc.task) + "); " +
                              dir + " is served as a generation model");
  }
  if (!generation && !set->processors().empty()) {
    const LogitsProcessorFactory& f = *set->processors()[0];
    return FailedPrecondition("plugin " + f.origin() + ": logits processor " + f.name() +
                              " needs a generation model; " + dir +
                              " is served as a scoring model");
  }
  SLUICE_LOG_INFO("plugins of {}: {} libraries; logits processors: {}; IO processors: {}", dir,
                  set->libraries().size(), set->Names(), set->IoNames());
  return std::shared_ptr<const PluginSet>(std::move(set));
}

}  // namespace

StatusOr<std::shared_ptr<const PluginSet>> LoadModelPlugins(const std::vector<std::string>& first,
                                                            const ModelBundle& bundle,
                                                            bool generation) {
  return LoadPluginPaths(first, bundle.overrides.plugins, bundle.dir, generation);
}

StatusOr<std::shared_ptr<const PluginSet>> LoadModelPlugins(const std::vector<std::string>& first,
                                                            const std::string& dir) {
  ASSIGN_OR_RETURN(SluiceOverrides overrides, LoadSluiceOverrides(dir));
  return LoadPluginPaths(first, overrides.plugins, dir, /*generation=*/false);
}

StatusOr<std::unique_ptr<Engine>> LoadEngine(const ModelFlags& f) {
  ASSIGN_OR_RETURN(EngineOptions o, ToEngineOptions(f));
  const double t0 = NowSeconds();
  ASSIGN_OR_RETURN(auto engine, Engine::Load(o));
  const ModelInfo& i = engine->info();
  SLUICE_LOG_INFO("model {}: {} ({} params, {} layers, hidden {})", i.dir, i.architecture,
                  i.parameters, i.num_layers, i.hidden_size);
  SLUICE_LOG_INFO("task {}, dtype {} (checkpoint {}), device {}", TaskName(i.task),
                  DTypeName(i.compute_dtype), DTypeName(i.checkpoint_dtype), i.backend);
  SLUICE_LOG_INFO("head: {}", i.head);
  SLUICE_LOG_INFO("limits: max_batch_tokens {}, max_num_seqs {}, max tokens per input {}",
                  engine->options().max_batch_tokens, engine->options().max_num_seqs,
                  i.max_sequence_length);
  SLUICE_LOG_INFO("shared-prefix reuse: {}", engine->prefix_reuse() ? "on" : "off");
  // What the model keeps its residual stream in, and why --residual-dtype activation changed
  // nothing where it could not (BERT-family encoders; the CPU, whose activations are f32).
  if (!engine->options().activation_residual) {
    SLUICE_LOG_INFO("residual stream: {}{}", DTypeName(i.residual_dtype),
                    i.residual_selectable ? " (--residual-dtype f32)" : " (the activation dtype)");
  } else if (!i.residual_selectable) {
    SLUICE_LOG_WARN(
        "residual stream: {}, the activation dtype: --residual-dtype activation has no effect "
        "on {}, whose residual stream is always in the activation dtype",
        DTypeName(i.residual_dtype), i.architecture);
  } else if (i.residual_dtype == DType::kF32) {
    SLUICE_LOG_WARN(
        "residual stream: f32: --residual-dtype activation has no effect here, the activation "
        "dtype next to {} weights on this device is f32",
        DTypeName(i.compute_dtype));
  } else {
    SLUICE_LOG_INFO("residual stream: {} (--residual-dtype activation)",
                    DTypeName(i.residual_dtype));
  }
  const std::vector<int64_t> buckets = engine->graph_buckets();
  if (buckets.empty()) {
    SLUICE_LOG_INFO("CUDA graphs: off");
  } else {
    SLUICE_LOG_INFO("CUDA graphs: on for batches of up to {} tokens", buckets.back());
  }
  SLUICE_LOG_INFO("loaded in {:.2f} s", NowSeconds() - t0);
  return engine;
}

int ReportError(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

double NowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

ProgressBar::ProgressBar(std::string what, size_t total, std::string unit, bool tokens)
    : what_(std::move(what)),
      total_(total),
      unit_(std::move(unit)),
      tokens_(tokens),
      start_(NowSeconds()),
      tty_(isatty(2) != 0) {}

void ProgressBar::Update(size_t done, int64_t tokens) {
  const double now = NowSeconds();
  // Redrawn at most every 0.1 s (5 s without a terminal), and once when all are done.
  if (done == total_ ? done == last_done_ : now - last_draw_ < (tty_ ? 0.1 : 5.0)) return;
  last_draw_ = now;
  last_done_ = done;
  const double el = std::max(now - start_, 1e-9);
  const double frac = total_ ? static_cast<double>(done) / total_ : 1.0;
  const int width = 30;
  const int fill = static_cast<int>(frac * width);
  std::string bar(fill, '=');
  if (fill < width) bar += '>' + std::string(width - fill - 1, ' ');
  const double eta = frac > 0 ? el * (1 - frac) / frac : 0;
  char tok[48] = "";
  if (tokens_) std::snprintf(tok, sizeof tok, "  %.0f tok/s", tokens / el);
  std::fprintf(stderr, "%s[%s] %zu/%zu %s  %.0f %s/s%s  elapsed %.1fs  eta %.1fs%s",
               tty_ ? "\r" : "", bar.c_str(), done, total_, what_.c_str(), done / el, unit_.c_str(),
               tok, el, eta, tty_ ? "" : "\n");
  std::fflush(stderr);
}

void ProgressBar::Finish(size_t done, int64_t tokens) {
  Update(done, tokens);
  if (tty_) std::fprintf(stderr, "\n");
  const double el = std::max(NowSeconds() - start_, 1e-9);
  if (!tokens_) {
    std::fprintf(stderr, "done: %zu %s in %.3f s: %.1f %s/s\n", done, what_.c_str(), el, done / el,
                 unit_.c_str());
    return;
  }
  std::fprintf(stderr, "done: %zu %s, %lld tokens in %.3f s: %.1f %s/s, %.0f tokens/s\n", done,
               what_.c_str(), static_cast<long long>(tokens), el, done / el, what_.c_str(),
               tokens / el);
}

Status ForEachJsonLine(
    const std::string& path, const std::string& what,
    const std::function<Status(size_t, const std::string&, simdjson::dom::element)>& fn) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open " + what + " " + path);
  simdjson::dom::parser parser;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    simdjson::dom::element doc;
    if (auto err = parser.parse(line).get(doc)) {
      return InvalidArgument(path + ":" + std::to_string(lineno) + ": invalid JSON (" +
                             simdjson::error_message(err) + ")");
    }
    RETURN_IF_ERROR(fn(lineno, line, doc));
  }
  return Status::Ok();
}

}  // namespace sluice::cli
