#include "server/service.h"

#include <mutex>
#include <optional>

#include "core/log.h"
#include "io/builtins.h"
#include "io/json.h"
#include "server/auth.h"
#include "server/errors.h"
#include "server/router.h"

namespace sluice::server {

struct Service::Call {
  HttpRequest req;
  std::shared_ptr<Exchange> ex;
  std::string route;  // metrics label
  const IoProcessor* proc = nullptr;
  bool pooling_io = false;  // /pooling with "io_processor": the envelope (io/registry.h)
  std::string io_body;      // what the processor parses when it is not req.body
  std::unique_ptr<IoState> state;
  std::shared_ptr<EngineRequest> er;
  std::shared_ptr<EngineRequest> companion;  // the companion model's request, if any
  std::mutex mu;
  int pending = 0;       // engine requests not yet done (mu)
  Status status;         // the first failure among them (mu)
  bool counted = false;  // holds an in_flight_ slot
};

namespace {

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool IsHealthRoute(const std::string& p) {
  return p == "/health" || p == "/ready" || p == "/v2/health/live" || p == "/v2/health/ready" ||
         (p.rfind("/v2/models/", 0) == 0 && p.size() > 17 && p.substr(p.size() - 6) == "/ready");
}

HttpResponse Json(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

}  // namespace

Service::Service(ServiceOptions options, EngineLoop* loop, const ModelContext* model,
                 Metrics* metrics, EngineLoop* companion_loop)
    : options_(std::move(options)),
      loop_(loop),
      companion_loop_(companion_loop),
      model_(model),
      metrics_(*metrics) {
  for (const auto& p : options_.plugin_io) {
    // io::BindPluginIoProcessors refused built-in names; a set holds no duplicates.
    Status s = processors_.AddPlugin(p, p->origin());
    if (!s.ok()) SLUICE_LOG_ERROR("{}", s.message());
  }
  SLUICE_LOG_INFO("model \"{}\" version {}: {}", model_->name, model_->version, IoNames());
  pool_ = std::make_unique<WorkerPool>(options_.workers);
}

Service::~Service() { pool_.reset(); }

void Service::Respond(const std::shared_ptr<Call>& call, HttpResponse r) {
  // The request's state goes now, whatever the outcome (a plugin's allocations included).
  call->state.reset();
  // A client that went away saw nothing: counted under 499 (nginx's "client closed").
  const int status = call->ex->disconnected() ? 499 : r.status;
  metrics_.RecordResponse(call->route, status, Seconds(call->ex->start, SteadyClock::now()));
  if (call->counted) {
    call->counted = false;
    in_flight_--;
  }
  call->ex->Respond(std::move(r));
}

std::string Service::IoNames() const {
  return "plugin IO processors: " + processors_.PluginNames() +
         "; built-in IO processors: " + io::ProcessorRegistry::BuiltinNames();
}

bool Service::Authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  return BearerMatches(req.authorization, options_.api_key);
}

HttpResponse Service::Health(bool ready_check) const {
  if (ready_check && (!ready_ || draining_)) {
    return ErrorResponse(503, draining_ ? "the server is shutting down" : "the model is loading");
  }
  return Json("{}");
}

HttpResponse Service::Models() const {
  io::JsonWriter w;
  w.BeginObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.BeginArray();
  w.BeginObject();
  w.Key("id");
  w.String(model_->name);
  w.Key("object");
  w.String("model");
  w.Key("created");
  w.Int(io::UnixSeconds());
  w.Key("owned_by");
  w.String("sluice");
  w.Key("task");
  w.String(model_->task);
  w.Key("max_model_len");
  w.Int(model_->model_max_tokens);
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return Json(w.Take());
}

void Service::Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) {
  auto call = std::make_shared<Call>();
  call->ex = std::move(ex);
  call->req = std::move(req);
  const HttpRequest& r = call->req;
  const std::string& p = r.path;
  // A built-in by its route; any IO processor (built-in or plugin) by name: /plugins/NAME,
  // or /pooling naming one in "io_processor".
  const IoProcessor* proc = processors_.FindRoute(p);
  std::optional<HttpResponse> plugin_error;
  if (p.rfind("/plugins/", 0) == 0) {
    const std::string name = p.substr(9);
    proc = processors_.Find(name);
    if (!proc) {
      plugin_error = ErrorResponse(
          404, "no IO processor \"" + name + "\" is registered for model \"" + model_->name +
                   "\" (" + IoNames() +
                   "; a model loads plugins from its model.json or sluice.json \"plugins\", "
                   "or --plugin)");
    }
  } else if (p == "/pooling") {
    bool malformed = false;
    if (auto name = PeekStringField(r.body, "io_processor", &malformed)) {
      proc = processors_.Find(*name);
      call->pooling_io = proc != nullptr;
      if (!proc) {
        plugin_error = ErrorResponse(400, "io_processor: no IO processor \"" + *name +
                                              "\" is registered for model \"" + model_->name +
                                              "\" (" + IoNames() + ")");
      }
    }
  }
  const bool get_route =
      p == "/health" || p == "/ready" || p == "/v1/models" || p == "/metrics" || IsHealthRoute(p);
  call->route = proc || get_route || p == "/pooling" ? p : "other";
  if (p.rfind("/v2/models/", 0) == 0) call->route = "/v2/models/{name}/ready";
  if (!r.metrics_route.empty()) call->route = r.metrics_route;
  if (r.transport_error)
    return Respond(call, [&] {
      HttpResponse e = ErrorResponse(r.transport_error, r.transport_message);
      e.close = true;
      return e;
    }());
  if (p == "/v1/completions" || p == "/v1/chat/completions") {
    call->route = p;
    return Respond(call,
                   ErrorResponse(400, "model \"" + model_->name + "\" is a scoring model (task " +
                                          model_->task + "): " + p + " needs a generation model"));
  }
  if (plugin_error && plugin_error->status == 404) return Respond(call, std::move(*plugin_error));
  if (!proc && !get_route && !plugin_error) {
    return Respond(call, ErrorResponse(404, "no route " + r.method + " " + p));
  }
  const char* want = proc || plugin_error ? "POST" : "GET";
  if (r.method != want) {
    HttpResponse e = ErrorResponse(
        405, "method " + r.method + " is not allowed on " + p + " (use " + want + ")");
    e.headers.emplace_back("Allow", want);
    return Respond(call, std::move(e));
  }
  if (r.overflow && !IsHealthRoute(p)) {
    // Over --max-connections: health still answers; anything else is turned away.
    HttpResponse e = ErrorResponse(503, "too many connections (--max-connections); retry later");
    e.headers.emplace_back("Retry-After", "1");
    e.close = true;
    return Respond(call, std::move(e));
  }
  if (!IsHealthRoute(p) && (p != "/metrics" || options_.metrics_require_key) && !Authorized(r)) {
    HttpResponse e = ErrorResponse(401, "missing or wrong API key (Authorization: Bearer KEY)");
    e.headers.emplace_back("WWW-Authenticate", "Bearer");
    return Respond(call, std::move(e));
  }
  if (plugin_error) return Respond(call, std::move(*plugin_error));
  if (p == "/health" || p == "/v2/health/live") return Respond(call, Health(false));
  if (p == "/ready" || p == "/v2/health/ready") return Respond(call, Health(true));
  if (p.rfind("/v2/models/", 0) == 0) {
    const std::string name = p.substr(11, p.size() - 11 - 6);
    if (name != model_->name) {
      return Respond(call, ErrorResponse(404, "model \"" + name + "\" is not served here"));
    }
    return Respond(call, Health(true));
  }
  if (p == "/v1/models") return Respond(call, Models());
  if (p == "/metrics") {
    GaugeValues g;
    g.queue_depth = loop_->queue_depth();
    g.in_flight = in_flight_.load();
    g.ready = ready_ && !draining_;
    HttpResponse m;
    m.body = metrics_.Render(g);
    m.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return Respond(call, std::move(m));
  }
  if (draining_) return Respond(call, ErrorResponse(503, "the server is shutting down"));
  if (!ready_) return Respond(call, ErrorResponse(503, "the model is loading"));
  call->proc = proc;
  call->counted = true;
  in_flight_++;
  pool_->Post([this, call] { RunProcessor(call); });
}

void Service::RunProcessor(std::shared_ptr<Call> call) {
  if (call->ex->disconnected()) {
    metrics_.AddCancelled();
    return Respond(call, StatusResponse(Status(StatusCode::kUnavailable, "client went away")));
  }
  std::string_view body = call->req.body;
  if (call->pooling_io) {
    auto data = io::PoolingIoData(*model_, body);
    if (!data.ok()) return Respond(call, StatusResponse(data.status()));
    call->io_body = std::move(data).value();
    body = call->io_body;
  }
  IoRequest io{call->route, body, model_};
  const auto t0 = call->ex->start;  // the parse stage includes the wait for a worker
  auto state = call->proc->Parse(io);
  if (!state.ok()) return Respond(call, StatusResponse(state.status()));
  call->state = std::move(state).value();
  const auto t1 = SteadyClock::now();
  std::vector<TokenSequence> seqs;
  Status s = call->proc->PreProcess(*model_, *call->state, &seqs);
  if (!s.ok()) return Respond(call, StatusResponse(s));
  std::vector<TokenSequence> side;
  if (model_->companion && companion_loop_) {
    s = call->proc->PreProcessCompanion(*model_->companion, *call->state, &side);
    if (!s.ok()) return Respond(call, StatusResponse(s));
  }
  metrics_.RecordStage(Stage::kParse, Seconds(t0, t1));
  metrics_.RecordStage(Stage::kTokenize, Seconds(t1, SteadyClock::now()));
  auto make = [&](std::vector<TokenSequence> inputs) {
    auto er = std::make_shared<EngineRequest>();
    er->inputs = std::move(inputs);
    if (options_.request_timeout_s > 0) {
      er->deadline =
          SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                   std::chrono::duration<double>(options_.request_timeout_s));
    }
    // call -> er -> sink -> call is a cycle until Finish (or a failed Submit) drops er.
    er->sink.on_done = [this, call](EngineRequest&, const Status& st) { Done(call, st); };
    return er;
  };
  auto er = make(std::move(seqs));
  std::shared_ptr<EngineRequest> cr = side.empty() ? nullptr : make(std::move(side));
  call->er = er;
  call->companion = cr;
  call->pending = cr ? 2 : 1;
  call->ex->OnDisconnect(
      [this, weak = std::weak_ptr<EngineRequest>(er), weak_c = std::weak_ptr<EngineRequest>(cr)] {
        if (auto r = weak.lock()) loop_->Cancel(*r);
        if (auto r = weak_c.lock()) companion_loop_->Cancel(*r);
      });
  Status sub = loop_->Submit(std::move(er));
  if (!sub.ok()) {
    call->er.reset();
    call->companion.reset();
    return Respond(call, StatusResponse(sub));
  }
  if (cr) {
    Status csub = companion_loop_->Submit(cr);
    if (!csub.ok()) {
      // The main request is running: cancel it; its completion answers with this failure.
      if (auto r = call->er) loop_->Cancel(*r);
      Done(call, csub);
    }
  }
}

void Service::Done(const std::shared_ptr<Call>& call, const Status& status) {
  Status st;
  {
    std::lock_guard<std::mutex> lock(call->mu);
    if (!status.ok() && call->status.ok()) call->status = status;
    if (--call->pending > 0) return;
    st = call->status;
  }
  // Post-processing runs on the worker pool, not on the engine's threads.
  pool_->Post([this, call, st] { Finish(call, st); });
}

void Service::Finish(std::shared_ptr<Call> call, Status status) {
  std::shared_ptr<EngineRequest> er = std::move(call->er);
  std::shared_ptr<EngineRequest> cr = std::move(call->companion);
  if (!status.ok()) {
    if (call->ex->disconnected()) metrics_.AddCancelled();
    return Respond(call, StatusResponse(status));
  }
  const auto t0 = er->finished;  // the respond stage includes the hop back to a worker
  if (!er->inputs.empty()) {
    metrics_.RecordStage(Stage::kQueue, Seconds(er->enqueued, er->started));
    metrics_.RecordStage(Stage::kCompute, Seconds(er->started, er->finished));
  }
  metrics_.AddTokens(call->state->prompt_tokens);
  std::vector<PooledOutput> outs = std::move(er->outputs);
  er.reset();
  if (cr) call->state->companion_outputs = std::move(cr->outputs);
  cr.reset();
  auto resp = call->proc->PostProcess(*model_, *call->state, outs);
  if (!resp.ok()) return Respond(call, StatusResponse(resp.status()));
  HttpResponse r;
  r.body = call->pooling_io ? io::PoolingIoResponse(*model_, call->proc->name(), resp->body,
                                                    call->state->prompt_tokens)
                            : std::move(resp->body);
  r.content_type = std::move(resp->content_type);
  // Recorded before the response leaves, so that a client sees it in /metrics at once.
  metrics_.RecordStage(Stage::kRespond, Seconds(t0, SteadyClock::now()));
  Respond(call, std::move(r));
}

}  // namespace sluice::server
