// clip_adapter: a sluice IO-processor plugin (docs/plugins.md, "Ranking heads on CLIP
// features") that ranks images for a text query with a small head trained on click data, on
// top of the served CLIP model's embeddings:
//
//   POST /plugins/clip_rank
//   {"query": "a red bicycle", "images": ["https://img.example/1.jpg", "data:image/png;...",
//    "/srv/images/3.webp"], "top_n": 2}
//   -> {"results": [{"index": 2, "score": 0.81, "cosine": 0.27}, {"index": 0, ...}]}
//
// The head is read from clip_adapter.json in the model's directory when the model loads
// (check_model; a missing or malformed file refuses the model, naming the problem):
//
//   {"weights": [w_1, ..., w_P], "image_weights": [u_1, ..., u_P], "bias": b}
//
//   score  = sigmoid(sum_i w_i * q_i * x_i + sum_i u_i * x_i + b)
//   cosine = sum_i q_i * x_i
//
// with P the model's projection_dim, q the query's and x the image's L2-normalised CLIP
// embedding (what /v1/embeddings returns by default; sluice passes exactly these), w a
// per-dimension re-weighting of the similarity, u a query-independent image prior (optional,
// default 0) and b the base rate (optional, default 0). With w = 1 and u = b = 0, score is
// sigmoid(cosine): the plain CLIP ranking.
//
// Fields: query (a non-empty string, which needs the model's tokenizer.json, or a list of token
// ids; required), images (a non-empty list of image sources: http(s) URLs, data: URIs, local
// paths under --allowed-local-media-path; required), top_n (integer >= 1, default all), model
// (string: routes the request). Anything else is a 400 naming the field. Results are sorted
// by score, highest first (ties keep the request's order); `index` is the image's position in
// `images`. An image that cannot be fetched or decoded fails the request with sluice's 400
// naming its source.
//
// One library may serve several CLIP models (each loads it and has its own clip_adapter.json):
// heads are kept by model. Per-request state goes through call->alloc, freed by sluice when
// the request ends. Built against the installed header only; simdjson parses the JSON.
#include <simdjson.h>
#include <sluice/plugin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <string>
#include <vector>

namespace {

struct Head {
  std::vector<double> weights, image_weights;
  double bias = 0;
};

// Heads by the model they were read for (sluice passes the same sluice_io_model to
// check_model and to every call of that model). An entry outlives its model (P doubles per
// load: the ABI has no unload hook for IO processors); a model loaded at the same address
// replaces it.
std::mutex g_heads_mu;
std::map<const sluice_io_model*, std::shared_ptr<const Head>> g_heads;

std::shared_ptr<const Head> HeadOf(const sluice_io_model* m) {
  std::lock_guard<std::mutex> lock(g_heads_mu);
  auto it = g_heads.find(m);
  return it == g_heads.end() ? nullptr : it->second;
}

struct Request {
  std::shared_ptr<const Head> head;
  size_t images = 0;
  int64_t top_n = 0;  // 0 = all
};

void DestroyRequest(void* p) { static_cast<Request*>(p)->~Request(); }

// A list of exactly n finite numbers into out; "" or why not.
std::string ReadVector(simdjson::dom::element e, size_t n, std::vector<double>* out) {
  simdjson::dom::array a;
  if (e.get(a) != simdjson::SUCCESS) return "must be a list of numbers";
  if (a.size() != n) {
    return "has " + std::to_string(a.size()) + " values; the model's projection_dim is " +
           std::to_string(n);
  }
  for (auto v : a) {
    double d;
    if (v.get(d) != simdjson::SUCCESS || !std::isfinite(d)) return "must hold finite numbers";
    out->push_back(d);
  }
  return "";
}

int CheckModel(void*, const sluice_io_model* m, sluice_plugin_error* err) {
  if (!SLUICE_IO_MODEL_HAS(m, model_dir) || m->model_dir == nullptr) {
    return sluice_plugin_fail(err, "needs sluice_io_model.model_dir (ABI minor 2)");
  }
  const std::string path = std::string(m->model_dir) + "/clip_adapter.json";
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto e = parser.load(path).get(root); e != simdjson::SUCCESS) {
    return sluice_plugin_fail(err, "%s: %s", path.c_str(), simdjson::error_message(e));
  }
  simdjson::dom::object obj;
  if (root.get(obj) != simdjson::SUCCESS) {
    return sluice_plugin_fail(err, "%s: must be a JSON object", path.c_str());
  }
  auto head = std::make_shared<Head>();
  const size_t dim = static_cast<size_t>(m->output_dim);
  bool has_weights = false;
  for (auto field : obj) {
    const std::string k(field.key);
    std::string why;
    if (k == "weights") {
      why = ReadVector(field.value, dim, &head->weights);
      has_weights = true;
    } else if (k == "image_weights") {
      why = ReadVector(field.value, dim, &head->image_weights);
    } else if (k == "bias") {
      if (field.value.get(head->bias) != simdjson::SUCCESS || !std::isfinite(head->bias)) {
        why = "must be a finite number";
      }
    } else {
      why = "is not a field of the head (weights, image_weights, bias)";
    }
    if (!why.empty())
      return sluice_plugin_fail(err, "%s: %s %s", path.c_str(), k.c_str(), why.c_str());
  }
  if (!has_weights) return sluice_plugin_fail(err, "%s: weights is required", path.c_str());
  if (head->image_weights.empty()) head->image_weights.assign(dim, 0.0);
  std::lock_guard<std::mutex> lock(g_heads_mu);
  g_heads[m] = std::move(head);
  return 0;
}

int Parse(void*, sluice_io_call* call, const char* body, size_t len, sluice_plugin_error* err) {
  if (!SLUICE_IO_CALL_HAS(call, add_image)) {
    return sluice_plugin_fail(err, "this sluice has no add_image (ABI minor 2 needed)");
  }
  void* mem = call->alloc(call, sizeof(Request), DestroyRequest);
  if (mem == nullptr) return sluice_plugin_fail(err, "out of request memory");
  Request* r = new (mem) Request();
  call->state = r;
  r->head = HeadOf(call->model);
  if (!r->head) return sluice_plugin_fail(err, "no head was loaded for this model");
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body, len).get(root) != simdjson::SUCCESS) {
    return sluice_plugin_fail(err, "the body is not valid JSON");
  }
  simdjson::dom::object obj;
  if (root.get(obj) != simdjson::SUCCESS) {
    return sluice_plugin_fail(err, "the body must be an object");
  }
  simdjson::dom::element query;
  simdjson::dom::array images;
  bool has_query = false, has_images = false;
  for (auto field : obj) {
    const std::string_view k = field.key;
    if (k == "query") {
      query = field.value;
      has_query = true;
    } else if (k == "images") {
      if (field.value.get(images) != simdjson::SUCCESS || images.size() == 0) {
        return sluice_plugin_fail(err, "images: must be a non-empty list of image sources");
      }
      has_images = true;
    } else if (k == "top_n") {
      if (field.value.get(r->top_n) != simdjson::SUCCESS || r->top_n < 1) {
        return sluice_plugin_fail(err, "top_n: must be an integer >= 1");
      }
    } else if (k == "model") {
      if (!field.value.is_string()) return sluice_plugin_fail(err, "model: must be a string");
    } else {
      return sluice_plugin_fail(err, "unknown field \"%.*s\" (query, images, top_n, model)",
                                static_cast<int>(k.size()), k.data());
    }
  }
  if (!has_query) return sluice_plugin_fail(err, "query: is required");
  if (!has_images) return sluice_plugin_fail(err, "images: is required");
  // The query is output 0, image i output i + 1.
  sluice_plugin_error add_err{};
  std::string_view text;
  simdjson::dom::array ids;
  if (query.get(text) == simdjson::SUCCESS) {
    if (text.empty()) return sluice_plugin_fail(err, "query: must not be empty");
    if (call->add_text(call, text.data(), text.size(), nullptr, 0, 0, &add_err) < 0) {
      return sluice_plugin_fail(err, "query: %s", add_err.message);
    }
  } else if (query.get(ids) == simdjson::SUCCESS) {
    std::vector<int32_t> v;
    for (auto x : ids) {
      int64_t id;
      if (x.get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX) {
        return sluice_plugin_fail(err, "query: token ids must be non-negative integers");
      }
      v.push_back(static_cast<int32_t>(id));
    }
    if (call->add_tokens(call, v.data(), static_cast<int64_t>(v.size()), nullptr, &add_err) < 0) {
      return sluice_plugin_fail(err, "query: %s", add_err.message);
    }
  } else {
    return sluice_plugin_fail(err, "query: must be a string or a list of token ids");
  }
  size_t i = 0;
  for (auto im : images) {
    std::string_view src;
    if (im.get(src) != simdjson::SUCCESS || src.empty()) {
      return sluice_plugin_fail(err, "images[%zu]: must be a non-empty string", i);
    }
    if (call->add_image(call, src.data(), src.size(), &add_err) < 0) {
      return sluice_plugin_fail(err, "images[%zu]: %s", i, add_err.message);
    }
    ++i;
  }
  r->images = i;
  return 0;
}

int Respond(void*, sluice_io_call* call, const sluice_io_output* outs, int32_t n,
            sluice_plugin_error* err) {
  const Request& r = *static_cast<const Request*>(call->state);
  const Head& h = *r.head;
  const size_t dim = h.weights.size();
  if (static_cast<size_t>(n) != r.images + 1) {
    return sluice_plugin_fail(err, "%d outputs for a query and %zu images", n, r.images);
  }
  for (int32_t k = 0; k < n; ++k) {
    if (outs[k].rows != 1 || static_cast<size_t>(outs[k].dim) != dim) {
      return sluice_plugin_fail(err, "output %d has %d x %d values, not 1 x %zu", k, outs[k].rows,
                                outs[k].dim, dim);
    }
  }
  const float* q = outs[0].values;
  std::vector<float> score(r.images), cosine(r.images);
  for (size_t i = 0; i < r.images; ++i) {
    const float* x = outs[i + 1].values;
    double logit = h.bias, cos = 0;
    for (size_t d = 0; d < dim; ++d) {
      logit += h.weights[d] * q[d] * x[d] + h.image_weights[d] * x[d];
      cos += static_cast<double>(q[d]) * x[d];
    }
    score[i] = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
    cosine[i] = static_cast<float>(cos);
  }
  std::vector<size_t> order(r.images);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score[a] > score[b]; });
  size_t keep = order.size();
  if (r.top_n > 0) keep = std::min(keep, static_cast<size_t>(r.top_n));
  auto put = [&](const char* s) { call->write(call, s, std::strlen(s)); };
  put("{\"results\":[");
  for (size_t k = 0; k < keep; ++k) {
    const size_t i = order[k];
    const std::string index = std::to_string(i);
    put(k == 0 ? "{\"index\":" : ",{\"index\":");
    put(index.c_str());
    put(",\"score\":");
    call->write_float(call, score[i]);
    put(",\"cosine\":");
    call->write_float(call, cosine[i]);
    put("}");
  }
  put("]}");
  return 0;
}

}  // namespace

extern "C" {

SLUICE_PLUGIN_DECLARE_ABI()

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  if (!SLUICE_PLUGIN_HOST_HAS(host, register_io_processor) || host->abi_minor < 2) {
    return sluice_plugin_fail(err, "this sluice has no IO processors on CLIP models (ABI 1.2)");
  }
  sluice_io_processor p{};
  p.struct_size = sizeof p;
  p.name = "clip_rank";
  p.task = SLUICE_TASK_CLIP;
  p.check_model = CheckModel;
  p.parse = Parse;
  p.respond = Respond;
  return host->register_io_processor(host->context, &p, err);
}

}  // extern "C"
