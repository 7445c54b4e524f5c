#include "server/kserve.h"

#include <algorithm>
#include <numeric>

#include "server/errors.h"

namespace sluice::server {
namespace {

enum class Kind { kEmbed, kClassify, kScore, kNone };

Kind KindOf(const ModelContext* c) {
  if (!c || c->token_level || c->late_interaction) {
    return c && c->late_interaction ? Kind::kScore : Kind::kNone;
  }
  if (c->task == "embed") return Kind::kEmbed;
  if (c->task == "classify") return Kind::kClassify;
  if (c->task == "score") return Kind::kScore;
  return Kind::kNone;
}

Kind KindOf(const ServedModel& m) { return KindOf(m.context()); }

void Tensor(io::JsonWriter* w, const char* name, const char* type, std::vector<int64_t> shape) {
  w->BeginObject();
  w->KeyString("name", name);
  w->KeyString("datatype", type);
  w->Key("shape");
  w->BeginArray();
  for (int64_t d : shape) w->Int(d);
  w->EndArray();
  w->EndObject();
}

HttpResponse KError(int status, const std::string& message) {
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("error", message);
  w.EndObject();
  HttpResponse r;
  r.status = status;
  r.body = w.Take();
  if (status == 429 || status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse KError(const Status& s) {
  HttpResponse r = StatusResponse(s);
  return KError(r.status, s.message());
}

struct Input {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::vector<simdjson::dom::element> data;  // flattened
};

// An input as the checks below read it: the HTTP body's (JSON elements) or a typed
// request's (KServeInput).
struct In {
  std::string_view name, datatype;
  const std::vector<int64_t>* shape = nullptr;
  size_t count = 0;
  const std::vector<simdjson::dom::element>* json = nullptr;
  const KServeInput* typed = nullptr;

  explicit In(const Input& in)
      : name(in.name),
        datatype(in.datatype),
        shape(&in.shape),
        count(in.data.size()),
        json(&in.data) {}
  explicit In(const KServeInput& in)
      : name(in.name), datatype(in.datatype), shape(&in.shape), count(in.count), typed(&in) {}
  // Element i as a text / a token id; false when it is not one.
  bool Text(size_t i, std::string_view* s) const {
    if (json) return !(*json)[i].get(*s);
    if (i >= typed->texts.size()) return false;
    *s = typed->texts[i];
    return true;
  }
  bool Id(size_t i, int64_t* v) const {
    if (json) return !(*json)[i].get(*v);
    if (i >= typed->ids.size()) return false;
    *v = typed->ids[i];
    return true;
  }
};

Status ShapeMatches(const std::vector<int64_t>& shape, size_t count, const std::string& path) {
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  if (shape.empty() || n != static_cast<int64_t>(count)) {
    return io::FieldError(path + ".data", "holds " + std::to_string(count) +
                                              " elements; its shape wants " + std::to_string(n));
  }
  return Status::Ok();
}

void Flatten(simdjson::dom::element e, std::vector<simdjson::dom::element>* out) {
  simdjson::dom::array a;
  if (!e.get(a)) {
    for (auto x : a) Flatten(x, out);
  } else {
    out->push_back(e);
  }
}

StatusOr<Input> ReadInput(simdjson::dom::element e, const std::string& path) {
  simdjson::dom::object obj;
  if (e.get(obj)) return io::FieldError(path, "must be an object");
  io::Fields f(obj, path);
  Input in;
  RETURN_IF_ERROR(f.GetString("name", &in.name));
  RETURN_IF_ERROR(f.GetString("datatype", &in.datatype));
  if (in.name.empty()) return io::FieldError(path + ".name", "is required");
  simdjson::dom::element s, d;
  simdjson::dom::array sa;
  if (!f.Get("shape", &s) || s.get(sa)) {
    return io::FieldError(path + ".shape", "is required (a list of dimensions)");
  }
  for (auto x : sa) {
    int64_t v = 0;
    if (x.get(v) || v < 0) return io::FieldError(path + ".shape", "must hold dimensions >= 0");
    in.shape.push_back(v);
  }
  if (!f.Get("data", &d)) return io::FieldError(path + ".data", "is required");
  Flatten(d, &in.data);
  if (f.Get("parameters", &s)) {
    return io::FieldError(path + ".parameters",
                          "is not supported (binary data is not; send the data as JSON)");
  }
  RETURN_IF_ERROR(f.CheckNoUnknown());
  RETURN_IF_ERROR(ShapeMatches(in.shape, in.data.size(), path));
  return in;
}

// BYTES [N] (or [N, 1]) -> N strings.
Status WriteTexts(const In& in, const std::string& path, io::JsonWriter* w) {
  const std::vector<int64_t>& shape = *in.shape;
  if (in.datatype != "BYTES") return io::FieldError(path + ".datatype", "must be BYTES");
  if (shape.size() > 2 || (shape.size() == 2 && shape[1] != 1)) {
    return io::FieldError(path + ".shape", "must be [N] (one text per element)");
  }
  w->BeginArray();
  for (size_t i = 0; i < in.count; ++i) {
    std::string_view s;
    if (!in.Text(i, &s)) {
      return io::FieldError(path + ".data[" + std::to_string(i) + "]", "must be a string");
    }
    w->String(s);
  }
  w->EndArray();
  return Status::Ok();
}

// INT64 [N, L] (or [L] for one row when `one_row`) -> N lists of ids.
Status WriteIds(const In& in, const std::string& path, bool one_row, io::JsonWriter* w) {
  const std::vector<int64_t>& shape = *in.shape;
  if (in.datatype != "INT64" && in.datatype != "INT32") {
    return io::FieldError(path + ".datatype", "must be INT64 (token ids)");
  }
  if (shape.size() != 2 && !(one_row && shape.size() == 1)) {
    return io::FieldError(path + ".shape", one_row ? "must be [1, L] or [L]" : "must be [N, L]");
  }
  const int64_t rows = shape.size() == 2 ? shape[0] : 1;
  const int64_t len = shape.back();
  if (one_row && rows != 1) return io::FieldError(path + ".shape", "must hold one row");
  if (!one_row) w->BeginArray();
  for (int64_t r = 0; r < rows; ++r) {
    w->BeginArray();
    for (int64_t k = 0; k < len; ++k) {
      int64_t id = 0;
      const size_t i = static_cast<size_t>(r * len + k);
      if (!in.Id(i, &id)) {
        return io::FieldError(path + ".data[" + std::to_string(i) + "]", "must be an integer");
      }
      w->Int(id);
    }
    w->EndArray();
  }
  if (!one_row) w->EndArray();
  return Status::Ok();
}

struct Plan {
  Kind kind = Kind::kNone;
  std::string route, body, id;
  std::vector<std::string> outputs;  // requested ("" = all)
  bool top_n = false;
};

// The model's kind, or the refusal of a model infer does not serve.
StatusOr<Kind> ServedKind(const ModelContext* context, const std::string& task) {
  const Kind kind = KindOf(context);
  if (kind == Kind::kNone) {
    return FailedPrecondition(
        "KServe infer serves embedding, classification and scoring models; "
        "this model's task is " +
        task + " (use its own routes)");
  }
  return kind;
}

// The request's "parameters" object: truncate, and top_n for scoring models.
Status ReadParameters(simdjson::dom::element e, Kind kind, bool* truncate, int64_t* top_n) {
  simdjson::dom::object po;
  if (e.get(po)) return io::FieldError("parameters", "must be an object");
  io::Fields pf(po, "parameters");
  RETURN_IF_ERROR(pf.GetBool("truncate", truncate));
  if (kind == Kind::kScore) {
    RETURN_IF_ERROR(pf.GetInt("top_n", top_n));
    if (pf.Get("top_n", &e) && *top_n < 1) {
      return io::FieldError("parameters.top_n", "must be at least 1");
    }
  }
  return pf.CheckNoUnknown();
}

// The native request of a request read (`p` has its kind, id and outputs): the checks
// that follow the reading of the inputs, the same for the HTTP body and a typed request.
Status BuildFromInputs(const std::string& ref, bool truncate, int64_t top_n,
                       const std::vector<In>& inputs, Plan* out) {
  Plan& p = *out;
  auto find = [&](const char* name) -> const In* {
    for (const In& in : inputs) {
      if (in.name == name) return &in;
    }
    return nullptr;
  };
  auto path_of = [&](const In* in) { return "inputs[" + std::to_string(in - inputs.data()) + "]"; };
  std::vector<const char*> allowed;
  if (p.kind == Kind::kScore) {
    allowed = {"query", "documents", "query_ids", "document_ids"};
  } else {
    allowed = {"text", "input_ids"};
  }
  for (const In& in : inputs) {
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return in.name == a; })) {
      std::string names;
      for (const char* a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return io::FieldError(
          path_of(&in) + ".name",
          "\"" + std::string(in.name) + "\" is not an input of this model (" + names + ")");
    }
    int same = 0;
    for (const In& o : inputs) same += o.name == in.name;
    if (same > 1) {
      return io::FieldError("inputs", "\"" + std::string(in.name) + "\" is given twice");
    }
  }
  for (const std::string& o : p.outputs) {
    const bool ok = p.kind == Kind::kEmbed      ? o == "embedding"
                    : p.kind == Kind::kClassify ? (o == "probabilities" || o == "logits")
                                                : (o == "scores" || o == "indices");
    if (!ok) return io::FieldError("outputs", "\"" + o + "\" is not an output of this model");
  }
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("model", ref);
  if (truncate) w.KeyInt("truncate_prompt_tokens", -1);
  if (p.kind == Kind::kScore) {
    p.route = "/v1/rerank";
    const In* q = find("query");
    const In* qi = find("query_ids");
    const In* d = find("documents");
    const In* di = find("document_ids");
    if ((q != nullptr) == (qi != nullptr)) {
      return io::FieldError("inputs", "need exactly one of \"query\" (BYTES) and \"query_ids\"");
    }
    if ((d != nullptr) == (di != nullptr)) {
      return io::FieldError("inputs",
                            "need exactly one of \"documents\" (BYTES) and \"document_ids\"");
    }
    w.Key("query");
    if (q) {
      if (q->datatype != "BYTES") return io::FieldError(path_of(q) + ".datatype", "must be BYTES");
      std::string_view text;
      if (q->count != 1) return io::FieldError(path_of(q) + ".shape", "must be [1]");
      if (!q->Text(0, &text)) return io::FieldError(path_of(q) + ".data[0]", "must be a string");
      w.String(text);
    } else {
      RETURN_IF_ERROR(WriteIds(*qi, path_of(qi), true, &w));
    }
    w.Key("documents");
    if (d) {
      RETURN_IF_ERROR(WriteTexts(*d, path_of(d), &w));
    } else {
      RETURN_IF_ERROR(WriteIds(*di, path_of(di), false, &w));
    }
    w.Key("return_documents");
    w.Bool(false);
    if (top_n > 0) {
      w.KeyInt("top_n", top_n);
      p.top_n = true;
    }
  } else {
    p.route = p.kind == Kind::kEmbed ? "/v1/embeddings" : "/classify";
    const In* t = find("text");
    const In* ids = find("input_ids");
    if ((t != nullptr) == (ids != nullptr)) {
      return io::FieldError("inputs", "need exactly one of \"text\" (BYTES) and \"input_ids\"");
    }
    w.Key("input");
    if (t) {
      RETURN_IF_ERROR(WriteTexts(*t, path_of(t), &w));
    } else {
      RETURN_IF_ERROR(WriteIds(*ids, path_of(ids), false, &w));
    }
  }
  w.EndObject();
  p.body = w.Take();
  return Status::Ok();
}

// The HTTP body.
StatusOr<Plan> BuildNative(const ModelContext* context, const std::string& task,
                           const std::string& ref, const std::string& body) {
  Plan p;
  ASSIGN_OR_RETURN(p.kind, ServedKind(context, task));
  ASSIGN_OR_RETURN(simdjson::dom::object obj, io::ParseObject(body));
  io::Fields f(obj, "");
  RETURN_IF_ERROR(f.GetString("id", &p.id));
  simdjson::dom::element e;
  bool truncate = false;
  int64_t top_n = 0;
  if (f.Get("parameters", &e)) RETURN_IF_ERROR(ReadParameters(e, p.kind, &truncate, &top_n));
  if (f.Get("outputs", &e)) {
    simdjson::dom::array oa;
    if (e.get(oa)) return io::FieldError("outputs", "must be a list");
    size_t i = 0;
    for (auto o : oa) {
      const std::string path = "outputs[" + std::to_string(i++) + "]";
      simdjson::dom::object oo;
      if (o.get(oo)) return io::FieldError(path, "must be an object");
      io::Fields of(oo, path);
      std::string name;
      RETURN_IF_ERROR(of.GetString("name", &name));
      if (of.Get("parameters", &e)) {
        return io::FieldError(path + ".parameters", "is not supported (binary data is not)");
      }
      RETURN_IF_ERROR(of.CheckNoUnknown());
      p.outputs.push_back(name);
    }
  }
  std::vector<Input> inputs;
  if (!f.Get("inputs", &e)) return io::FieldError("inputs", "is required");
  simdjson::dom::array ia;
  if (e.get(ia) || ia.size() == 0) return io::FieldError("inputs", "must be a non-empty list");
  {
    size_t i = 0;
    for (auto x : ia) {
      ASSIGN_OR_RETURN(Input in, ReadInput(x, "inputs[" + std::to_string(i++) + "]"));
      inputs.push_back(std::move(in));
    }
  }
  RETURN_IF_ERROR(f.CheckNoUnknown());
  std::vector<In> views;
  views.reserve(inputs.size());
  for (const Input& in : inputs) views.emplace_back(in);
  RETURN_IF_ERROR(BuildFromInputs(ref, truncate, top_n, views, &p));
  return p;
}

// A typed request: the checks of ReadInput that a typed input can fail (a name, dimensions
// >= 0, as many elements as the shape wants), in the body's order.
StatusOr<Plan> BuildNative(const ModelContext* context, const std::string& task,
                           const std::string& ref, const KServeRequest& req) {
  Plan p;
  ASSIGN_OR_RETURN(p.kind, ServedKind(context, task));
  p.id = req.id;
  bool truncate = false;
  int64_t top_n = 0;
  if (req.parameters) RETURN_IF_ERROR(ReadParameters(*req.parameters, p.kind, &truncate, &top_n));
  p.outputs = req.outputs;
  if (req.inputs.empty()) return io::FieldError("inputs", "must be a non-empty list");
  std::vector<In> views;
  views.reserve(req.inputs.size());
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    const KServeInput& in = req.inputs[i];
    const std::string path = "inputs[" + std::to_string(i) + "]";
    if (in.name.empty()) return io::FieldError(path + ".name", "is required");
    for (int64_t v : in.shape) {
      if (v < 0) return io::FieldError(path + ".shape", "must hold dimensions >= 0");
    }
    RETURN_IF_ERROR(ShapeMatches(in.shape, in.count, path));
    views.emplace_back(in);
  }
  RETURN_IF_ERROR(BuildFromInputs(ref, truncate, top_n, views, &p));
  return p;
}

bool Wanted(const Plan& p, const char* name) {
  return p.outputs.empty() ||
         std::find(p.outputs.begin(), p.outputs.end(), name) != p.outputs.end();
}

// The native JSON response -> the KServe response.
StatusOr<KServeResponse> Convert(const Plan& p, const std::string& name, int64_t version,
                                 const std::string& native) {
  ASSIGN_OR_RETURN(simdjson::dom::object obj, io::ParseObject(native));
  KServeResponse out;
  out.model_name = name;
  out.model_version = std::to_string(version);
  out.id = p.id;
  auto floats = [](simdjson::dom::element arr, std::vector<float>* v) {
    simdjson::dom::array a;
    if (arr.get(a)) return false;
    for (auto x : a) {
      double d = 0;
      if (x.get(d)) return false;
      v->push_back(static_cast<float>(d));
    }
    return true;
  };
  const Status bad = Internal("unexpected native response");
  if (p.kind == Kind::kScore) {
    simdjson::dom::array results;
    if (obj["results"].get(results)) return bad;
    const size_t n = results.size();
    std::vector<int64_t> idx(n);
    std::vector<float> score(n);
    size_t k = 0;
    for (auto r : results) {
      double s = 0;
      if (r["index"].get(idx[k]) || r["relevance_score"].get(s)) return bad;
      score[k++] = static_cast<float>(s);
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (!p.top_n) {  // every document, in input order
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return idx[a] < idx[b]; });
    }
    const int64_t rows = static_cast<int64_t>(n);
    if (Wanted(p, "scores")) {
      KServeOutput& o = out.outputs.emplace_back(KServeOutput{"scores", "FP32", {rows}, {}, {}});
      o.fp32.reserve(n);
      for (size_t i : order) o.fp32.push_back(score[i]);
    }
    if (Wanted(p, "indices")) {
      KServeOutput& o = out.outputs.emplace_back(KServeOutput{"indices", "INT64", {rows}, {}, {}});
      o.int64.reserve(n);
      for (size_t i : order) o.int64.push_back(idx[i]);
    }
  } else {
    simdjson::dom::array data;
    if (obj["data"].get(data)) return bad;
    const int64_t rows = static_cast<int64_t>(data.size());
    const char* fields[2] = {p.kind == Kind::kEmbed ? "embedding" : "probs", "logits"};
    const char* names[2] = {p.kind == Kind::kEmbed ? "embedding" : "probabilities", "logits"};
    for (int f = 0; f < (p.kind == Kind::kEmbed ? 1 : 2); ++f) {
      if (!Wanted(p, names[f])) continue;
      KServeOutput o{names[f], "FP32", {}, {}, {}};
      for (auto row : data) {
        simdjson::dom::element v;
        if (row[fields[f]].get(v) || !floats(v, &o.fp32)) return bad;
      }
      const int64_t total = static_cast<int64_t>(o.fp32.size());
      o.shape = {rows, rows > 0 ? total / rows : 0};
      out.outputs.push_back(std::move(o));
    }
  }
  return out;
}

}  // namespace

std::string KServeResponseJson(const KServeResponse& r) {
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("model_name", r.model_name);
  w.KeyString("model_version", r.model_version);
  if (!r.id.empty()) w.KeyString("id", r.id);
  w.Key("outputs");
  w.BeginArray();
  for (const KServeOutput& o : r.outputs) {
    w.BeginObject();
    w.KeyString("name", o.name);
    w.KeyString("datatype", o.datatype);
    w.Key("shape");
    w.BeginArray();
    for (int64_t d : o.shape) w.Int(d);
    w.EndArray();
    w.Key("data");
    w.BeginArray();
    for (float v : o.fp32) w.Float(v);
    for (int64_t v : o.int64) w.Int(v);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
}

namespace {

// The native request of `plan` on `model`, answered through `done` (the native response:
// its status and body); the native route's errors become the protocol's {"error": "..."}.
template <typename Ok>
void RunNative(ServedModel& model, std::shared_ptr<Plan> p, const std::string& authorization,
               std::shared_ptr<Exchange> ex, Ok ok) {
  HttpRequest native;
  native.method = "POST";
  native.path = p->route;
  native.metrics_route = ex->metrics_route.empty() ? "/v2/models/{name}/infer" : ex->metrics_route;
  native.body = std::move(p->body);
  native.authorization = authorization;
  auto inner = std::make_shared<Exchange>([ex, p, ok](HttpResponse&& r) {
    if (r.status != 200) {
      // {"error": {"message": ...}} -> {"error": "..."}
      std::string msg = r.body;
      auto obj = io::ParseObject(r.body);
      std::string_view m;
      if (obj.ok() && !(*obj)["error"]["message"].get(m)) msg = std::string(m);
      HttpResponse e = KError(r.status, msg);
      for (auto& h : r.headers) {
        if (h.first == "Retry-After") continue;
        e.headers.push_back(h);
      }
      ex->Respond(std::move(e));
      return;
    }
    ok(*p, r.body);
  });
  ex->OnDisconnect([weak = std::weak_ptr<Exchange>(inner)] {
    if (auto i = weak.lock()) i->NotifyDisconnected();
  });
  model.Handle(std::move(native), std::move(inner));
}

}  // namespace

void WriteKServeTensors(const ServedModel& model, io::JsonWriter* w) {
  const Kind k = KindOf(model);
  const int64_t dim = model.context() ? model.context()->output_dim : 0;
  w->Key("inputs");
  w->BeginArray();
  if (k == Kind::kScore) {
    Tensor(w, "query", "BYTES", {1});
    Tensor(w, "documents", "BYTES", {-1});
    Tensor(w, "query_ids", "INT64", {1, -1});
    Tensor(w, "document_ids", "INT64", {-1, -1});
  } else if (k != Kind::kNone) {
    Tensor(w, "text", "BYTES", {-1});
    Tensor(w, "input_ids", "INT64", {-1, -1});
  }
  w->EndArray();
  w->Key("outputs");
  w->BeginArray();
  if (k == Kind::kScore) {
    Tensor(w, "scores", "FP32", {-1});
    Tensor(w, "indices", "INT64", {-1});
  } else if (k == Kind::kEmbed) {
    Tensor(w, "embedding", "FP32", {-1, dim});
  } else if (k == Kind::kClassify) {
    Tensor(w, "probabilities", "FP32", {-1, dim});
    Tensor(w, "logits", "FP32", {-1, dim});
  }
  w->EndArray();
}

void KServeInfer(ServedModel& model, const std::string& name, int64_t version, HttpRequest&& req,
                 std::shared_ptr<Exchange> ex) {
  auto plan =
      BuildNative(model.context(), model.task(), name + ":" + std::to_string(version), req.body);
  if (!plan.ok()) {
    ex->Respond(KError(plan.status()));
    return;
  }
  auto p = std::make_shared<Plan>(std::move(plan).value());
  RunNative(model, p, req.authorization, ex,
            [ex, name, version](const Plan& done, const std::string& body) {
              auto out = Convert(done, name, version, body);
              if (!out.ok()) {
                ex->Respond(KError(out.status()));
                return;
              }
              HttpResponse ok;
              ok.body = KServeResponseJson(*out);
              ex->Respond(std::move(ok));
            });
}

void KServeInferTyped(ServedModel& model, const std::string& name, int64_t version,
                      const std::string& authorization, std::shared_ptr<KServeCall> call,
                      std::shared_ptr<Exchange> ex) {
  auto plan = BuildNative(model.context(), model.task(), name + ":" + std::to_string(version),
                          call->request);
  if (!plan.ok()) {
    ex->Respond(KError(plan.status()));
    return;
  }
  auto p = std::make_shared<Plan>(std::move(plan).value());
  RunNative(model, p, authorization, ex,
            [ex, call, name, version](const Plan& done, const std::string& body) {
              auto out = Convert(done, name, version, body);
              if (!out.ok()) {
                ex->Respond(KError(out.status()));
                return;
              }
              call->response = std::move(out).value();
              ex->Respond(HttpResponse{});
            });
}

StatusOr<KServeNative> KServeNativeOf(const ModelContext* context, const std::string& task,
                                      const std::string& ref, const std::string& body) {
  ASSIGN_OR_RETURN(Plan p, BuildNative(context, task, ref, body));
  return KServeNative{p.route, p.body};
}

StatusOr<KServeNative> KServeNativeOf(const ModelContext* context, const std::string& task,
                                      const std::string& ref, const KServeRequest& request) {
  ASSIGN_OR_RETURN(Plan p, BuildNative(context, task, ref, request));
  return KServeNative{p.route, p.body};
}

}  // namespace sluice::server
