#include "server/router.h"

#include "io/builtins.h"
#include "io/json.h"
#include "server/auth.h"
#include "server/errors.h"
#include "server/kserve.h"

namespace sluice::server {
namespace {

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

HttpResponse Json(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

std::vector<std::string> Split(std::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find('/', pos);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

size_t SkipWs(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// i at an opening quote: returns the index after the closing quote (npos if unterminated).
size_t SkipString(std::string_view s, size_t i, bool* escaped) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      *escaped = true;
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<std::string> PeekStringField(std::string_view body, std::string_view key,
                                           bool* malformed) {
  *malformed = true;
  size_t i = SkipWs(body, 0);
  if (i >= body.size() || body[i] != '{') return std::nullopt;
  i = SkipWs(body, i + 1);
  if (i < body.size() && body[i] == '}') {
    *malformed = false;
    return std::nullopt;
  }
  std::optional<std::string> found;
  bool escaped = false, closed = false;
  while (i < body.size()) {
    if (body[i] != '"') return std::nullopt;
    const size_t kend = SkipString(body, i, &escaped);
    if (kend == std::string_view::npos) return std::nullopt;
    const std::string_view k = body.substr(i + 1, kend - i - 2);
    i = SkipWs(body, kend);
    if (i >= body.size() || body[i] != ':') return std::nullopt;
    i = SkipWs(body, i + 1);
    if (i >= body.size()) return std::nullopt;
    const size_t vstart = i;
    if (body[i] == '"') {
      i = SkipString(body, i, &escaped);
      if (i == std::string_view::npos) return std::nullopt;
      if (k == key && !found) found = std::string(body.substr(vstart + 1, i - vstart - 2));
    } else {
      int depth = 0;
      for (; i < body.size(); ++i) {
        const char c = body[i];
        if (c == '"') {
          i = SkipString(body, i, &escaped);
          if (i == std::string_view::npos) return std::nullopt;
          --i;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (depth == 0) break;
          --depth;
        } else if (c == ',' && depth == 0) {
          break;
        }
      }
    }
    i = SkipWs(body, i);
    if (i >= body.size()) return std::nullopt;
    if (body[i] == '}') {
      closed = true;
      break;
    }
    if (body[i] != ',') return std::nullopt;
    i = SkipWs(body, i + 1);
  }
  if (!closed) return std::nullopt;
  if (escaped) {
    // Escapes anywhere: let a real parser read the field.
    auto obj = io::ParseObject(body);
    if (!obj.ok()) return std::nullopt;
    *malformed = false;
    std::string_view v;
    if (obj->at_key(key).get(v)) return std::nullopt;
    return std::string(v);
  }
  *malformed = false;
  return found;
}

Router::Router(RouterOptions options, ModelRegistry* registry)
    : options_(std::move(options)), registry_(registry) {
  control_ = std::make_unique<WorkerPool>(1);
}

Router::~Router() { control_.reset(); }

void Router::Respond(const std::string& route, const std::shared_ptr<Exchange>& ex,
                     HttpResponse r) {
  const int status = ex->disconnected() ? 499 : r.status;
  metrics_.RecordResponse(ex->metrics_route.empty() ? route : ex->metrics_route, status,
                          Seconds(ex->start, SteadyClock::now()));
  ex->Respond(std::move(r));
}

bool Router::Authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  return BearerMatches(req.authorization, options_.api_key);
}

HttpResponse Router::Models() const {
  auto t = registry_->table();
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("object", "list");
  w.Key("data");
  w.BeginArray();
  for (const auto& [name, v] : *t) {
    const ServedModel& def = *v.versions.at(v.default_version)->model;
    w.BeginObject();
    w.KeyString("id", name);
    w.KeyString("object", "model");
    w.KeyInt("created", io::UnixSeconds());
    w.KeyString("owned_by", "sluice");
    w.KeyString("task", def.task());
    w.KeyInt("max_model_len", def.max_model_len());
    w.KeyString("version", std::to_string(v.default_version));
    w.Key("versions");
    w.BeginArray();
    for (const auto& [ver, slot] : v.versions) {
      w.BeginObject();
      w.KeyString("id", name + ":" + std::to_string(ver));
      w.KeyString("version", std::to_string(ver));
      w.KeyString("task", slot->model->task());
      w.KeyString("state", "READY");
      w.Key("default");
      w.Bool(ver == v.default_version);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(w.Take());
}

HttpResponse Router::Metadata(const std::string& name, std::optional<int64_t> version) const {
  auto t = registry_->table();
  auto it = t->find(name);
  if (it == t->end()) {
    return ErrorResponse(
        404, "model \"" + name + "\" is not served here; served: " + ModelRegistry::Describe(*t));
  }
  const auto& v = it->second;
  const int64_t ver = version ? *version : v.default_version;
  auto vit = v.versions.find(ver);
  if (vit == v.versions.end()) {
    return ErrorResponse(404, "version " + std::to_string(ver) + " of model \"" + name +
                                  "\" is not served here; served: " + ModelRegistry::Describe(*t));
  }
  const ServedModel& m = *vit->second->model;
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("name", name);
  w.Key("versions");
  w.BeginArray();
  if (version) {
    w.String(std::to_string(ver));
  } else {
    for (const auto& [x, slot] : v.versions) w.String(std::to_string(x));
  }
  w.EndArray();
  w.KeyString("platform", "sluice");
  w.KeyString("default_version", std::to_string(v.default_version));
  w.KeyString("task", m.task());
  w.KeyInt("max_model_len", m.max_model_len());
  w.Key("ready");
  w.Bool(true);
  WriteKServeTensors(m, &w);
  w.EndObject();
  return Json(w.Take());
}

void Router::Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) {
  const std::string p = req.path;
  if (req.transport_error) {
    HttpResponse e = ErrorResponse(req.transport_error, req.transport_message);
    e.close = true;
    return Respond("other", ex, std::move(e));
  }
  const bool health = p == "/health" || p == "/ready" || p == "/v2/health/live" ||
                      p == "/v2/health/ready" ||
                      (p.rfind("/v2/models/", 0) == 0 && p.size() > 17 &&
                       p.compare(p.size() - 6, 6, "/ready") == 0);
  if (req.overflow && !health) {
    HttpResponse e = ErrorResponse(503, "too many connections (--max-connections); retry later");
    e.headers.emplace_back("Retry-After", "1");
    e.close = true;
    return Respond("other", ex, std::move(e));
  }
  const bool is_metrics = p == "/metrics";
  const bool v2models = p.rfind("/v2/models/", 0) == 0;
  const bool repo = p.rfind("/v2/repository/", 0) == 0;
  const bool inference = IsScoringRoute(p) || IsGenerationRoute(p);
  const bool get_route = p == "/health" || p == "/ready" || p == "/v2/health/live" ||
                         p == "/v2/health/ready" || p == "/v1/models" || p == "/v2" || is_metrics;
  if (!get_route && !v2models && !repo && !inference) {
    return Respond("other", ex, ErrorResponse(404, "no route " + req.method + " " + p));
  }
  const std::string route = v2models ? "/v2/models/{name}" : repo ? "/v2/repository" : p;
  if (get_route || inference || repo) {
    const char* want = get_route ? "GET" : "POST";
    if (req.method != want) {
      HttpResponse e = ErrorResponse(
          405, "method " + req.method + " is not allowed on " + p + " (use " + want + ")");
      e.headers.emplace_back("Allow", want);
      return Respond(route, ex, std::move(e));
    }
  }
  if (!health && (!is_metrics || options_.metrics_require_key) && !Authorized(req)) {
    HttpResponse e = ErrorResponse(401, "missing or wrong API key (Authorization: Bearer KEY)");
    e.headers.emplace_back("WWW-Authenticate", "Bearer");
    return Respond(route, ex, std::move(e));
  }
  if (p == "/health" || p == "/v2/health/live") return Respond(route, ex, Json("{}"));
  if (p == "/ready" || p == "/v2/health/ready") {
    if (!ready_ || draining_) {
      return Respond(
          route, ex,
          ErrorResponse(503, draining_ ? "the server is shutting down" : "the models are loading"));
    }
    return Respond(route, ex, Json("{}"));
  }
  if (p == "/v2") {
    io::JsonWriter w;
    w.BeginObject();
    w.KeyString("name", "sluice");
    w.KeyString("version", options_.server_version);
    w.Key("extensions");
    w.BeginArray();
    w.String("model_repository");
    w.EndArray();
    w.EndObject();
    return Respond(route, ex, Json(w.Take()));
  }
  if (p == "/v1/models") return Respond(route, ex, Models());
  if (is_metrics) {
    std::vector<std::string> parts;
    parts.push_back(metrics_.RenderResponses());
    auto t = registry_->table();
    for (const auto& [name, v] : *t) {
      for (const auto& [ver, slot] : v.versions) parts.push_back(slot->model->RenderMetrics());
    }
    parts.push_back(registry_->RenderMetrics());
    std::string ready =
        "# HELP sluice_server_ready 1 when the start-up models are loaded and "
        "the server is not draining.\n# TYPE sluice_server_ready gauge\n"
        "sluice_server_ready " +
        std::to_string(ready_ && !draining_ ? 1 : 0) + "\n";
    parts.push_back(std::move(ready));
    HttpResponse m;
    m.body = MergeExpositions(parts);
    m.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return Respond(route, ex, std::move(m));
  }
  if (v2models) return HandleV2Models(std::move(req), std::move(ex));
  if (repo) return HandleRepository(std::move(req), std::move(ex));
  // Inference routes: the `model` field names the model (and version).
  bool malformed = false;
  const std::optional<std::string> ref = PeekStringField(req.body, "model", &malformed);
  std::string name;
  std::optional<int64_t> version;
  if (ref && !ref->empty()) {
    if (!serving::SplitModelRef(*ref, &name, &version).ok()) {
      return Respond(route, ex,
                     ErrorResponse(404, "model \"" + *ref + "\" is not served here; served: " +
                                            ModelRegistry::Describe(*registry_->table())));
    }
  }
  RouteInference(std::move(req), std::move(ex), name, version);
}

void Router::RouteInference(HttpRequest&& req, std::shared_ptr<Exchange> ex,
                            const std::string& name_in, std::optional<int64_t> version) {
  const std::string route = req.path;
  if (draining_) return Respond(route, ex, ErrorResponse(503, "the server is shutting down"));
  if (!ready_) return Respond(route, ex, ErrorResponse(503, "the models are loading"));
  std::string name = name_in;
  if (name.empty()) {
    auto t = registry_->table();
    // A plugin IO processor (/plugins/NAME, /pooling with "io_processor") goes to the one
    // model that has it: plugins are per model (docs/plugins.md).
    std::optional<std::string> io;
    if (route.rfind("/plugins/", 0) == 0) {
      io = route.substr(9);
    } else if (route == "/pooling") {
      bool malformed = false;
      io = PeekStringField(req.body, "io_processor", &malformed);
    }
    if (io) {
      std::vector<std::string> has;
      std::string listing, builtins;
      int scoring = 0;
      for (const auto& [n, v] : *t) {
        const ServedModel& m = *v.versions.at(v.default_version)->model;
        if (m.HasIoProcessor(*io)) has.push_back(n);
        if (m.generation()) continue;
        ++scoring;
        listing += (listing.empty() ? "\"" : "; \"") + n + "\": " + m.PluginIoProcessorNames();
        if (builtins.empty()) builtins = m.BuiltinIoProcessorNames();
      }
      if (!builtins.empty()) {
        listing = "built-in IO processors of the text scoring models: " + builtins +
                  "; plugin IO processors by model: " + listing;
      } else {
        listing = "IO processors by model: " + listing;
      }
      if (has.size() == 1) {
        name = has[0];
      } else if (has.size() > 1) {
        std::string names;
        for (const std::string& h : has) names += (names.empty() ? "\"" : ", \"") + h + "\"";
        return Respond(route, ex,
                       ErrorResponse(400, "\"model\" is required: IO processor \"" + *io +
                                              "\" is served by the models " + names));
      } else if (scoring > 1) {
        const bool pooling = route == "/pooling";
        return Respond(
            route, ex,
            ErrorResponse(pooling ? 400 : 404, std::string(pooling ? "io_processor: " : "") +
                                                   "no model serves IO processor \"" + *io +
                                                   "\" (" + listing + ")"));
      }
      // Otherwise the one scoring model's service explains (below).
    }
  }
  if (name.empty()) {
    auto t = registry_->table();
    std::vector<std::string> fit;
    for (const auto& [n, v] : *t) {
      if (v.versions.at(v.default_version)->model->ServesRoute(route)) fit.push_back(n);
    }
    if (fit.size() == 1) {
      name = fit[0];
    } else if (t->size() == 1) {
      name = t->begin()->first;  // its service explains why the route does not fit it
    } else if (t->empty()) {
      return Respond(route, ex, ErrorResponse(404, "no model is served here"));
    } else {
      return Respond(route, ex,
                     ErrorResponse(400, "\"model\" is required: this server serves " +
                                            ModelRegistry::Describe(*t)));
    }
  }
  auto lease = registry_->Acquire(name, version);
  if (!lease.ok()) return Respond(route, ex, StatusResponse(lease.status()));
  auto held = std::make_shared<ModelRegistry::Lease>(std::move(lease).value());
  ServedModel& model = held->model();
  ex->AddHeader("Sluice-Model", held->name());
  ex->AddHeader("Sluice-Model-Version", std::to_string(held->version()));
  ex->OnFinish([held] { held->Release(); });
  model.Handle(std::move(req), std::move(ex));
}

void Router::HandleV2Models(HttpRequest&& req, std::shared_ptr<Exchange> ex) {
  const std::string& p = req.path;
  std::vector<std::string> parts = Split(std::string_view(p).substr(11));
  std::optional<int64_t> version;
  std::string action;
  const std::string& name = parts[0];
  size_t i = 1;
  if (parts.size() >= 3 && parts[1] == "versions") {
    auto v = serving::ParseVersion(parts[2]);
    if (!v.ok()) return Respond("/v2/models/{name}", ex, StatusResponse(v.status()));
    version = *v;
    i = 3;
  }
  if (i < parts.size()) action = parts[i++];
  if (i < parts.size() || (action != "" && action != "ready" && action != "infer")) {
    return Respond("other", ex, ErrorResponse(404, "no route " + req.method + " " + p));
  }
  const std::string route = std::string("/v2/models/{name}") + (version ? "/versions/{v}" : "") +
                            (action.empty() ? "" : "/" + action);
  if (Status s = serving::ValidateName(name); !s.ok()) {
    return Respond(route, ex, StatusResponse(s));
  }
  const char* want = action == "infer" ? "POST" : "GET";
  if (req.method != want) {
    HttpResponse e = ErrorResponse(
        405, "method " + req.method + " is not allowed on " + p + " (use " + want + ")");
    e.headers.emplace_back("Allow", want);
    return Respond(route, ex, std::move(e));
  }
  if (action == "ready") {
    if (draining_) return Respond(route, ex, ErrorResponse(503, "the server is shutting down"));
    auto t = registry_->table();
    auto it = t->find(name);
    if (it == t->end() ||
        (version && it->second.versions.find(*version) == it->second.versions.end())) {
      const std::string what =
          version ? "version " + std::to_string(*version) + " of model \"" + name + "\""
                  : "model \"" + name + "\"";
      return Respond(route, ex,
                     ErrorResponse(404, what + " is not served here (or not ready); served: " +
                                            ModelRegistry::Describe(*t)));
    }
    return Respond(route, ex, Json("{}"));
  }
  if (action.empty()) return Respond(route, ex, Metadata(name, version));
  // POST .../infer: KServe v2 inference (server/kserve.h) on the version that serves it.
  auto held = LeaseForInfer(route, name, version, ex);
  if (!held) return;
  KServeInfer(held->model(), held->name(), held->version(), std::move(req), std::move(ex));
}

std::shared_ptr<ModelRegistry::Lease> Router::LeaseForInfer(const std::string& route,
                                                            const std::string& name,
                                                            std::optional<int64_t> version,
                                                            const std::shared_ptr<Exchange>& ex) {
  auto kerror = [&](int status, const std::string& message) {
    io::JsonWriter w;
    w.BeginObject();
    w.KeyString("error", message);
    w.EndObject();
    HttpResponse r;
    r.status = status;
    r.body = w.Take();
    if (status == 503) r.headers.emplace_back("Retry-After", "1");
    return r;
  };
  if (draining_) {
    Respond(route, ex, kerror(503, "the server is shutting down"));
    return nullptr;
  }
  if (!ready_) {
    Respond(route, ex, kerror(503, "the models are loading"));
    return nullptr;
  }
  auto lease = registry_->Acquire(name, version);
  if (!lease.ok()) {
    const HttpResponse e = StatusResponse(lease.status());
    Respond(route, ex, kerror(e.status, lease.status().message()));
    return nullptr;
  }
  auto held = std::make_shared<ModelRegistry::Lease>(std::move(lease).value());
  ex->AddHeader("Sluice-Model", held->name());
  ex->AddHeader("Sluice-Model-Version", std::to_string(held->version()));
  ex->OnFinish([held] { held->Release(); });
  return held;
}

void Router::KServeInferTyped(const std::string& name, std::optional<int64_t> version,
                              const std::string& authorization, std::shared_ptr<KServeCall> call,
                              std::shared_ptr<Exchange> ex) {
  // What Handle and HandleV2Models check for POST /v2/models/{name}[/versions/{v}]/infer of
  // a checked name: the API key, then draining, readiness and the lease.
  if (!options_.api_key.empty() && !BearerMatches(authorization, options_.api_key)) {
    HttpResponse e = ErrorResponse(401, "missing or wrong API key (Authorization: Bearer KEY)");
    e.headers.emplace_back("WWW-Authenticate", "Bearer");
    return Respond("/v2/models/{name}", ex, std::move(e));
  }
  const std::string route =
      std::string("/v2/models/{name}") + (version ? "/versions/{v}" : "") + "/infer";
  auto held = LeaseForInfer(route, name, version, ex);
  if (!held) return;
  server::KServeInferTyped(held->model(), held->name(), held->version(), authorization,
                           std::move(call), std::move(ex));
}

void Router::HandleRepository(HttpRequest&& req, std::shared_ptr<Exchange> ex) {
  const std::string p = req.path;
  std::string name, action;
  if (p == "/v2/repository/index") {
    action = "index";
  } else if (p.rfind("/v2/repository/models/", 0) == 0) {
    std::vector<std::string> parts = Split(std::string_view(p).substr(22));
    if (parts.size() == 2) {
      name = parts[0];
      action = parts[1];
    }
    if (action != "load" && action != "unload" && action != "default") action.clear();
  }
  if (action.empty()) {
    return Respond("other", ex, ErrorResponse(404, "no route " + req.method + " " + p));
  }
  const std::string route =
      action == "index" ? "/v2/repository/index" : "/v2/repository/models/{name}/" + action;
  if (action != "index") {
    if (Status s = serving::ValidateName(name); !s.ok()) {
      return Respond(route, ex, StatusResponse(s));
    }
    if (!options_.explicit_control) {
      return Respond(route, ex,
                     ErrorResponse(403,
                                   "model control is disabled: start the server with "
                                   "--model-control explicit to load, unload or switch "
                                   "models"));
    }
    if (draining_) return Respond(route, ex, ErrorResponse(503, "the server is shutting down"));
  }
  // Parse the body here (cheap), run the operation on the control thread.
  std::optional<std::string> config;
  std::optional<int64_t> version;
  bool ready_only = false;
  const bool empty = req.body.find_first_not_of(" \t\r\n") == std::string::npos;
  if (!empty) {
    auto obj = io::ParseObject(req.body);
    if (!obj.ok()) return Respond(route, ex, StatusResponse(obj.status()));
    io::Fields f(*obj, "");
    simdjson::dom::element e;
    Status s;
    if (action == "index") {
      s = f.GetBool("ready", &ready_only);
    } else if (action == "load") {
      if (f.Get("parameters", &e)) {
        simdjson::dom::object po;
        if (e.get(po)) {
          s = io::FieldError("parameters", "must be an object");
        } else {
          io::Fields pf(po, "parameters");
          simdjson::dom::element c;
          if (pf.Get("config", &c)) {
            std::string_view cs;
            if (!c.get(cs)) {
              config = std::string(cs);
            } else if (c.is_object()) {
              config = simdjson::to_string(c);
            } else {
              s = io::FieldError("parameters.config", "must be a JSON object or a string of one");
            }
          }
          if (s.ok()) s = pf.CheckNoUnknown();
        }
      }
    } else if (action == "default") {
      if (f.Get("version", &e)) {
        int64_t v = 0;
        std::string_view vs;
        if (!e.get(v) && v > 0) {
          version = v;
        } else if (!e.get(vs)) {
          auto pv = serving::ParseVersion(vs);
          if (pv.ok()) {
            version = *pv;
          } else {
            s = io::FieldError("version", pv.status().message());
          }
        } else {
          s = io::FieldError("version", "must be a positive integer (or a string of one)");
        }
      }
    }
    if (s.ok()) s = f.CheckNoUnknown();
    if (!s.ok()) return Respond(route, ex, StatusResponse(s));
  }
  if (action == "default" && !version) {
    return Respond(route, ex, StatusResponse(io::FieldError("version", "is required")));
  }
  if (action == "index") {
    io::JsonWriter w;
    w.BeginArray();
    for (const auto& e : registry_->Index()) {
      if (ready_only && e.state != "READY") continue;
      w.BeginObject();
      w.KeyString("name", e.name);
      if (e.version) w.KeyString("version", std::to_string(*e.version));
      if (!e.state.empty()) w.KeyString("state", e.state);
      if (!e.reason.empty()) w.KeyString("reason", e.reason);
      w.EndObject();
    }
    w.EndArray();
    return Respond(route, ex, Json(w.Take()));
  }
  control_running_++;
  control_->Post([this, ex, route, name, action, config, version] {
    Status s;
    if (action == "load") {
      s = registry_->Load(name, config);
    } else if (action == "unload") {
      s = registry_->Unload(name);
    } else {
      s = registry_->SetDefault(name, *version);
    }
    Respond(route, ex, s.ok() ? Json("{}") : StatusResponse(s));
    control_running_--;
  });
}

}  // namespace sluice::server
