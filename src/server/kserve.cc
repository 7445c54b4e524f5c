#include "server/kserve.h"

#include <algorithm>
#include <numeric>

#include "server/errors.h"

namespace sluice::server {
namespace {

enum class Kind { kEmbed, kClassify, kScore, kNone };

Kind KindOf(const ServedModel& m) {
  const ModelContext* c = m.context();
  if (!c || c->token_level || c->late_interaction) {
    return c && c->late_interaction ? Kind::kScore : Kind::kNone;
  }
  if (c->task == "embed") return Kind::kEmbed;
  if (c->task == "classify") return Kind::kClassify;
  if (c->task == "score") return Kind::kScore;
  return Kind::kNone;
}

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
  int64_t n = 1;
  for (int64_t v : in.shape) n *= v;
  if (in.shape.empty() || n != static_cast<int64_t>(in.data.size())) {
    return io::FieldError(path + ".data", "holds " + std::to_string(in.data.size()) +
                                              " elements; its shape wants " + std::to_string(n));
  }
  return in;
}

// BYTES [N] (or [N, 1]) -> N strings.
Status WriteTexts(const Input& in, const std::string& path, io::JsonWriter* w) {
  if (in.datatype != "BYTES") return io::FieldError(path + ".datatype", "must be BYTES");
  if (in.shape.size() > 2 || (in.shape.size() == 2 && in.shape[1] != 1)) {
    return io::FieldError(path + ".shape", "must be [N] (one text per element)");
  }
  w->BeginArray();
  for (size_t i = 0; i < in.data.size(); ++i) {
    std::string_view s;
    if (in.data[i].get(s)) {
      return io::FieldError(path + ".data[" + std::to_string(i) + "]", "must be a string");
    }
    w->String(s);
  }
  w->EndArray();
  return Status::Ok();
}

// INT64 [N, L] (or [L] for one row when `one_row`) -> N lists of ids.
Status WriteIds(const Input& in, const std::string& path, bool one_row, io::JsonWriter* w) {
  if (in.datatype != "INT64" && in.datatype != "INT32") {
    return io::FieldError(path + ".datatype", "must be INT64 (token ids)");
  }
  if (in.shape.size() != 2 && !(one_row && in.shape.size() == 1)) {
    return io::FieldError(path + ".shape", one_row ? "must be [1, L] or [L]" : "must be [N, L]");
  }
  const int64_t rows = in.shape.size() == 2 ? in.shape[0] : 1;
  const int64_t len = in.shape.back();
  if (one_row && rows != 1) return io::FieldError(path + ".shape", "must hold one row");
  if (!one_row) w->BeginArray();
  for (int64_t r = 0; r < rows; ++r) {
    w->BeginArray();
    for (int64_t k = 0; k < len; ++k) {
      int64_t id = 0;
      const size_t i = static_cast<size_t>(r * len + k);
      if (in.data[i].get(id)) {
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

StatusOr<Plan> BuildNative(const ServedModel& model, const std::string& ref,
                           const std::string& body) {
  Plan p;
  p.kind = KindOf(model);
  if (p.kind == Kind::kNone) {
    return FailedPrecondition(
        "KServe infer serves embedding, classification and scoring models; "
        "this model's task is " +
        model.task() + " (use its own routes)");
  }
  ASSIGN_OR_RETURN(simdjson::dom::object obj, io::ParseObject(body));
  io::Fields f(obj, "");
  RETURN_IF_ERROR(f.GetString("id", &p.id));
  simdjson::dom::element e;
  bool truncate = false;
  int64_t top_n = 0;
  if (f.Get("parameters", &e)) {
    simdjson::dom::object po;
    if (e.get(po)) return io::FieldError("parameters", "must be an object");
    io::Fields pf(po, "parameters");
    RETURN_IF_ERROR(pf.GetBool("truncate", &truncate));
    if (p.kind == Kind::kScore) {
      RETURN_IF_ERROR(pf.GetInt("top_n", &top_n));
      if (pf.Get("top_n", &e) && top_n < 1) {
        return io::FieldError("parameters.top_n", "must be at least 1");
      }
    }
    RETURN_IF_ERROR(pf.CheckNoUnknown());
  }
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
  auto find = [&](const char* name) -> const Input* {
    for (const Input& in : inputs) {
      if (in.name == name) return &in;
    }
    return nullptr;
  };
  auto path_of = [&](const Input* in) {
    return "inputs[" + std::to_string(in - inputs.data()) + "]";
  };
  std::vector<const char*> allowed;
  if (p.kind == Kind::kScore) {
    allowed = {"query", "documents", "query_ids", "document_ids"};
  } else {
    allowed = {"text", "input_ids"};
  }
  for (const Input& in : inputs) {
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return in.name == a; })) {
      std::string names;
      for (const char* a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return io::FieldError(path_of(&in) + ".name",
                            "\"" + in.name + "\" is not an input of this model (" + names + ")");
    }
    int same = 0;
    for (const Input& o : inputs) same += o.name == in.name;
    if (same > 1) return io::FieldError("inputs", "\"" + in.name + "\" is given twice");
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
    const Input* q = find("query");
    const Input* qi = find("query_ids");
    const Input* d = find("documents");
    const Input* di = find("document_ids");
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
      if (q->data.size() != 1) return io::FieldError(path_of(q) + ".shape", "must be [1]");
      if (q->data[0].get(text)) return io::FieldError(path_of(q) + ".data[0]", "must be a string");
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
    const Input* t = find("text");
    const Input* ids = find("input_ids");
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
  return p;
}

bool Wanted(const Plan& p, const char* name) {
  return p.outputs.empty() ||
         std::find(p.outputs.begin(), p.outputs.end(), name) != p.outputs.end();
}

void WriteOutput(io::JsonWriter* w, const char* name, const char* type, std::vector<int64_t> shape,
                 const std::string& data) {
  w->BeginObject();
  w->KeyString("name", name);
  w->KeyString("datatype", type);
  w->Key("shape");
  w->BeginArray();
  for (int64_t d : shape) w->Int(d);
  w->EndArray();
  w->Key("data");
  w->Raw(data);
  w->EndObject();
}

// The native JSON response -> the KServe response.
StatusOr<std::string> Convert(const Plan& p, const std::string& name, int64_t version,
                              const std::string& native) {
  ASSIGN_OR_RETURN(simdjson::dom::object obj, io::ParseObject(native));
  io::JsonWriter w;
  w.BeginObject();
  w.KeyString("model_name", name);
  w.KeyString("model_version", std::to_string(version));
  if (!p.id.empty()) w.KeyString("id", p.id);
  w.Key("outputs");
  w.BeginArray();
  auto floats = [](simdjson::dom::element arr, io::JsonWriter* out, int64_t* n) {
    simdjson::dom::array a;
    if (arr.get(a)) return false;
    for (auto x : a) {
      double v = 0;
      if (x.get(v)) return false;
      out->Float(static_cast<float>(v));
      ++*n;
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
    io::JsonWriter sd, id;
    sd.BeginArray();
    id.BeginArray();
    for (size_t i : order) {
      sd.Float(score[i]);
      id.Int(idx[i]);
    }
    sd.EndArray();
    id.EndArray();
    const int64_t rows = static_cast<int64_t>(n);
    if (Wanted(p, "scores")) WriteOutput(&w, "scores", "FP32", {rows}, sd.Take());
    if (Wanted(p, "indices")) WriteOutput(&w, "indices", "INT64", {rows}, id.Take());
  } else {
    simdjson::dom::array data;
    if (obj["data"].get(data)) return bad;
    const int64_t rows = static_cast<int64_t>(data.size());
    const char* fields[2] = {p.kind == Kind::kEmbed ? "embedding" : "probs", "logits"};
    const char* names[2] = {p.kind == Kind::kEmbed ? "embedding" : "probabilities", "logits"};
    for (int f = 0; f < (p.kind == Kind::kEmbed ? 1 : 2); ++f) {
      if (!Wanted(p, names[f])) continue;
      io::JsonWriter d;
      d.BeginArray();
      int64_t total = 0;
      for (auto row : data) {
        simdjson::dom::element v;
        if (row[fields[f]].get(v) || !floats(v, &d, &total)) return bad;
      }
      d.EndArray();
      WriteOutput(&w, names[f], "FP32", {rows, rows > 0 ? total / rows : 0}, d.Take());
    }
  }
  w.EndArray();
  w.EndObject();
  return w.Take();
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
  auto plan = BuildNative(model, name + ":" + std::to_string(version), req.body);
  if (!plan.ok()) {
    ex->Respond(KError(plan.status()));
    return;
  }
  auto p = std::make_shared<Plan>(std::move(plan).value());
  HttpRequest native;
  native.method = "POST";
  native.path = p->route;
  native.metrics_route = ex->metrics_route.empty() ? "/v2/models/{name}/infer" : ex->metrics_route;
  native.body = std::move(p->body);
  native.authorization = req.authorization;
  auto inner = std::make_shared<Exchange>([ex, p, name, version](HttpResponse&& r) {
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
    auto out = Convert(*p, name, version, r.body);
    if (!out.ok()) {
      ex->Respond(KError(out.status()));
      return;
    }
    HttpResponse ok;
    ok.body = std::move(out).value();
    ex->Respond(std::move(ok));
  });
  ex->OnDisconnect([weak = std::weak_ptr<Exchange>(inner)] {
    if (auto i = weak.lock()) i->NotifyDisconnected();
  });
  model.Handle(std::move(native), std::move(inner));
}

}  // namespace sluice::server
