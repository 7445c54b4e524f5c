// The HTTP application of a server with many models (docs/model-ops.md): server health and
// readiness, model listing and metadata (/v1/models, /v2/models/{name}[/versions/{v}]), the
// KServe/Triton repository API (/v2/repository/...), /metrics of every model, and routing of
// inference requests to the version that serves them:
//
//   the `model` field: "name" (its default version) or "name:version";
//   KServe paths:      /v2/models/{name}[/versions/{v}]/...;
//   no model named:    the one served model whose kind serves the route (scoring routes to
//                      a scoring model, completions to a generation model), else 400.
//
// An unknown name or version is 404 naming what is served. The routed request holds a lease
// on its version until its response is sent, so that a version switched away from drains
// before it unloads; the response names the version in the Sluice-Model-Version header.
// Runs on the I/O threads (routing reads an immutable table; nothing blocks); repository
// control operations run on a control thread of their own.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/http_types.h"
#include "server/kserve.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/worker_pool.h"

namespace sluice::server {

struct RouterOptions {
  std::string api_key;               // empty = no auth
  bool metrics_require_key = false;  // /metrics behind the API key too
  bool explicit_control = false;     // --model-control explicit: load/unload/default allowed
  std::string server_version;        // GET /v2 (KServe server metadata)
};

class Router {
 public:
  // `registry` must outlive the router.
  Router(RouterOptions options, ModelRegistry* registry);
  ~Router();

  void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex);
  // POST /v2/models/{name}[/versions/{v}]/infer of a typed request (the gRPC front end;
  // `name` and `version` already checked as the path's): the same auth, routing, lease,
  // metrics and answers as Handle's, the request's tensors read without a JSON text
  // (server/kserve.h KServeInferTyped).
  void KServeInferTyped(const std::string& name, std::optional<int64_t> version,
                        const std::string& authorization, std::shared_ptr<KServeCall> call,
                        std::shared_ptr<Exchange> ex);
  // Ready once the start-up models are loaded; draining: readiness 503, new work 503.
  void SetReady(bool ready) { ready_ = ready; }
  void BeginDrain() { draining_ = true; }
  // Counts a response the router did not see (a front end's own refusal) in its metrics.
  void RecordResponse(const std::string& route, int status, double seconds) {
    metrics_.RecordResponse(route, status, seconds);
  }
  // Requests in flight on every version, plus control operations running.
  int in_flight() const { return registry_->active() + control_running_.load(); }

 private:
  void Respond(const std::string& route, const std::shared_ptr<Exchange>& ex, HttpResponse r);
  void HandleV2Models(HttpRequest&& req, std::shared_ptr<Exchange> ex);
  void HandleRepository(HttpRequest&& req, std::shared_ptr<Exchange> ex);
  // The lease of the version a KServe infer goes to; null when `ex` was answered (draining,
  // loading, not served).
  std::shared_ptr<ModelRegistry::Lease> LeaseForInfer(const std::string& route,
                                                      const std::string& name,
                                                      std::optional<int64_t> version,
                                                      const std::shared_ptr<Exchange>& ex);
  void RouteInference(HttpRequest&& req, std::shared_ptr<Exchange> ex, const std::string& name,
                      std::optional<int64_t> version);
  HttpResponse Models() const;
  HttpResponse Metadata(const std::string& name, std::optional<int64_t> version) const;
  bool Authorized(const HttpRequest& req) const;

  RouterOptions options_;
  ModelRegistry* registry_;
  Metrics metrics_;  // the router's own responses (health, listing, repository, errors)
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<int> control_running_{0};
  std::unique_ptr<WorkerPool> control_;  // one thread: control operations, in order
};

// The top-level string field `key` of a JSON object body, found without parsing the rest;
// nullopt when absent or not a string. *malformed is set when the body is not a JSON object.
std::optional<std::string> PeekStringField(std::string_view body, std::string_view key,
                                           bool* malformed);

}  // namespace sluice::server
