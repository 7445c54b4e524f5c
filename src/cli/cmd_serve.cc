// `sluice serve --model DIR | --model NAME=PATH ... | --model-repository DIR`: the HTTP
// server (docs/api.md, docs/model-ops.md).
//
// Start-up: start listening (health answers, readiness 503), load every start-up model
// through the registry (each version warmed up with one forward before it serves), then
// turn ready. SIGTERM/SIGINT: readiness 503 at once, new work refused (503), in-flight
// requests finish within --shutdown-timeout, exit 0.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/image_flags.h"
#include "cli/serve_generate.h"
#include "core/dtype.h"
#include "core/log.h"
#include "engine/engine_loop.h"
#include "grpc/grpc_server.h"
#include "io/model_context.h"
#include "io/plugin_io.h"
#include "server/clip_served.h"
#include "server/http_server.h"
#include "server/model_registry.h"
#include "server/router.h"
#include "serving/model_cache.h"
#include "serving/repository.h"
#include "tokenizer/tokenizer.h"
#include "weights/safetensors.h"

namespace sluice::cli {
namespace {

struct ServeFlags {
  ModelFlags model;                 // model.model unused: the entries below
  std::vector<std::string> models;  // --model DIR | NAME=PATH (repeatable)
  std::string repository;           // --model-repository DIR
  std::string model_control = "none";
  std::vector<std::string> load_models;     // --load-model NAME (explicit control; * = all)
  int64_t memory_budget = 0;                // --model-memory-budget BYTES (0 = none)
  int switch_placement_ms = 150;            // --switch-placement-ms (0 = off)
  std::string model_cache;                  // --model-cache DIR: --model entries naming a source
  bool allow_pulled_model_plugins = false;  // pulled models' sluice.json "plugins" load
  int64_t cache_max_bytes = 0;              // --cache-max-bytes (0 = no limit)
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = -1;  // -1: no gRPC server
  std::string served_name;
  std::string api_key;
  int max_queue_depth = 256;
  int max_inputs_per_request = 1000;
  int max_tokens_per_input = 0;
  int64_t max_body_bytes = 8 << 20;
  bool truncate = false;
  double shutdown_timeout_s = 30;
  double request_timeout_s = 0;
  int io_threads = 1;
  int workers = 2;
  int max_connections = 0;  // 0 = from the file-descriptor limit
  bool metrics_require_key = false;
  std::string batch_coalescing = "on";
  ImageFlags image;                           // image inputs (CLIP models; docs/api.md "Images")
  GenerationServeFlags gen;                   // generation models only
  std::vector<std::string> scoring_only_set;  // scoring-only flags given on the command line
};

// The model flags of one version: the server's, overridden by its model.json.
ModelFlags VersionFlags(const ServeFlags& f, const server::LoadSpec& spec) {
  const serving::ModelConfig& c = spec.config;
  ModelFlags mf = f.model;
  mf.model = spec.path;
  if (c.task) mf.task = *c.task;
  if (c.dtype) mf.dtype = *c.dtype;
  if (c.device) mf.device = *c.device;
  if (c.max_batch_tokens) mf.max_batch_tokens = *c.max_batch_tokens;
  if (c.max_num_seqs) mf.max_num_seqs = static_cast<int>(*c.max_num_seqs);
  return mf;
}

// --model-memory-budget: what a version will take, from its bundle: the weights in the dtype
// they are served in, plus a generation model's KV cache (--kv-cache-memory, or the CPU's
// default 2 GiB; on CUDA without --kv-cache-memory the cache takes what
// --gpu-memory-utilization leaves and is not counted).
StatusOr<int64_t> EstimateMemory(const ServeFlags& f, const server::LoadSpec& spec) {
  const ModelFlags mf = VersionFlags(f, spec);
  if (server::IsClipModelDirectory(mf.model)) {
    // CLIP (two towers in their own layouts): every tensor of every .safetensors file, in
    // the dtype it is served in (f32 unless --dtype says otherwise).
    DType dtype = DType::kF32;
    if (mf.dtype != "auto" && !ParseDType(mf.dtype, &dtype)) {
      return InvalidArgument("dtype: unknown dtype \"" + mf.dtype + "\"");
    }
    int64_t params = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(mf.model, ec)) {
      if (!e.is_regular_file() || e.path().extension() != ".safetensors") continue;
      ASSIGN_OR_RETURN(WeightStore w, WeightStore::OpenFile(e.path().string()));
      params += w.TotalParameters();
    }
    return params * static_cast<int64_t>(DTypeSize(dtype));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ModelBundle> bundle, LoadModelBundle(mf.model));
  DType dtype = bundle->weights->DominantDType();
  if (mf.dtype != "auto" && !ParseDType(mf.dtype, &dtype)) {
    return InvalidArgument("dtype: unknown dtype \"" + mf.dtype + "\"");
  }
  int64_t bytes = bundle->weights->TotalParameters() * static_cast<int64_t>(DTypeSize(dtype));
  if (bundle->overrides.absa && !bundle->overrides.absa->sentiment_model.empty()) {
    // The absa sentiment model is loaded beside it, in the same dtype.
    ASSIGN_OR_RETURN(std::shared_ptr<const ModelBundle> side,
                     LoadModelBundle(bundle->overrides.absa->sentiment_model));
    DType sd = mf.dtype == "auto" ? side->weights->DominantDType() : dtype;
    bytes += side->weights->TotalParameters() * static_cast<int64_t>(DTypeSize(sd));
  }
  ASSIGN_OR_RETURN(bool is_gen, IsGenerationModel(*bundle, mf.task));
  if (is_gen) {
    if (f.gen.kv_cache_memory > 0) {
      bytes += f.gen.kv_cache_memory;
    } else if (mf.device == "cpu") {
      bytes += int64_t{2} << 30;
    }
  }
  return bytes;
}

// sluice.json absa.sentiment_model: the sequence classifier that gives /absa its sentiments,
// loaded beside the token classifier with the same flags (device, dtype, limits), its context
// set as ctx->companion. Null when none is configured; an error when it is not a sequence
// classifier with a tokenizer, or the model is not a token classifier.
StatusOr<std::unique_ptr<Engine>> LoadAbsaSentimentModel(const ModelFlags& mf, const Engine& engine,
                                                         const io::ContextOptions& co,
                                                         ModelContext* ctx) {
  const auto& absa = engine.bundle().overrides.absa;
  if (!absa || absa->sentiment_model.empty()) return std::unique_ptr<Engine>();
  const std::string& path = absa->sentiment_model;
  const std::string what = mf.model + " sluice.json absa.sentiment_model " + path;
  if (ctx->task != "token-classify") {
    return InvalidArgument(what +
                           ": a sentiment model serves a token classifier; this model's "
                           "task is " +
                           ctx->task);
  }
  if (!std::filesystem::is_directory(path)) return NotFound(what + ": no such model directory");
  ModelFlags sf = mf;
  sf.model = path;
  sf.task.clear();
  sf.profile = false;
  auto loaded = LoadEngine(sf);
  if (!loaded.ok()) return loaded.status().WithContext(what);
  std::unique_ptr<Engine> e = std::move(loaded).value();
  if (e->info().task != Task::kClassify) {
    return InvalidArgument(what + ": not a sequence classifier (its task is " +
                           TaskName(e->info().task) + ")");
  }
  const Tokenizer* tok = e->bundle().tokenizer.get();
  if (!tok) return InvalidArgument(what + ": has no tokenizer.json (/absa sends it text)");
  io::ContextOptions sco = co;
  sco.max_tokens_per_input = 0;  // the sentiment model's own limit
  auto sctx = io::BuildModelContext(*e, tok, sco);
  if (!sctx.ok()) return sctx.status().WithContext(what);
  SLUICE_LOG_INFO("model \"{}\": /absa sentiments from {} (labels {})", co.served_name, path,
                  sctx->labels.size());
  ctx->companion = std::make_shared<const ModelContext>(std::move(sctx).value());
  return e;
}

// The plugin libraries of one version before its sluice.json "plugins" (docs/plugins.md):
// the --plugin flags for a --model entry (a repository model takes none of them), then its
// model.json "plugins" (resolved by the repository).
std::vector<std::string> VersionPlugins(const ServeFlags& f, const server::LoadSpec& spec,
                                        bool cli_entry) {
  std::vector<std::string> paths;
  if (cli_entry) paths = f.gen.plugins;
  paths.insert(paths.end(), spec.config.plugins.begin(), spec.config.plugins.end());
  return paths;
}

// Which kinds of model the flags of one kind reached. One model: a flag of the other kind is
// refused at its load. Several (or a repository): each model takes the flags of its kind, and
// start-up refuses a kind's flags that no start-up model of that kind took.
struct FlagUse {
  bool several = false;
  std::atomic<int> generation{0}, scoring{0};
  // CLIP models: they take only --max-inputs-per-request and --max-tokens-per-input.
  std::atomic<int> clip{0};
  // Generation models whose KV cache --gpu-memory-utilization sizes (CUDA, no --kv-cache-memory).
  std::atomic<int> gpu_kv{0};
};

// The scoring-model flags a CLIP model takes; the others are the text engine's.
bool ClipTakes(const std::string& flag) {
  return flag == "--max-inputs-per-request" || flag == "--max-tokens-per-input";
}

// Loads one version of a model: the server's flags, overridden by its model.json.
// `cli_entry`: the name is a --model entry (the --plugin flags apply to it).
StatusOr<std::unique_ptr<server::ServedModel>> LoadServedModel(const ServeFlags& f,
                                                               const server::LoadSpec& spec,
                                                               bool cli_entry, FlagUse* use) {
  const serving::ModelConfig& c = spec.config;
  const ModelFlags mf = VersionFlags(f, spec);
  const int max_queue_depth = static_cast<int>(c.max_queue_depth.value_or(f.max_queue_depth));
  const std::string version = std::to_string(spec.version);
  const std::vector<std::string> plugin_paths = VersionPlugins(f, spec, cli_entry);
  if (server::IsClipModelDirectory(mf.model)) {
    ++use->clip;
    if (f.gen.given && !use->several) {
      return InvalidArgument("generation flags (--max-model-len, ...) do not apply to " + mf.model +
                             ", a CLIP model");
    }
    // The text engine's settings: refused from this model's model.json, and from the command
    // line when it is the only model (with several, they are for the others).
    std::vector<std::string> unused;
    for (const auto& [set, n] : {std::pair{c.task.has_value(), "task"},
                                 std::pair{c.max_batch_tokens.has_value(), "max_batch_tokens"},
                                 std::pair{c.max_num_seqs.has_value(), "max_num_seqs"},
                                 std::pair{c.max_queue_depth.has_value(), "max_queue_depth"},
                                 std::pair{c.truncate.has_value(), "truncate"}}) {
      if (set) unused.push_back(std::string("model.json ") + n);
    }
    if (!use->several) {
      std::vector<std::string> cli = ClipUnusedModelFlags(f.model);
      for (const std::string& n : f.scoring_only_set) {
        if (!ClipTakes(n) && std::find(cli.begin(), cli.end(), n) == cli.end()) cli.push_back(n);
      }
      if (f.max_queue_depth != ServeFlags{}.max_queue_depth) cli.push_back("--max-queue-depth");
      unused.insert(unused.end(), cli.begin(), cli.end());
    }
    if (!unused.empty()) {
      return InvalidArgument(JoinFlagNames(unused) +
                             ": text-engine settings that do not apply to " + mf.model +
                             ", a CLIP model (its vision batches and queue: --max-image-batch, "
                             "--max-queued-images)");
    }
    server::ClipServeOptions co;
    co.name = spec.name;
    co.version = version;
    ASSIGN_OR_RETURN(co.embedder, ToEmbedderOptions(f.image, mf));
    co.embedder.max_tokens_per_input =
        static_cast<int>(c.max_tokens_per_input.value_or(f.max_tokens_per_input));
    co.max_inputs_per_request =
        static_cast<int>(c.max_inputs_per_request.value_or(f.max_inputs_per_request));
    co.workers = f.image.image_workers;
    // IO processors of plugins (docs/plugins.md, "Ranking heads on CLIP features"): the
    // --plugin flags, model.json and sluice.json "plugins", as for a text scoring model.
    ASSIGN_OR_RETURN(co.plugins, LoadModelPlugins(plugin_paths, mf.model));
    return server::LoadClipServedModel(co);
  }
  if (!f.image.given.empty() && !use->several) {
    return InvalidArgument(JoinFlagNames(f.image.given) + ": image settings; " + mf.model +
                           " is not a CLIP model");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ModelBundle> bundle, LoadModelBundle(mf.model));
  ASSIGN_OR_RETURN(bool is_gen, IsGenerationModel(*bundle, mf.task));
  bundle.reset();
  if (is_gen) {
    ++use->generation;
    const bool flags_refused = !f.scoring_only_set.empty() && !use->several;
    if (flags_refused || c.max_inputs_per_request || c.max_tokens_per_input || c.truncate ||
        c.max_batch_tokens) {
      std::string names;
      if (flags_refused) {
        for (const std::string& n : f.scoring_only_set) names += (names.empty() ? "" : ", ") + n;
      }
      for (const auto& [set, n] :
           {std::pair{c.max_inputs_per_request.has_value(), "max_inputs_per_request"},
            std::pair{c.max_tokens_per_input.has_value(), "max_tokens_per_input"},
            std::pair{c.truncate.has_value(), "truncate"},
            std::pair{c.max_batch_tokens.has_value(), "max_batch_tokens"}}) {
        if (set) names += std::string(names.empty() ? "" : ", ") + "model.json " + n;
      }
      return InvalidArgument(names + ": scoring-model settings; " + mf.model +
                             " is served as a generation model (task generate)");
    }
    GenerationServeArgs a;
    a.model = mf;
    a.gen = f.gen;
    a.gen.plugins = plugin_paths;
    a.served_name = spec.name;
    a.served_version = version;
    a.api_key = f.api_key;
    a.metrics_require_key = f.metrics_require_key;
    a.workers = f.workers;
    a.max_queue_depth = max_queue_depth;
    a.only_model = !use->several;
    if (mf.device.rfind("cuda", 0) == 0 && f.gen.kv_cache_memory == 0) ++use->gpu_kv;
    return LoadGenerationModel(a);
  }
  ++use->scoring;
  if (f.gen.given && !use->several) {
    return InvalidArgument(
        "--max-model-len, --max-num-batched-tokens, --kv-cache-memory, "
        "--gpu-memory-utilization, --enable-prefix-caching, --chat-template, "
        "--logits-threads and --structured-cache-mb apply to generation models; " +
        mf.model + " is served as a scoring model");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, LoadEngine(mf));
  // The tokenizer comes with the model bundle (null: token-id inputs only).
  const std::shared_ptr<const Tokenizer> tokenizer = engine->bundle().tokenizer;
  io::ContextOptions co;
  co.served_name = spec.name;
  co.served_version = version;
  co.max_inputs_per_request =
      static_cast<int>(c.max_inputs_per_request.value_or(f.max_inputs_per_request));
  co.max_tokens_per_input =
      static_cast<int>(c.max_tokens_per_input.value_or(f.max_tokens_per_input));
  co.truncate = c.truncate.value_or(f.truncate);
  ASSIGN_OR_RETURN(ModelContext ctx, io::BuildModelContext(*engine, tokenizer.get(), co));
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> companion,
                   LoadAbsaSentimentModel(mf, *engine, co, &ctx));
  // Plugins of a scoring model: IO processors (docs/plugins.md), each checked against the model.
  ASSIGN_OR_RETURN(std::shared_ptr<const PluginSet> plugins,
                   LoadModelPlugins(plugin_paths, engine->bundle(), /*generation=*/false));
  std::vector<std::shared_ptr<const io::PluginIoProcessor>> plugin_io;
  if (plugins) {
    ASSIGN_OR_RETURN(plugin_io, io::BindPluginIoProcessors(*plugins, ctx));
  }
  SLUICE_LOG_INFO(
      "model \"{}\" version {}: task {}, tokenizer {}; max_inputs_per_request {}, "
      "max_tokens_per_input {}{}, max_queue_depth {}",
      spec.name, version, ctx.task, tokenizer ? "tokenizer.json" : "none: token ids only",
      ctx.max_inputs_per_request, ctx.max_tokens_per_input,
      ctx.truncate_by_default ? " (truncating)" : "", max_queue_depth);
  server::ScoringModelOptions o;
  o.name = spec.name;
  o.version = version;
  o.context = std::move(ctx);
  o.companion = std::move(companion);
  o.loop.limits.max_batch_tokens = engine->options().max_batch_tokens;  // device-resolved
  o.loop.limits.max_num_seqs = engine->options().max_num_seqs;
  o.loop.max_queue_depth = max_queue_depth;
  o.loop.coalesce = f.batch_coalescing == "on";
  o.service.api_key = f.api_key;
  o.service.metrics_require_key = f.metrics_require_key;
  o.service.workers = f.workers;
  o.service.request_timeout_s = f.request_timeout_s;
  o.service.plugin_io = std::move(plugin_io);
  o.plugins = std::move(plugins);
  return std::unique_ptr<server::ServedModel>(
      std::make_unique<server::ScoringModel>(std::move(engine), std::move(o)));
}

// --model entries: "NAME=PATH", or a directory (named by --served-model-name or its own name).
Status ParseModelEntries(const ServeFlags& f,
                         std::vector<std::pair<std::string, std::string>>* out) {
  int plain = 0;
  for (const std::string& e : f.models) {
    const size_t eq = e.find('=');
    if (eq != std::string::npos && eq > 0 && e.find('/') > eq) {
      out->emplace_back(e.substr(0, eq), e.substr(eq + 1));
      continue;
    }
    ++plain;
    std::string name = f.served_name;
    if (name.empty()) {
      const std::string bare = e.substr(0, e.find("#sha256="));
      name = std::filesystem::path(bare).lexically_normal().filename().string();
      if (name.empty()) {
        name = std::filesystem::path(bare).lexically_normal().parent_path().filename();
      }
      if (serving::IsCacheSource(e)) {  // m.tar.gz -> m
        for (const char* ext : {".tar.gz", ".tgz", ".tar"}) {
          const std::string x = ext;
          if (name.size() > x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0) {
            name.resize(name.size() - x.size());
            break;
          }
        }
      }
    }
    out->emplace_back(name, e);
  }
  if (!f.served_name.empty() && (plain != 1 || f.models.size() != 1)) {
    return InvalidArgument(
        "--served-model-name names the one model of --model DIR; with several models use "
        "--model NAME=PATH");
  }
  return Status::Ok();
}

int RunServe(const ServeFlags& f) {
  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  if (f.max_queue_depth < 1 || f.max_inputs_per_request < 1 || f.max_tokens_per_input < 0 ||
      f.max_body_bytes < 1 || f.io_threads < 1 || f.workers < 1 || f.shutdown_timeout_s < 0) {
    return ReportError(InvalidArgument(
        "--max-queue-depth, --max-inputs-per-request, --max-body-bytes, --io-threads and "
        "--workers must be positive; --max-tokens-per-input and --shutdown-timeout >= 0"));
  }
  if (f.grpc_port < -1 || f.grpc_port > 65535) {
    return ReportError(InvalidArgument("--grpc-port must be a port (0 = any free port) or -1"));
  }
  if (f.memory_budget < 0) {
    return ReportError(InvalidArgument("--model-memory-budget must be >= 0 (0 = no budget)"));
  }
  if (f.switch_placement_ms < 0 || f.switch_placement_ms > 10000) {
    return ReportError(InvalidArgument("--switch-placement-ms must be 0 (off) to 10000"));
  }
  if (Status s = CheckImageFlags(f.image); !s.ok()) return ReportError(s);
  if (f.models.empty() && f.repository.empty()) {
    return ReportError(
        InvalidArgument("--model DIR (or NAME=PATH) or --model-repository DIR is "
                        "required"));
  }
  const bool explicit_control = f.model_control == "explicit";
  if (!f.load_models.empty() && !explicit_control) {
    return ReportError(InvalidArgument(
        "--load-model needs --model-control explicit (with none, every model of the "
        "repository is loaded at start)"));
  }
  std::vector<std::pair<std::string, std::string>> entries;
  if (Status s = ParseModelEntries(f, &entries); !s.ok()) return ReportError(s);
  // Entries naming a source (an archive, a URL) are materialised into the model cache first;
  // the ports open (and readiness can turn 200) only after.
  std::vector<std::shared_ptr<const void>> cache_holds;  // eviction skips what is served
  for (auto& [name, path] : entries) {
    if (!serving::IsCacheSource(path)) continue;
    if (f.model_cache.empty()) {
      return ReportError(InvalidArgument("--model " + name + "=" + path +
                                         ": a URL or archive needs --model-cache DIR"));
    }
    serving::CacheOptions co;
    co.dir = f.model_cache;
    co.max_bytes = f.cache_max_bytes;
    auto cache = serving::ModelCache::Open(co);
    if (!cache.ok()) return ReportError(cache.status());
    auto pulled = cache->Pull(path);
    if (!pulled.ok()) return ReportError(pulled.status().WithContext("model " + name));
    SLUICE_LOG_INFO("model {}: {} {} ({}, {} bytes, sha256 {}) in {:.2f} s", name,
                    pulled->hit ? "cached" : "pulled", path, pulled->hit ? "hit" : "miss",
                    pulled->bytes, pulled->sha256.substr(0, 12), pulled->seconds);
    path = pulled->path;
    cache_holds.push_back(pulled->in_use);
  }
  SetPulledModelPolicy(f.model_cache, f.allow_pulled_model_plugins);
  auto repo = serving::Repository::Open(f.repository, entries);
  if (!repo.ok()) return ReportError(repo.status());

  // What loads at start: every --model entry; the whole repository (--model-control none)
  // or the --load-model names (explicit).
  std::vector<std::string> startup;
  for (const auto& [name, path] : entries) startup.push_back(name);
  if (!explicit_control) {
    for (const std::string& n : repo->Names()) {
      if (std::find(startup.begin(), startup.end(), n) == startup.end()) startup.push_back(n);
    }
  }
  for (const std::string& n : f.load_models) {
    if (n == "*") {
      for (const std::string& r : repo->Names()) {
        if (std::find(startup.begin(), startup.end(), r) == startup.end()) startup.push_back(r);
      }
      continue;
    }
    if (!repo->Has(n)) {
      return ReportError(NotFound("--load-model " + n + ": no such model in the repository"));
    }
    if (std::find(startup.begin(), startup.end(), n) == startup.end()) startup.push_back(n);
  }

  server::RegistryOptions rego;
  rego.drain_timeout_s = f.shutdown_timeout_s;
  rego.memory_budget_bytes = f.memory_budget;
  rego.switch_placement_ms = f.switch_placement_ms;
  rego.estimate = [&f](const server::LoadSpec& spec) { return EstimateMemory(f, spec); };
  if (!f.model_cache.empty()) {  // model.json "sources" are pulled as their versions load
    rego.pull = [&f](const std::string& source) -> StatusOr<serving::PullResult> {
      serving::CacheOptions co;
      co.dir = f.model_cache;
      co.max_bytes = f.cache_max_bytes;
      ASSIGN_OR_RETURN(serving::ModelCache cache, serving::ModelCache::Open(co));
      return cache.Pull(source);
    };
  }
  // --plugin applies to the --model entries only (a repository model lists its libraries in
  // its model.json): without any, the flag would load nothing.
  std::set<std::string> cli_names;
  for (const auto& [name, path] : entries) cli_names.insert(name);
  if (!f.gen.plugins.empty() && cli_names.empty()) {
    return ReportError(InvalidArgument(
        "--plugin applies to the --model entries, and there are none: a repository model "
        "lists its plugins in DIR/<name>/model.json \"plugins\" (docs/plugins.md)"));
  }
  FlagUse flag_use;
  flag_use.several = startup.size() > 1 || !f.repository.empty();
  server::ModelRegistry registry(
      &*repo,
      [&f, &cli_names, &flag_use](const server::LoadSpec& spec) {
        return LoadServedModel(f, spec, cli_names.count(spec.name) > 0, &flag_use);
      },
      rego);
  server::RouterOptions ro;
  ro.api_key = f.api_key;
  ro.metrics_require_key = f.metrics_require_key;
  ro.explicit_control = explicit_control;
  ro.server_version = SLUICE_VERSION;
  // Declared before the router so that they are destroyed after it.
  std::optional<server::HttpServer> http;
  std::optional<grpcfe::GrpcServer> grpc;
  server::Router router(ro, &registry);

  server::HttpServerOptions ho;
  ho.host = f.host;
  ho.port = f.port;
  ho.io_threads = f.io_threads;
  ho.max_body_bytes = f.max_body_bytes;
  ho.max_connections = f.max_connections;
  http.emplace(ho, [&router](server::HttpRequest&& r, std::shared_ptr<server::Exchange> ex) {
    router.Handle(std::move(r), std::move(ex));
  });
  if (Status s = http->Start(); !s.ok()) return ReportError(s);
  if (f.grpc_port >= 0) {
    grpcfe::GrpcServerOptions go;
    go.host = f.host;
    go.port = f.grpc_port;
    go.max_message_bytes = f.max_body_bytes;
    grpc.emplace(go, &router);
    if (Status s = grpc->Start(); !s.ok()) {
      http->Stop();
      return ReportError(s);
    }
    SLUICE_LOG_INFO("gRPC (KServe v2): listening on {}:{}", f.host, grpc->port());
  }
  SLUICE_LOG_INFO(
      "server limits: max_inputs_per_request {}, max_tokens_per_input {}{}, max_body_bytes {}, "
      "max_queue_depth {}, max_connections {}, shutdown_timeout {} s, batch coalescing {}{}",
      f.max_inputs_per_request, f.max_tokens_per_input, f.truncate ? " (truncating)" : "",
      f.max_body_bytes, f.max_queue_depth, http->max_connections(), f.shutdown_timeout_s,
      f.batch_coalescing,
      f.api_key.empty()
          ? ""
          : (f.metrics_require_key ? ", API key required (metrics too)" : ", API key required"));
  SLUICE_LOG_INFO(
      "model repository: {}; model control {}; {} model(s) to load at start; memory budget {}; "
      "switch placement hold {}",
      f.repository.empty() ? "none" : repo->root(), f.model_control, startup.size(),
      f.memory_budget > 0 ? std::to_string(f.memory_budget) + " bytes" : "none",
      f.switch_placement_ms > 0 ? std::to_string(f.switch_placement_ms) + " ms" : "off");
  const double t0 = NowSeconds();
  for (const std::string& name : startup) {
    if (Status s = registry.Load(name); !s.ok()) {
      if (grpc) grpc->Stop();
      http->Stop();
      return ReportError(s);
    }
  }
  if (flag_use.several && !startup.empty()) {  // a kind's flags must reach a model of that kind
    std::string unused;
    if (f.gen.given && flag_use.generation == 0) {
      unused =
          "--max-model-len, --max-num-batched-tokens, --kv-cache-memory, "
          "--gpu-memory-utilization, --enable-prefix-caching, --chat-template, "
          "--logits-threads and --structured-cache-mb apply to generation models, and none of "
          "the start-up models is one";
    } else if (!f.scoring_only_set.empty() && flag_use.scoring == 0) {
      // A CLIP model takes two of them; the rest need a text scoring model.
      for (const std::string& n : f.scoring_only_set) {
        if (flag_use.clip == 0 || !ClipTakes(n)) unused += (unused.empty() ? "" : ", ") + n;
      }
      if (!unused.empty()) {
        unused +=
            flag_use.clip == 0
                ? ": scoring-model settings, and none of the start-up models is a scoring model"
                : ": text scoring-model settings, and none of the start-up models is a text "
                  "scoring model (a CLIP model does not use them)";
      }
    }
    if (unused.empty() && f.gen.gpu_memory_utilization != 0 && flag_use.generation > 0 &&
        flag_use.gpu_kv == 0) {
      unused =
          "--gpu-memory-utilization sizes the KV cache of generation models on CUDA without "
          "--kv-cache-memory, and no start-up model is one";
    }
    if (unused.empty() && !f.image.given.empty() && flag_use.clip == 0) {
      unused = JoinFlagNames(f.image.given) +
               ": image settings, and none of the start-up models is a CLIP model";
    }
    if (unused.empty() && flag_use.scoring == 0 && flag_use.generation == 0) {
      if (const auto engine_flags = ClipUnusedModelFlags(f.model); !engine_flags.empty()) {
        unused = JoinFlagNames(engine_flags) +
                 ": text-engine settings, and every start-up model is a CLIP model";
      }
    }
    if (!unused.empty()) {
      if (grpc) grpc->Stop();
      http->Stop();
      return ReportError(InvalidArgument(unused));
    }
  }
  router.SetReady(true);
  SLUICE_LOG_INFO("all start-up models ready in {:.2f} s", NowSeconds() - t0);
  SLUICE_LOG_INFO("ready: listening on http://{}:{}", f.host, http->port());

  int sig = 0;
  sigwait(&sigs, &sig);
  SLUICE_LOG_INFO("{}: draining ({} requests in flight, up to {} s)",
                  sig == SIGTERM ? "SIGTERM" : "SIGINT", router.in_flight(), f.shutdown_timeout_s);
  router.BeginDrain();
  const double deadline = NowSeconds() + f.shutdown_timeout_s;
  while (router.in_flight() > 0 && NowSeconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int left = router.in_flight();
  if (left > 0) SLUICE_LOG_WARN("shutdown timeout: {} requests still in flight", left);
  registry.UnloadAll(0);  // fails whatever is still queued (503), lets those answers out
  if (grpc) grpc->Stop(1);
  http->Stop();
  SLUICE_LOG_INFO("stopped");
  return 0;
}

Registrar serve_cmd(Command{
    "serve",
    "Serve models over HTTP (OpenAI/Cohere/TEI/vLLM/KServe-style routes) and gRPC (KServe v2)",
    [](CLI::App* sub) {
      auto f = std::make_shared<ServeFlags>();
      sub->add_option("--model", f->models,
                      "a model directory, or NAME=PATH (PATH: a model directory served as "
                      "version 1, or NAME's versions PATH/<version>/); repeatable");
      AddModelFlags(sub, &f->model, /*model_option=*/false);
      sub->add_option("--model-repository", f->repository,
                      "a model repository: DIR/<name>/<version>/ model directories and optional "
                      "DIR/<name>/model.json (docs/model-ops.md)");
      sub->add_option("--model-control", f->model_control,
                      "none: load every model at start, no repository API; explicit: the "
                      "repository API loads, unloads and switches models")
          ->check(CLI::IsMember({"none", "explicit"}))
          ->capture_default_str();
      sub->add_option("--model-memory-budget", f->memory_budget,
                      "bytes all loaded model versions may take together (weights in their "
                      "serving dtype plus KV caches, estimated before a load; 0 = no budget): "
                      "a load that does not fit is refused with the numbers")
          ->capture_default_str();
      sub->add_option("--switch-placement-ms", f->switch_placement_ms,
                      "for this long after a default version switch, the new default's "
                      "scheduler and engine threads run on the CPUs the old default's ran on "
                      "(docs/model-ops.md); 0 = leave them to the kernel")
          ->capture_default_str();
      sub->add_option("--model-cache", f->model_cache,
                      "cache directory for --model entries that name a source (a .tar/.tar.gz "
                      "archive or an http(s)/file URL of one, SOURCE#sha256=HEX to check it): "
                      "materialised before the server starts (docs/model-ops.md)");
      sub->add_flag("--allow-pulled-model-plugins", f->allow_pulled_model_plugins,
                    "let models pulled into --model-cache load the plugins their sluice.json "
                    "names (native code from a downloaded model; refused by default)");
      sub->add_option("--cache-max-bytes", f->cache_max_bytes,
                      "bytes the model cache may hold (0 = no limit; least recently used "
                      "entries not in use are evicted)")
          ->capture_default_str();
      sub->add_option("--load-model", f->load_models,
                      "explicit control: a repository model to load at start (* = all); "
                      "repeatable");
      sub->add_option("--host", f->host, "address to listen on")->capture_default_str();
      sub->add_option("--port", f->port, "port (0 = any free port, logged)")->capture_default_str();
      sub->add_option("--grpc-port", f->grpc_port,
                      "serve KServe v2 over gRPC on this port too (0 = any free port, logged; "
                      "-1 = no gRPC)")
          ->capture_default_str();
      sub->add_option("--served-model-name", f->served_name,
                      "the name of the one --model DIR in the API (default: the directory "
                      "name)");
      sub->add_option("--api-key", f->api_key,
                      "require Authorization: Bearer KEY (all routes but health and metrics)");
      sub->add_flag("--metrics-require-key", f->metrics_require_key,
                    "/metrics needs the API key too");
      sub->add_option("--max-connections", f->max_connections,
                      "open connections at most (0 = the file-descriptor limit less a reserve); "
                      "over it health checks still answer, other requests get 503")
          ->capture_default_str();
      sub->add_option("--max-queue-depth", f->max_queue_depth,
                      "requests queued or running at most; beyond it 429")
          ->capture_default_str();
      sub->add_option("--max-inputs-per-request", f->max_inputs_per_request,
                      "inputs (or documents) per request at most; beyond it 400")
          ->capture_default_str();
      sub->add_option("--max-tokens-per-input", f->max_tokens_per_input,
                      "tokens per input at most (0 = the model's limit); beyond it 400")
          ->capture_default_str();
      sub->add_option("--max-body-bytes", f->max_body_bytes,
                      "request body size limit; beyond it 413")
          ->capture_default_str();
      sub->add_flag("--truncate", f->truncate,
                    "truncate over-long inputs to the token limit instead of refusing them");
      sub->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                      "seconds in-flight requests get to finish after SIGTERM")
          ->capture_default_str();
      sub->add_option("--request-timeout", f->request_timeout_s,
                      "seconds a request may wait before its work is dropped (0 = none)")
          ->capture_default_str();
      sub->add_option("--io-threads", f->io_threads, "HTTP I/O threads")->capture_default_str();
      sub->add_option("--workers", f->workers, "worker threads running IO processors")
          ->capture_default_str();
      sub->add_option("--batch-coalescing", f->batch_coalescing,
                      "on | off: while batches run, form the next one shortly before they are "
                      "expected to finish, so that requests arriving meanwhile join it (off = "
                      "as soon as a request is queued)")
          ->check(CLI::IsMember({"on", "off"}))
          ->capture_default_str();
      AddImageFlags(sub, &f->image, /*offline=*/false);
      sub->add_option("--max-model-len", f->gen.max_model_len,
                      "generation: prompt + output tokens per sequence (default: the model's)");
      sub->add_option("--max-num-batched-tokens", f->gen.max_num_batched_tokens,
                      "generation: tokens computed per step (default CPU 2048, CUDA 16384)");
      sub->add_option("--kv-cache-memory", f->gen.kv_cache_memory,
                      "generation: KV cache bytes (default CPU 2 GiB; CUDA from "
                      "--gpu-memory-utilization)");
      sub->add_option("--gpu-memory-utilization", f->gen.gpu_memory_utilization,
                      "generation, CUDA without --kv-cache-memory: fraction of device memory to "
                      "use at most (default 0.9)");
      sub->add_option("--enable-prefix-caching", f->gen.prefix_caching,
                      "generation: on | off (automatic prefix caching)")
          ->capture_default_str();
      sub->add_option("--chat-template", f->gen.chat_template,
                      "generation: a Jinja chat template file (default: the model directory's "
                      "chat_template.jinja, else tokenizer_config.json's chat_template)");
      sub->add_option("--plugin", f->gen.plugins,
                      "a plugin library (docs/plugins.md, repeatable) for every --model entry "
                      "(not the --model-repository models: their model.json \"plugins\"): its "
                      "logits processors (generation models) requests may name, its IO "
                      "processors (scoring models) serve POST /plugins/NAME and /pooling with "
                      "\"io_processor\"");
      sub->add_option("--logits-threads", f->gen.logits_threads,
                      "generation: threads filling logits-processor masks (0 = hardware "
                      "threads, at most 16)");
      sub->add_option("--structured-cache-mb", f->gen.structured_cache_mb,
                      "generation: MiB of structured-output token masks cached over all "
                      "compiled constraints (least recently used constraints dropped past it)")
          ->capture_default_str();
      return std::function<int()>([f, sub] {
        for (const char* flag : {"--max-model-len", "--max-num-batched-tokens", "--kv-cache-memory",
                                 "--gpu-memory-utilization", "--enable-prefix-caching",
                                 "--chat-template", "--logits-threads", "--structured-cache-mb"}) {
          if (sub->count(flag) > 0) f->gen.given = true;
        }
        for (const char* flag : {"--max-inputs-per-request", "--max-tokens-per-input", "--truncate",
                                 "--request-timeout", "--batch-coalescing", "--max-batch-tokens",
                                 "--prefix-reuse", "--cuda-graph-max-tokens", "--profile"}) {
          if (sub->count(flag) > 0) f->scoring_only_set.emplace_back(flag);
        }
        f->image.given = GivenImageFlags(f->image);
        return RunServe(*f);
      });
    }});

}  // namespace
}  // namespace sluice::cli
