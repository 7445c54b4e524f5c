// The serving application behind the HTTP front end: routing, auth, health/readiness,
// model listing, metrics, and the request flow
//   I/O thread (route, auth; the IO processor by route or name, io/registry.h) ->
//   worker pool (Parse, PreProcess) -> EngineLoop -> worker pool (PostProcess) ->
//   I/O thread (write).
// Every IO processor, built-in or plugin, runs through this one flow; the request's IoState
// is the service's and goes when the response is sent or refused (or the client goes).
// Errors become HTTP responses only through server/errors.h.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/engine_loop.h"
#include "io/plugin_io.h"
#include "io/registry.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/worker_pool.h"

namespace sluice::server {

struct ServiceOptions {
  std::string api_key;               // empty = no auth
  bool metrics_require_key = false;  // /metrics behind the API key too
  int workers = 2;                   // worker pool threads (IO processors)
  double request_timeout_s = 0;      // 0 = none; queued work older than this is dropped (503)
  // Plugin IO processors (docs/plugins.md), registered beside the built-ins (io/registry.h):
  // POST /plugins/NAME and /pooling with "io_processor". Their libraries must outlive the
  // service. Names must not be built-ins' (io::BindPluginIoProcessors refuses them).
  std::vector<std::shared_ptr<const io::PluginIoProcessor>> plugin_io;
};

class Service {
 public:
  // `loop`, `model`, `metrics` (and `companion_loop`) must outlive the service.
  // `companion_loop` runs the sequences of model->companion (null when it has none).
  Service(ServiceOptions options, EngineLoop* loop, const ModelContext* model, Metrics* metrics,
          EngineLoop* companion_loop = nullptr);
  ~Service();

  // The HTTP handler (runs on an I/O thread; returns at once).
  void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex);

  void SetReady(bool ready) { ready_ = ready; }
  bool ready() const { return ready_ && !draining_; }
  // Readiness turns 503 and new work is refused with 503; in-flight work continues.
  void BeginDrain() { draining_ = true; }
  int in_flight() const { return in_flight_.load(); }
  // The model's IO processors (the built-ins and its plugins'), one registry for routes and
  // names. Const after construction: safe from any thread.
  const io::ProcessorRegistry& processors() const { return processors_; }

 private:
  struct Call;
  void Respond(const std::shared_ptr<Call>& call, HttpResponse r);
  void RunProcessor(std::shared_ptr<Call> call);
  void Finish(std::shared_ptr<Call> call, Status status);
  // One of the call's engine requests is done; the last one posts Finish.
  void Done(const std::shared_ptr<Call>& call, const Status& status);
  // "plugin IO processors: a, b; built-in IO processors: ..." (for errors).
  std::string IoNames() const;
  HttpResponse Health(bool ready_check) const;
  HttpResponse Models() const;
  bool Authorized(const HttpRequest& req) const;

  ServiceOptions options_;
  EngineLoop* loop_;
  EngineLoop* companion_loop_;
  const ModelContext* model_;
  io::ProcessorRegistry processors_;
  Metrics& metrics_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<int> in_flight_{0};
  std::unique_ptr<WorkerPool> pool_;  // last: joined first on destruction
};

}  // namespace sluice::server
