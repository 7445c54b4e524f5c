// `sluice serve --model DIR [--host H] [--port P]`: the HTTP server (docs/api.md).
//
// Start-up: load the model (and tokenizer.json when present), start listening (health
// answers, readiness 503), warm up with one forward, then turn ready. SIGTERM/SIGINT:
// readiness 503 at once, new work refused (503), in-flight requests finish within
// --shutdown-timeout, exit 0.
#include <signal.h>

#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/serve_generate.h"
#include "core/log.h"
#include "engine/engine_loop.h"
#include "io/model_context.h"
#include "server/http_server.h"
#include "server/service.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct ServeFlags {
  ModelFlags model;
  std::string host = "127.0.0.1";
  int port = 8000;
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
  GenerationServeFlags gen;                   // generation models only
  std::vector<std::string> scoring_only_set;  // scoring-only flags given on the command line
};

// One forward through the loop, so the first client does not pay for lazy set-up.
Status WarmUp(EngineLoop& loop, const ModelContext& m) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto r = std::make_shared<EngineRequest>();
  const int n = std::min(16, m.model_max_tokens);
  r->inputs.push_back(TokenSequence{std::vector<int32_t>(n, 0), {}});
  r->sink.on_done = [promise](EngineRequest&, const Status& s) { promise->set_value(s); };
  RETURN_IF_ERROR(loop.Submit(r));
  return promise->get_future().get().WithContext("warm-up");
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
  {
    // A generation model (task generate) is served by the generation engine.
    auto bundle = LoadModelBundle(f.model.model);
    if (!bundle.ok()) return ReportError(bundle.status());
    auto is_gen = IsGenerationModel(**bundle, f.model.task);
    if (!is_gen.ok()) return ReportError(is_gen.status());
    if (*is_gen) {
      if (!f.scoring_only_set.empty()) {
        std::string names;
        for (const std::string& n : f.scoring_only_set) names += (names.empty() ? "" : ", ") + n;
        return ReportError(InvalidArgument(names + ": scoring-model flags; " + f.model.model +
                                           " is served as a generation model (task generate)"));
      }
      GenerationServeArgs a;
      a.model = f.model;
      a.gen = f.gen;
      a.host = f.host;
      a.port = f.port;
      a.served_name = f.served_name;
      a.api_key = f.api_key;
      a.metrics_require_key = f.metrics_require_key;
      a.max_connections = f.max_connections;
      a.io_threads = f.io_threads;
      a.workers = f.workers;
      a.max_queue_depth = f.max_queue_depth;
      a.max_body_bytes = f.max_body_bytes;
      a.shutdown_timeout_s = f.shutdown_timeout_s;
      return RunServeGeneration(a);
    }
    if (f.gen.given) {
      return ReportError(InvalidArgument(
          "--max-model-len, --max-num-batched-tokens, --kv-cache-memory, "
          "--gpu-memory-utilization, --enable-prefix-caching and --chat-template apply to "
          "generation models; " +
          f.model.model + " is served as a scoring model"));
    }
  }
  auto engine_or = LoadEngine(f.model);
  if (!engine_or.ok()) return ReportError(engine_or.status());
  // The tokenizer comes with the model bundle (null: token-id inputs only).
  const std::shared_ptr<const Tokenizer> tokenizer = (*engine_or)->bundle().tokenizer;

  io::ContextOptions co;
  co.served_name = f.served_name.empty()
                       ? std::filesystem::path(f.model.model).lexically_normal().filename().string()
                       : f.served_name;
  if (co.served_name.empty()) co.served_name = f.model.model;
  co.max_inputs_per_request = f.max_inputs_per_request;
  co.max_tokens_per_input = f.max_tokens_per_input;
  co.truncate = f.truncate;
  auto ctx_or = io::BuildModelContext(**engine_or, tokenizer.get(), co);
  if (!ctx_or.ok()) return ReportError(ctx_or.status());
  const ModelContext ctx = std::move(ctx_or).value();

  server::Metrics metrics;
  EngineLoopOptions lo;
  lo.limits.max_batch_tokens = (*engine_or)->options().max_batch_tokens;  // device-resolved
  lo.limits.max_num_seqs = (*engine_or)->options().max_num_seqs;
  lo.max_queue_depth = f.max_queue_depth;
  lo.coalesce = f.batch_coalescing == "on";
  lo.on_batch = [&metrics](const BatchStats& b) {
    metrics.RecordBatch(b.num_seqs, b.num_tokens, b.device_seconds);
    metrics.RecordPrefixReuse(b.prefix_groups, b.prefix_tokens_saved);
  };
  EngineLoop loop(std::move(engine_or).value(), lo);

  // Declared before the service so that it is destroyed after it: the service's workers
  // may still hand responses to the transport while they finish.
  std::optional<server::HttpServer> http;
  server::ServiceOptions so;
  so.api_key = f.api_key;
  so.metrics_require_key = f.metrics_require_key;
  so.workers = f.workers;
  so.request_timeout_s = f.request_timeout_s;
  server::Service service(so, &loop, &ctx, &metrics);

  server::HttpServerOptions ho;
  ho.host = f.host;
  ho.port = f.port;
  ho.io_threads = f.io_threads;
  ho.max_body_bytes = f.max_body_bytes;
  ho.max_connections = f.max_connections;
  http.emplace(ho, [&service](server::HttpRequest&& r, std::shared_ptr<server::Exchange> ex) {
    service.Handle(std::move(r), std::move(ex));
  });
  if (Status s = http->Start(); !s.ok()) return ReportError(s);
  SLUICE_LOG_INFO(
      "server limits: max_inputs_per_request {}, max_tokens_per_input {}{}, max_body_bytes {}, "
      "max_queue_depth {}, max_connections {}, shutdown_timeout {} s, batch coalescing {}{}",
      ctx.max_inputs_per_request, ctx.max_tokens_per_input, f.truncate ? " (truncating)" : "",
      f.max_body_bytes, f.max_queue_depth, http->max_connections(), f.shutdown_timeout_s,
      f.batch_coalescing,
      f.api_key.empty()
          ? ""
          : (f.metrics_require_key ? ", API key required (metrics too)" : ", API key required"));
  SLUICE_LOG_INFO("serving \"{}\" (task {}, tokenizer {})", ctx.name, ctx.task,
                  tokenizer ? "tokenizer.json" : "none: token ids only");
  if (Status s = WarmUp(loop, ctx); !s.ok()) {
    http->Stop();
    return ReportError(s);
  }
  service.SetReady(true);
  SLUICE_LOG_INFO("ready: listening on http://{}:{}", f.host, http->port());

  int sig = 0;
  sigwait(&sigs, &sig);
  SLUICE_LOG_INFO("{}: draining ({} requests in flight, up to {} s)",
                  sig == SIGTERM ? "SIGTERM" : "SIGINT", service.in_flight(), f.shutdown_timeout_s);
  service.BeginDrain();
  const double deadline = NowSeconds() + f.shutdown_timeout_s;
  while (service.in_flight() > 0 && NowSeconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int left = service.in_flight();
  if (left > 0) SLUICE_LOG_WARN("shutdown timeout: {} requests still in flight", left);
  loop.Shutdown();                          // fails whatever is still queued (503)
  const double flush = NowSeconds() + 1.0;  // let those 503s reach their clients
  while (service.in_flight() > 0 && NowSeconds() < flush) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  http->Stop();
  SLUICE_LOG_INFO("stopped");
  return 0;
}

Registrar serve_cmd(Command{
    "serve", "Serve a model over HTTP (OpenAI/Cohere/TEI/vLLM/KServe-style routes)",
    [](CLI::App* sub) {
      auto f = std::make_shared<ServeFlags>();
      AddModelFlags(sub, &f->model);
      sub->add_option("--host", f->host, "address to listen on")->capture_default_str();
      sub->add_option("--port", f->port, "port (0 = any free port, logged)")->capture_default_str();
      sub->add_option("--served-model-name", f->served_name,
                      "model name in the API (default: the directory name)");
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
      sub->add_option("--max-model-len", f->gen.max_model_len,
                      "generation: prompt + output tokens per sequence (default: the model's)");
      sub->add_option("--max-num-batched-tokens", f->gen.max_num_batched_tokens,
                      "generation: tokens computed per step (default CPU 2048, CUDA 16384)");
      sub->add_option("--kv-cache-memory", f->gen.kv_cache_memory,
                      "generation: KV cache bytes (default CPU 2 GiB; CUDA from "
                      "--gpu-memory-utilization)");
      sub->add_option("--gpu-memory-utilization", f->gen.gpu_memory_utilization,
                      "generation, CUDA: fraction of device memory to use at most")
          ->capture_default_str();
      sub->add_option("--enable-prefix-caching", f->gen.prefix_caching,
                      "generation: on | off (automatic prefix caching)")
          ->capture_default_str();
      sub->add_option("--chat-template", f->gen.chat_template,
                      "generation: a Jinja chat template file (default: the model directory's "
                      "chat_template.jinja, else tokenizer_config.json's chat_template)");
      return std::function<int()>([f, sub] {
        for (const char* flag :
             {"--max-model-len", "--max-num-batched-tokens", "--kv-cache-memory",
              "--gpu-memory-utilization", "--enable-prefix-caching", "--chat-template"}) {
          if (sub->count(flag) > 0) f->gen.given = true;
        }
        for (const char* flag : {"--max-inputs-per-request", "--max-tokens-per-input", "--truncate",
                                 "--request-timeout", "--batch-coalescing", "--max-batch-tokens",
                                 "--prefix-reuse", "--cuda-graph-max-tokens", "--profile"}) {
          if (sub->count(flag) > 0) f->scoring_only_set.emplace_back(flag);
        }
        return RunServe(*f);
      });
    }});

}  // namespace
}  // namespace sluice::cli
