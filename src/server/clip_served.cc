#include "server/clip_served.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <sstream>

#include "core/log.h"
#include "io/builtins.h"
#include "io/json.h"
#include "io/plugin_io.h"
#include "models/clip.h"
#include "server/clip_embedder.h"
#include "server/errors.h"
#include "server/router.h"
#include "server/worker_pool.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

namespace {

using io::FieldError;
using io::Fields;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Item = ClipItem;

StatusOr<std::vector<int32_t>> ReadIds(simdjson::dom::array arr, const std::string& path) {
  std::vector<int32_t> ids;
  for (auto v : arr) {
    int64_t id;
    if (v.get(id) || id < 0 || id > INT32_MAX) {
      return FieldError(path, "must hold token ids (non-negative integers)");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// vLLM's (OpenAI chat) content parts: {"type": "image_url", "image_url": {"url": s}} or
// {"type": "text", "text": s}.
StatusOr<Item> ReadContentPart(simdjson::dom::object obj, const std::string& path) {
  Fields f(obj, path);
  Item it;
  it.path = path;
  std::string type;
  RETURN_IF_ERROR(f.GetString("type", &type));
  if (type == "text") {
    simdjson::dom::element t;
    if (!f.Get("text", &t)) return FieldError(path + ".text", "is required");
    RETURN_IF_ERROR(f.GetString("text", &it.text));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    return it;
  }
  if (type != "image_url") {
    return FieldError(path + ".type", "must be \"image_url\" or \"text\", not \"" + type + "\"");
  }
  simdjson::dom::element u;
  simdjson::dom::object uo;
  if (!f.Get("image_url", &u)) return FieldError(path + ".image_url", "is required");
  RETURN_IF_ERROR(f.CheckNoUnknown());
  std::string_view sv;
  if (!u.get(sv)) {
    it.text = std::string(sv);
  } else if (!u.get(uo)) {
    Fields uf(uo, path + ".image_url");
    if (!uf.Get("url", &u)) return FieldError(path + ".image_url.url", "is required");
    RETURN_IF_ERROR(uf.GetString("url", &it.text));
    RETURN_IF_ERROR(uf.CheckNoUnknown());
  } else {
    return FieldError(path + ".image_url", "must be {\"url\": ...} or a string");
  }
  if (it.text.empty()) return FieldError(path + ".image_url", "must not be empty");
  it.image = true;
  return it;
}

// A string, {"image": s}, {"text": s}, a content part, or (allow_ids) a list of token ids.
StatusOr<Item> ReadItem(simdjson::dom::element e, const std::string& path, bool allow_ids) {
  Item it;
  it.path = path;
  std::string_view s;
  if (!e.get(s)) {
    it.text = std::string(s);
    return it;
  }
  simdjson::dom::array arr;
  if (allow_ids && !e.get(arr)) {
    ASSIGN_OR_RETURN(it.ids, ReadIds(arr, path));
    it.has_ids = true;
    return it;
  }
  simdjson::dom::object obj;
  if (!e.get(obj)) {
    Fields f(obj, path);
    simdjson::dom::element tmp;
    if (f.Get("type", &tmp)) return ReadContentPart(obj, path);
    std::string image, text;
    RETURN_IF_ERROR(f.GetString("image", &image));
    RETURN_IF_ERROR(f.GetString("text", &text));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    const bool has_image = f.Get("image", &tmp), has_text = f.Get("text", &tmp);
    if (has_image == has_text) {
      return FieldError(path, "must have exactly one of \"image\" or \"text\"");
    }
    if (has_image) {
      if (image.empty()) return FieldError(path + ".image", "must not be empty");
      it.image = true;
      it.text = image;
    } else {
      it.text = text;
    }
    return it;
  }
  return FieldError(path, allow_ids
                              ? "must be a string, token ids, {\"image\": ...} or {\"text\": ...}"
                              : "must be a string, {\"image\": ...} or {\"text\": ...}");
}

// A /score side: one item or a list of items; vLLM's {"content": [parts]} is a list too.
StatusOr<std::vector<Item>> ReadScoreSide(simdjson::dom::element e, const std::string& field) {
  std::vector<Item> items;
  simdjson::dom::object obj;
  simdjson::dom::array arr;
  if (!e.get(obj)) {
    Fields f(obj, field);
    simdjson::dom::element content;
    if (f.Get("content", &content)) {
      RETURN_IF_ERROR(f.CheckNoUnknown());
      if (content.get(arr)) return FieldError(field + ".content", "must be a list of parts");
      size_t i = 0;
      for (auto v : arr) {
        const std::string path = field + ".content[" + std::to_string(i++) + "]";
        simdjson::dom::object part;
        if (v.get(part)) return FieldError(path, "must be a content part object");
        ASSIGN_OR_RETURN(Item it, ReadContentPart(part, path));
        items.push_back(std::move(it));
      }
      if (items.empty()) return FieldError(field + ".content", "must not be empty");
      return items;
    }
  }
  if (!e.get(arr)) {
    bool all_ints = arr.size() > 0;
    for (auto v : arr) all_ints = all_ints && v.is_int64();
    if (!all_ints) {
      size_t i = 0;
      for (auto v : arr) {
        ASSIGN_OR_RETURN(Item it, ReadItem(v, field + "[" + std::to_string(i++) + "]", true));
        items.push_back(std::move(it));
      }
      if (items.empty()) return FieldError(field, "must not be empty");
      return items;
    }
  }
  ASSIGN_OR_RETURN(Item it, ReadItem(e, field, true));
  items.push_back(std::move(it));
  return items;
}

using PluginIo = std::vector<std::shared_ptr<const io::PluginIoProcessor>>;

class ClipServed final : public ServedModel {
 public:
  ClipServed(ClipServeOptions o, std::unique_ptr<ClipEmbedder> embedder, ModelContext context,
             PluginIo plugin_io)
      : plugins_(o.plugins),
        o_(std::move(o)),
        embedder_(std::move(embedder)),
        model_(&embedder_->model()),
        ctx_(std::move(context)),
        plugin_io_(std::move(plugin_io)),
        pool_(std::make_unique<WorkerPool>(o_.workers)) {}
  ~ClipServed() override { Shutdown(); }

  std::string task() const override { return "embed"; }
  bool generation() const override { return false; }
  int64_t max_model_len() const override {
    return model_->has_text() ? model_->text_config().max_position_embeddings : 0;
  }
  bool ServesRoute(const std::string& path) const override {
    return path == "/v1/embeddings" || path == "/v1/rerank" || path == "/rerank" ||
           path == "/score" || path == "/v1/score";
  }
  Status WarmUp() override { return embedder_->WarmUp(); }
  void SetReady() override { ready_ = true; }
  void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) override {
    if (stopped_) {
      ex->Respond(ErrorResponse(503, "the model is shutting down"));
      return;
    }
    auto r = std::make_shared<HttpRequest>(std::move(req));
    pool_->Post([this, r, ex] {
      if (ex->disconnected()) return;
      StatusOr<std::string> body =
          r->path.rfind("/plugins/", 0) == 0 || r->path == "/pooling" ? Plugin(r->path, r->body)
          : r->path == "/v1/embeddings"                               ? Embeddings(r->body)
          : r->path == "/score" || r->path == "/v1/score"             ? Score(r->body)
          : ServesRoute(r->path)
              ? Rerank(r->body)
              : StatusOr<std::string>(NotFound("no route POST " + r->path + " for a CLIP model"));
      if (!body.ok()) {
        ex->Respond(StatusResponse(body.status()));
        return;
      }
      HttpResponse resp;
      resp.body = std::move(body).value();
      ex->Respond(std::move(resp));
    });
  }
  std::string RenderMetrics() const override {
    return embedder_->RenderMetrics(ModelLabels(o_.name, o_.version));
  }
  void Shutdown() override {
    if (stopped_.exchange(true)) return;
    pool_.reset();  // runs what was posted, then joins
  }
  bool HasIoProcessor(const std::string& name) const override {
    return FindPluginIo(name) != nullptr;
  }
  std::string PluginIoProcessorNames() const override {
    std::string s;
    for (const auto& p : plugin_io_) s += (s.empty() ? "" : ", ") + std::string(p->name());
    return s.empty() ? "none" : s;
  }

 private:
  const io::PluginIoProcessor* FindPluginIo(const std::string& name) const {
    for (const auto& p : plugin_io_) {
      if (p->name() == name) return p.get();
    }
    return nullptr;
  }

  // POST /plugins/NAME or /pooling with "io_processor": the plugin's parse adds the inputs,
  // they are embedded in one call (in order), respond gets the normalised embeddings (raw:
  // the projections). The request's state (the plugin's allocations) goes when this returns.
  StatusOr<std::string> Plugin(const std::string& route, const std::string& body) {
    const io::PluginIoProcessor* proc = nullptr;
    if (route.rfind("/plugins/", 0) == 0) {
      const std::string name = route.substr(9);
      proc = FindPluginIo(name);
      if (!proc) {
        return NotFound("no IO processor \"" + name + "\" is registered for model \"" + o_.name +
                        "\" (IO processors: " + PluginIoProcessorNames() +
                        "; a model loads plugins from its model.json or sluice.json \"plugins\", "
                        "or --plugin)");
      }
    } else {
      bool malformed = false;
      const std::optional<std::string> name = PeekStringField(body, "io_processor", &malformed);
      if (!name) {
        return FieldError("io_processor",
                          "is required: a CLIP model serves /pooling through the IO processors "
                          "of its plugins (IO processors: " +
                              PluginIoProcessorNames() + ")");
      }
      proc = FindPluginIo(*name);
      if (!proc) {
        return FieldError("io_processor",
                          "no IO processor \"" + *name + "\" is registered for model \"" + o_.name +
                              "\" (IO processors: " + PluginIoProcessorNames() + ")");
      }
    }
    // /pooling: the processor parses the envelope's "data" (io/registry.h).
    const bool pooling = route == "/pooling";
    std::string data;
    if (pooling) {
      ASSIGN_OR_RETURN(data, io::PoolingIoData(ctx_, body));
    }
    const IoRequest req{route, pooling ? std::string_view(data) : std::string_view(body), &ctx_};
    ASSIGN_OR_RETURN(std::unique_ptr<IoState> state, proc->Parse(req));
    std::vector<io::PluginClipInput> inputs = io::PluginIoProcessor::TakeClipInputs(*state);
    std::vector<Item> items(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      Item& it = items[i];
      it.image = inputs[i].image;
      it.path = std::move(inputs[i].path);
      if (it.image) {
        it.text = std::move(inputs[i].source);
      } else {
        it.ids = std::move(inputs[i].ids);
        it.has_ids = true;
      }
    }
    std::vector<float> emb;
    int64_t tokens = 0;
    if (!items.empty()) {
      Status st = Embed(items, &emb, &tokens);
      if (!st.ok()) return Status(st.code(), std::string(proc->name()) + ": " + st.message());
    }
    const int P = model_->projection_dim();
    std::vector<PooledOutput> outs(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      outs[i].raw.assign(emb.begin() + static_cast<long>(i * P),
                         emb.begin() + static_cast<long>((i + 1) * P));
      outs[i].values = outs[i].raw;
      Normalize(outs[i].values.data(), P);
    }
    ASSIGN_OR_RETURN(IoResponse resp, proc->PostProcess(ctx_, *state, outs));
    if (pooling) return io::PoolingIoResponse(ctx_, proc->name(), resp.body, state->prompt_tokens);
    return std::move(resp.body);
  }

  Status Embed(const std::vector<Item>& items, std::vector<float>* out, int64_t* tokens) {
    return embedder_->Embed(items, out, tokens);
  }
  static void Normalize(float* v, int n) { ClipEmbedder::Normalize(v, n); }

  Status CheckModelField(Fields& f) {
    std::string model;
    RETURN_IF_ERROR(f.GetString("model", &model));
    return Status::Ok();  // the router resolved it (name or name:version)
  }

  Status CheckCount(size_t n, const std::string& field, const char* what) {
    if (static_cast<int>(n) > o_.max_inputs_per_request) {
      return FieldError(field, "has " + std::to_string(n) + " " + what + "; at most " +
                                   std::to_string(o_.max_inputs_per_request) +
                                   " (--max-inputs-per-request)");
    }
    return Status::Ok();
  }

  StatusOr<std::string> Embeddings(const std::string& body) {
    ASSIGN_OR_RETURN(simdjson::dom::object root, io::ParseObject(body));
    Fields f(root, "");
    RETURN_IF_ERROR(CheckModelField(f));
    std::string fmt = "float", user;
    bool normalize = true;
    RETURN_IF_ERROR(f.GetString("encoding_format", &fmt));
    if (fmt != "float" && fmt != "base64") {
      return FieldError("encoding_format", "must be \"float\" or \"base64\"");
    }
    RETURN_IF_ERROR(f.GetBool("normalize", &normalize));
    RETURN_IF_ERROR(f.GetString("user", &user));
    if (user.size() > 256) return FieldError("user", "is longer than 256 bytes");
    simdjson::dom::element in;
    if (!f.Get("input", &in)) return FieldError("input", "is required");
    RETURN_IF_ERROR(f.CheckNoUnknown());
    std::vector<Item> items;
    simdjson::dom::array arr;
    if (!in.get(arr)) {
      bool all_ints = arr.size() > 0;
      for (auto v : arr) all_ints = all_ints && v.is_int64();
      if (all_ints) {
        ASSIGN_OR_RETURN(Item it, ReadItem(in, "input", true));
        items.push_back(std::move(it));
      } else {
        size_t i = 0;
        for (auto v : arr) {
          ASSIGN_OR_RETURN(Item it, ReadItem(v, "input[" + std::to_string(i++) + "]", true));
          items.push_back(std::move(it));
        }
      }
    } else {
      ASSIGN_OR_RETURN(Item it, ReadItem(in, "input", false));
      items.push_back(std::move(it));
    }
    if (items.empty()) return FieldError("input", "must not be empty");
    RETURN_IF_ERROR(CheckCount(items.size(), "input", "inputs"));
    for (const Item& it : items) {
      if (!it.image && !it.has_ids && it.text.empty()) {
        return FieldError(it.path, "must not be empty");
      }
    }
    std::vector<float> emb;
    int64_t tokens = 0;
    RETURN_IF_ERROR(Embed(items, &emb, &tokens));
    const int P = model_->projection_dim();
    io::JsonWriter w;
    w.BeginObject();
    w.KeyString("object", "list");
    w.Key("data");
    w.BeginArray();
    for (size_t i = 0; i < items.size(); ++i) {
      float* v = emb.data() + i * P;
      if (normalize) Normalize(v, P);
      w.BeginObject();
      w.KeyString("object", "embedding");
      w.KeyInt("index", static_cast<int64_t>(i));
      w.Key("embedding");
      if (fmt == "base64") {
        w.String(io::Base64(v, P * sizeof(float)));
      } else {
        w.Floats(v, P);
      }
      w.EndObject();
    }
    w.EndArray();
    w.KeyString("model", o_.name);
    w.Key("usage");
    w.BeginObject();
    w.KeyInt("prompt_tokens", tokens);
    w.KeyInt("total_tokens", tokens);
    w.EndObject();
    w.EndObject();
    return w.Take();
  }

  // Cosine similarity of rows a and b of normalised embeddings.
  double Cosine(const std::vector<float>& emb, size_t a, size_t b) const {
    const int P = model_->projection_dim();
    double dot = 0;
    for (int j = 0; j < P; ++j) dot += double(emb[a * P + j]) * emb[b * P + j];
    return dot;
  }

  StatusOr<std::string> Rerank(const std::string& body) {
    ASSIGN_OR_RETURN(simdjson::dom::object root, io::ParseObject(body));
    Fields f(root, "");
    RETURN_IF_ERROR(CheckModelField(f));
    int64_t top_n = 0;
    bool return_documents = true;
    RETURN_IF_ERROR(f.GetInt("top_n", &top_n));
    simdjson::dom::element tmp;
    if (f.Get("top_n", &tmp) && top_n < 1) {
      return FieldError("top_n", "must be at least 1 (leave it out for every document)");
    }
    RETURN_IF_ERROR(f.GetBool("return_documents", &return_documents));
    simdjson::dom::element q, d;
    if (!f.Get("query", &q)) return FieldError("query", "is required");
    if (!f.Get("documents", &d)) return FieldError("documents", "is required");
    RETURN_IF_ERROR(f.CheckNoUnknown());
    std::vector<Item> items;
    ASSIGN_OR_RETURN(Item query, ReadItem(q, "query", true));
    if (!query.has_ids && query.text.empty()) return FieldError("query", "must not be empty");
    items.push_back(std::move(query));
    simdjson::dom::array docs;
    if (d.get(docs)) return FieldError("documents", "must be a list");
    if (docs.size() == 0) return FieldError("documents", "must not be empty");
    RETURN_IF_ERROR(CheckCount(docs.size(), "documents", "documents"));
    size_t i = 0;
    for (auto v : docs) {
      ASSIGN_OR_RETURN(Item it, ReadItem(v, "documents[" + std::to_string(i++) + "]", false));
      if (!it.image && it.text.empty()) return FieldError(it.path, "must not be empty");
      items.push_back(std::move(it));
    }
    std::vector<float> emb;
    int64_t tokens = 0;
    RETURN_IF_ERROR(Embed(items, &emb, &tokens));
    const int P = model_->projection_dim();
    for (size_t k = 0; k < items.size(); ++k) Normalize(emb.data() + k * P, P);
    const size_t n = items.size() - 1;
    std::vector<float> scores(n);
    for (size_t k = 0; k < n; ++k) scores[k] = static_cast<float>(Cosine(emb, 0, k + 1));
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    const size_t shown = top_n > 0 ? std::min<size_t>(n, static_cast<size_t>(top_n)) : n;
    io::JsonWriter w;
    w.BeginObject();
    w.KeyString("object", "rerank");
    w.KeyString("model", o_.name);
    w.Key("results");
    w.BeginArray();
    for (size_t k = 0; k < shown; ++k) {
      const Item& doc = items[order[k] + 1];
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(order[k]));
      w.KeyFloat("relevance_score", scores[order[k]]);
      if (return_documents) {
        w.Key("document");
        w.BeginObject();
        w.KeyString(doc.image ? "image" : "text", doc.text);
        w.EndObject();
      }
      w.EndObject();
    }
    w.EndArray();
    w.Key("usage");
    w.BeginObject();
    w.KeyInt("total_tokens", tokens);
    w.EndObject();
    w.EndObject();
    return w.Take();
  }

  // vLLM /score: text_1 (or queries) and text_2 (or documents), 1:1, 1:N or N:N; each side an
  // item or a list of items (texts, token ids, {"image"}, {"text"}, content parts, or vLLM's
  // {"content": [parts]}). score = cosine similarity of the two embeddings.
  StatusOr<std::string> Score(const std::string& body) {
    ASSIGN_OR_RETURN(simdjson::dom::object root, io::ParseObject(body));
    Fields f(root, "");
    RETURN_IF_ERROR(CheckModelField(f));
    std::string user;
    RETURN_IF_ERROR(f.GetString("user", &user));
    simdjson::dom::element e1, e2;
    const std::string f1 = f.Get("text_1", &e1) ? "text_1" : "queries";
    if (f1 == "queries" && !f.Get("queries", &e1)) {
      return FieldError("text_1", "is required (or \"queries\")");
    }
    const std::string f2 = f.Get("text_2", &e2) ? "text_2" : "documents";
    if (f2 == "documents" && !f.Get("documents", &e2)) {
      return FieldError("text_2", "is required (or \"documents\")");
    }
    RETURN_IF_ERROR(f.CheckNoUnknown());
    ASSIGN_OR_RETURN(std::vector<Item> a, ReadScoreSide(e1, f1));
    ASSIGN_OR_RETURN(std::vector<Item> b, ReadScoreSide(e2, f2));
    if (a.size() != 1 && a.size() != b.size()) {
      return FieldError(f1, "has " + std::to_string(a.size()) +
                                " items; it must have 1 or as many as \"" + f2 + "\" (" +
                                std::to_string(b.size()) + ")");
    }
    RETURN_IF_ERROR(CheckCount(b.size(), f2, "items"));
    std::vector<Item> items = std::move(a);
    const size_t na = items.size();
    for (Item& it : b) items.push_back(std::move(it));
    for (const Item& it : items) {
      if (!it.image && !it.has_ids && it.text.empty()) {
        return FieldError(it.path, "must not be empty");
      }
    }
    std::vector<float> emb;
    int64_t tokens = 0;
    RETURN_IF_ERROR(Embed(items, &emb, &tokens));
    const int P = model_->projection_dim();
    for (size_t k = 0; k < items.size(); ++k) Normalize(emb.data() + k * P, P);
    io::JsonWriter w;
    io::BeginResponse(w, io::Envelope::kList, "score", o_.name);
    for (size_t k = na; k < items.size(); ++k) {
      const size_t i = k - na;
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(i));
      w.KeyString("object", "score");
      w.KeyFloat("score", static_cast<float>(Cosine(emb, na == 1 ? 0 : i, k)));
      w.EndObject();
    }
    io::EndResponse(w, io::Envelope::kList, tokens);
    return w.Take();
  }

  std::shared_ptr<const PluginSet> plugins_;  // destroyed last: after the workers joined
  const ClipServeOptions o_;
  std::unique_ptr<ClipEmbedder> embedder_;
  const ClipModel* model_;
  const ModelContext ctx_;  // the model as plugins see it (task "clip")
  const PluginIo plugin_io_;
  std::atomic<bool> ready_{false}, stopped_{false};
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace

bool IsClipModelDirectory(const std::string& dir) {
  const std::string json = ReadFile(dir + "/config.json");
  if (json.empty()) return false;
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (parser.parse(json).get(root)) return false;
  simdjson::dom::array archs;
  std::string_view a;
  if (root.at_key("architectures").get(archs) || archs.size() == 0 || archs.at(0).get(a)) {
    return false;
  }
  return ClipModel::IsClipArchitecture(std::string(a));
}

StatusOr<std::unique_ptr<ServedModel>> LoadClipServedModel(const ClipServeOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<ClipEmbedder> embedder, ClipEmbedder::Load(o.embedder));
  const ClipModel& model = embedder->model();
  const media::FetchOptions& fo = o.embedder.fetch;
  SLUICE_LOG_INFO(
      "model \"{}\" version {}: CLIP ({}{}), projection {}, tokenizer {}; {} request workers; "
      "image fetch concurrency {}, timeouts {} ms connect / {} ms total, max image bytes {}, "
      "private addresses {}, local files {}; {}; feature cache {} MiB",
      o.name, o.version, model.has_vision() ? "vision" : "",
      model.has_text() ? (model.has_vision() ? " + text" : "text") : "", model.projection_dim(),
      embedder->has_tokenizer() ? "tokenizer.json" : "none: token ids only", o.workers,
      fo.concurrency, fo.connect_timeout_ms, fo.total_timeout_ms, fo.max_bytes,
      fo.allow_private ? "allowed" : "refused", fo.local_root.empty() ? "refused" : fo.local_root,
      embedder->Describe(), o.embedder.cache_bytes >> 20);
  // The model as plugin IO processors see it (SLUICE_TASK_CLIP).
  ModelContext ctx;
  ctx.name = o.name;
  ctx.version = o.version;
  ctx.task = "clip";
  ctx.family = "clip";
  ctx.output_dim = model.projection_dim();
  ctx.model_max_tokens = model.has_text() ? model.text_config().max_position_embeddings : 0;
  ctx.max_inputs_per_request = o.max_inputs_per_request;
  ctx.max_tokens_per_input = embedder->max_text_tokens();
  ctx.tokenizer = embedder->tokenizer();
  ctx.model_dir = o.embedder.dir;
  ctx.clip = true;
  ctx.clip_vision = model.has_vision();
  ctx.clip_text = model.has_text();
  PluginIo plugin_io;
  if (o.plugins) {
    ASSIGN_OR_RETURN(plugin_io, io::BindPluginIoProcessors(*o.plugins, ctx));
    SLUICE_LOG_INFO("model \"{}\" version {}: IO processors of plugins: {}", o.name, o.version,
                    o.plugins->IoNames());
  }
  return std::unique_ptr<ServedModel>(
      std::make_unique<ClipServed>(o, std::move(embedder), std::move(ctx), std::move(plugin_io)));
}

}  // namespace sluice::server
