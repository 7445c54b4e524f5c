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
#include "io/json.h"
#include "media/feature_cache.h"
#include "media/image.h"
#include "media/preprocess.h"
#include "models/clip.h"
#include "server/errors.h"
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

// One input of a request: a text (string or token ids) or an image source.
struct Item {
  bool image = false;
  std::string text;          // text, or the image source (URL, data URI, path)
  std::vector<int32_t> ids;  // token ids (text given as ids)
  bool has_ids = false;
  std::string path;  // the field, for errors ("input[2]")
};

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

// A string, {"image": s}, {"text": s}, or (allow_ids) a list of token ids.
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
    std::string image, text;
    RETURN_IF_ERROR(f.GetString("image", &image));
    RETURN_IF_ERROR(f.GetString("text", &text));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    simdjson::dom::element tmp;
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

std::string Shorten(const std::string& s) { return s.size() <= 80 ? s : s.substr(0, 77) + "..."; }

class ClipServed final : public ServedModel {
 public:
  ClipServed(ClipServeOptions o, std::unique_ptr<Backend> backend, std::unique_ptr<ClipModel> model,
             std::unique_ptr<Tokenizer> tokenizer, media::ImageProcessorConfig processor)
      : o_(std::move(o)),
        backend_(std::move(backend)),
        model_(std::move(model)),
        tokenizer_(std::move(tokenizer)),
        processor_(processor),
        fetcher_(o_.fetch),
        cache_(o_.cache_bytes),
        pool_(std::make_unique<WorkerPool>(o_.workers)) {
    decode_.max_pixels = o_.max_image_pixels;
    if (o_.fast_decode) media::SetFastDecodeBounds(processor_, &decode_);
  }
  ~ClipServed() override { Shutdown(); }

  std::string task() const override { return "embed"; }
  bool generation() const override { return false; }
  int64_t max_model_len() const override {
    return model_->has_text() ? model_->text_config().max_position_embeddings : 0;
  }
  bool ServesRoute(const std::string& path) const override {
    return path == "/v1/embeddings" || path == "/v1/rerank" || path == "/rerank";
  }
  Status WarmUp() override {
    std::lock_guard<std::mutex> lock(model_mu_);
    if (model_->has_vision()) {
      std::vector<float> px(model_->pixels_per_image(), 0.f);
      ASSIGN_OR_RETURN(auto e, model_->EmbedImages(px.data(), 1));
      (void)e;
    }
    if (model_->has_text()) {
      ASSIGN_OR_RETURN(auto e, model_->EmbedTexts({{model_->text_config().eos_token_id}}));
      (void)e;
    }
    return Status::Ok();
  }
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
          r->path == "/v1/embeddings" ? Embeddings(r->body)
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
    const std::string l = ModelLabels(o_.name, o_.version);
    std::string s;
    auto counter = [&](const char* name, const char* help, uint64_t v) {
      s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
           "{" + l + "} " + std::to_string(v) + "\n";
    };
    counter("sluice_image_cache_hits_total", "Image features served from the feature cache.",
            cache_.hits());
    counter("sluice_image_cache_misses_total", "Image features computed (not in the cache).",
            cache_.misses());
    counter("sluice_images_fetched_total", "Images fetched or decoded from data URIs and files.",
            fetched_.load());
    counter("sluice_image_fetch_failures_total", "Image sources that could not be fetched.",
            fetch_failures_.load());
    counter("sluice_images_embedded_total", "Images run through the vision tower.",
            embedded_.load());
    s += "# HELP sluice_image_cache_entries Image features held by the cache.\n"
         "# TYPE sluice_image_cache_entries gauge\nsluice_image_cache_entries{" +
         l + "} " + std::to_string(cache_.size()) + "\n";
    s += "# HELP sluice_image_cache_bytes Bytes accounted to the image feature cache.\n"
         "# TYPE sluice_image_cache_bytes gauge\nsluice_image_cache_bytes{" +
         l + "} " + std::to_string(cache_.bytes()) + "\n";
    return s;
  }
  void Shutdown() override {
    if (stopped_.exchange(true)) return;
    pool_.reset();  // runs what was posted, then joins
  }

 private:
  // Embeddings of the items, in order ([n, projection_dim]); image duplicates computed
  // once, image features through the cache. *tokens: text tokens used.
  Status Embed(const std::vector<Item>& items, std::vector<float>* out, int64_t* tokens) {
    const int P = model_->projection_dim();
    out->assign(items.size() * P, 0.f);
    std::vector<size_t> text_rows, image_rows;
    std::vector<std::vector<int32_t>> texts;
    std::vector<std::string> sources;
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      if (it.image) {
        if (!model_->has_vision()) {
          return FieldError(it.path, "is an image; this model has no vision tower");
        }
        image_rows.push_back(i);
        sources.push_back(it.text);
        continue;
      }
      if (!model_->has_text())
        return FieldError(it.path, "is a text; this model has no text tower");
      std::vector<int32_t> ids = it.ids;
      if (!it.has_ids) {
        if (!tokenizer_) {
          return FieldError(it.path,
                            "is a text, but this model has no tokenizer.json: give token ids");
        }
        auto enc = tokenizer_->Encode(it.text, true);
        if (!enc.ok()) return FieldError(it.path, enc.status().message());
        ids = std::move(enc->ids);
      }
      const int limit = o_.max_tokens_per_input > 0 ? o_.max_tokens_per_input
                                                    : model_->text_config().max_position_embeddings;
      if (ids.empty()) return FieldError(it.path, "has no tokens");
      if (static_cast<int>(ids.size()) > limit) {
        return FieldError(it.path, "has " + std::to_string(ids.size()) + " tokens; at most " +
                                       std::to_string(limit));
      }
      *tokens += static_cast<int64_t>(ids.size());
      text_rows.push_back(i);
      texts.push_back(std::move(ids));
    }
    if (!sources.empty()) {
      std::vector<StatusOr<std::string>> bytes = fetcher_.FetchAll(sources);
      // Content hashes; the misses, each distinct digest once.
      std::vector<media::Digest> digests(sources.size());
      std::vector<int> slot(sources.size(), -1);  // index into `todo`, or -1 (cached)
      std::vector<size_t> todo;                   // source index of each distinct miss
      std::vector<std::vector<float>> cached(sources.size());
      for (size_t j = 0; j < sources.size(); ++j) {
        const Item& it = items[image_rows[j]];
        if (!bytes[j].ok()) {
          fetch_failures_++;
          return FieldError(it.path + ".image", bytes[j].status().message());
        }
        fetched_++;
        digests[j] = media::Sha256(*bytes[j]);
        for (size_t t = 0; t < todo.size(); ++t) {
          if (digests[todo[t]] == digests[j]) slot[j] = static_cast<int>(t);
        }
        if (slot[j] >= 0) continue;  // a duplicate of an earlier miss in this request
        if (cache_.Get(digests[j], &cached[j])) continue;
        slot[j] = static_cast<int>(todo.size());
        todo.push_back(j);
      }
      std::vector<float> pixels;
      const int64_t per = model_->pixels_per_image();
      pixels.reserve(todo.size() * per);
      for (size_t j : todo) {
        const Item& it = items[image_rows[j]];
        auto img = media::DecodeImage(*bytes[j], decode_);
        if (!img.ok()) {
          return FieldError(it.path + ".image",
                            Shorten(sources[j]) + ": " + img.status().message());
        }
        std::vector<float> px;
        media::Preprocess(*img, processor_, &px);
        if (static_cast<int64_t>(px.size()) != per) {
          return Internal("the image processor's output size (" + std::to_string(px.size()) +
                          " values) does not match the vision tower's input (" +
                          std::to_string(per) + ")");
        }
        pixels.insert(pixels.end(), px.begin(), px.end());
      }
      std::vector<float> emb;
      if (!todo.empty()) {
        std::lock_guard<std::mutex> lock(model_mu_);
        ASSIGN_OR_RETURN(emb,
                         model_->EmbedImages(pixels.data(), static_cast<int64_t>(todo.size())));
        embedded_ += todo.size();
      }
      for (size_t t = 0; t < todo.size(); ++t) {
        cache_.Put(digests[todo[t]],
                   std::vector<float>(emb.begin() + t * P, emb.begin() + (t + 1) * P));
      }
      for (size_t j = 0; j < sources.size(); ++j) {
        const float* src = slot[j] >= 0 ? emb.data() + slot[j] * P : cached[j].data();
        std::copy_n(src, P, out->data() + image_rows[j] * P);
      }
    }
    if (!texts.empty()) {
      std::vector<float> emb;
      {
        std::lock_guard<std::mutex> lock(model_mu_);
        ASSIGN_OR_RETURN(emb, model_->EmbedTexts(texts));
      }
      for (size_t t = 0; t < text_rows.size(); ++t) {
        std::copy_n(emb.data() + t * P, P, out->data() + text_rows[t] * P);
      }
    }
    return Status::Ok();
  }

  static void Normalize(float* v, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += double(v[i]) * v[i];
    const double norm = std::sqrt(s);
    if (norm > 0) {
      for (int i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] / norm);
    }
  }

  Status CheckModelField(Fields& f) {
    std::string model;
    RETURN_IF_ERROR(f.GetString("model", &model));
    return Status::Ok();  // the router resolved it (name or name:version)
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
    if (static_cast<int>(items.size()) > o_.max_inputs_per_request) {
      return FieldError("input", "has " + std::to_string(items.size()) + " inputs; at most " +
                                     std::to_string(o_.max_inputs_per_request) +
                                     " (--max-inputs-per-request)");
    }
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
    if (static_cast<int>(docs.size()) > o_.max_inputs_per_request) {
      return FieldError("documents", "has " + std::to_string(docs.size()) + " documents; at most " +
                                         std::to_string(o_.max_inputs_per_request) +
                                         " (--max-inputs-per-request)");
    }
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
    for (size_t k = 0; k < n; ++k) {
      double dot = 0;
      for (int j = 0; j < P; ++j) dot += double(emb[j]) * emb[(k + 1) * P + j];
      scores[k] = static_cast<float>(dot);
    }
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

  const ClipServeOptions o_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ClipModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const media::ImageProcessorConfig processor_;
  media::MediaFetcher fetcher_;
  media::FeatureCache cache_;
  media::DecodeOptions decode_;
  std::mutex model_mu_;  // the model runs one batch at a time
  std::atomic<bool> ready_{false}, stopped_{false};
  std::atomic<uint64_t> fetched_{0}, fetch_failures_{0}, embedded_{0};
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
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(o.backend));
  ASSIGN_OR_RETURN(std::unique_ptr<ClipModel> model,
                   ClipModel::Load(o.dir, backend.get(), o.dtype));
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::exists(o.dir + "/tokenizer.json")) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::FromDirectory(o.dir));
  }
  media::ImageProcessorConfig processor;
  if (model->has_vision()) {
    const std::string pp = o.dir + "/preprocessor_config.json";
    if (!std::filesystem::exists(pp)) {
      return InvalidArgument(o.dir + ": a CLIP vision tower needs preprocessor_config.json");
    }
    ASSIGN_OR_RETURN(processor, media::ParseImageProcessorConfig(ReadFile(pp)));
    if (processor.out_height() != model->vision_config().image_size ||
        processor.out_width() != model->vision_config().image_size) {
      return InvalidArgument(pp + ": the processor makes " + std::to_string(processor.out_width()) +
                             "x" + std::to_string(processor.out_height()) +
                             " images; the vision tower takes " +
                             std::to_string(model->vision_config().image_size) + " square");
    }
  }
  SLUICE_LOG_INFO(
      "model \"{}\" version {}: CLIP ({}{}), projection {}, device {}, tokenizer {}; image fetch "
      "concurrency {}, timeouts {} ms connect / {} ms total, max image bytes {}, private "
      "addresses {}, local files {}, decode {} (max {} pixels), feature cache {} MiB",
      o.name, o.version, model->has_vision() ? "vision" : "",
      model->has_text() ? (model->has_vision() ? " + text" : "text") : "", model->projection_dim(),
      backend->Describe(), tokenizer ? "tokenizer.json" : "none: token ids only",
      o.fetch.concurrency, o.fetch.connect_timeout_ms, o.fetch.total_timeout_ms, o.fetch.max_bytes,
      o.fetch.allow_private ? "allowed" : "refused",
      o.fetch.local_root.empty() ? "refused" : o.fetch.local_root, o.fast_decode ? "fast" : "exact",
      o.max_image_pixels, o.cache_bytes >> 20);
  return std::unique_ptr<ServedModel>(std::make_unique<ClipServed>(
      o, std::move(backend), std::move(model), std::move(tokenizer), processor));
}

}  // namespace sluice::server
