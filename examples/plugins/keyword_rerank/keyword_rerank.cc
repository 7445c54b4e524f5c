// keyword_rerank: a sluice IO-processor plugin (docs/plugins.md). It reranks documents with
// the served cross-encoder, then boosts each document by `boost` for every required keyword
// it contains, and returns the documents by the combined score:
//
//   POST /plugins/keyword_rerank
//   {"query": "How do salmon swim?", "documents": ["...", "..."],
//    "keywords": ["salmon", "river"], "boost": 0.5, "top_n": 2}
//   -> {"results": [{"index": 1, "score": 1.99, "model_score": 0.99, "keywords": ["salmon",
//       "river"]}, ...]}
//
// score = model_score + boost * (keywords found). A keyword matches a whole word or phrase of
// the document, ASCII case-insensitively ("river" matches "River," but not "rivers").
// Fields: query (string, required), documents (strings, required), keywords (non-empty
// strings, at least one), boost (number, default 0.1), top_n (integer >= 1, default all),
// model (string: routes the request, as on every route). Anything else is a 400.
//
// The request's parsed state (keyword matches, boost, top_n) is allocated through sluice
// (call->alloc with a cleanup that runs its destructor), so it is freed when the request ends,
// whatever happens to it. Built against the installed header only; simdjson parses the body.
#include <simdjson.h>
#include <sluice/plugin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <numeric>
#include <string>
#include <vector>

namespace {

struct Request {
  std::vector<std::string> keywords;
  std::vector<std::vector<int32_t>> matched;  // per document: indices into keywords
  double boost = 0.1;
  int64_t top_n = 0;  // 0 = all
};

void DestroyRequest(void* p) { static_cast<Request*>(p)->~Request(); }

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
bool WordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         static_cast<unsigned char>(c) >= 0x80;
}

// Whether `kw` (lowercase) occurs in `doc` as a whole word or phrase.
bool Contains(std::string_view doc, const std::string& kw) {
  if (kw.size() > doc.size()) return false;
  for (size_t i = 0; i + kw.size() <= doc.size(); ++i) {
    if (i > 0 && WordChar(doc[i - 1])) continue;
    size_t k = 0;
    while (k < kw.size() && Lower(doc[i + k]) == kw[k]) ++k;
    if (k < kw.size()) continue;
    if (i + k < doc.size() && WordChar(doc[i + k])) continue;
    return true;
  }
  return false;
}

int Parse(void*, sluice_io_call* call, const char* body, size_t len, sluice_plugin_error* err) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body, len).get(root) != simdjson::SUCCESS) {
    return sluice_plugin_fail(err, "the body is not valid JSON");
  }
  simdjson::dom::object obj;
  if (root.get(obj) != simdjson::SUCCESS)
    return sluice_plugin_fail(err, "the body must be an object");
  std::string_view query;
  simdjson::dom::array docs, keywords;
  bool has_query = false, has_docs = false, has_keywords = false;
  void* mem = call->alloc(call, sizeof(Request), DestroyRequest);
  if (mem == nullptr) return sluice_plugin_fail(err, "out of request memory");
  Request* r = new (mem) Request();
  call->state = r;
  for (auto field : obj) {
    const std::string_view k = field.key;
    if (k == "query") {
      if (field.value.get(query) != simdjson::SUCCESS || query.empty()) {
        return sluice_plugin_fail(err, "query: must be a non-empty string");
      }
      has_query = true;
    } else if (k == "documents") {
      if (field.value.get(docs) != simdjson::SUCCESS || docs.size() == 0) {
        return sluice_plugin_fail(err, "documents: must be a non-empty list of strings");
      }
      has_docs = true;
    } else if (k == "keywords") {
      if (field.value.get(keywords) != simdjson::SUCCESS || keywords.size() == 0) {
        return sluice_plugin_fail(err, "keywords: must be a non-empty list of strings");
      }
      has_keywords = true;
    } else if (k == "boost") {
      if (field.value.get(r->boost) != simdjson::SUCCESS || !std::isfinite(r->boost)) {
        return sluice_plugin_fail(err, "boost: must be a finite number");
      }
    } else if (k == "top_n") {
      if (field.value.get(r->top_n) != simdjson::SUCCESS || r->top_n < 1) {
        return sluice_plugin_fail(err, "top_n: must be an integer >= 1");
      }
    } else if (k == "model") {
      if (!field.value.is_string()) return sluice_plugin_fail(err, "model: must be a string");
    } else {
      return sluice_plugin_fail(err, "unknown field \"%.*s\"", static_cast<int>(k.size()),
                                k.data());
    }
  }
  if (!has_query) return sluice_plugin_fail(err, "query: is required");
  if (!has_docs) return sluice_plugin_fail(err, "documents: is required");
  if (!has_keywords) return sluice_plugin_fail(err, "keywords: is required");
  size_t i = 0;
  for (auto kw : keywords) {
    std::string_view s;
    if (kw.get(s) != simdjson::SUCCESS || s.empty()) {
      return sluice_plugin_fail(err, "keywords[%zu]: must be a non-empty string", i);
    }
    std::string low(s);
    for (char& c : low) c = Lower(c);
    r->keywords.push_back(std::move(low));
    ++i;
  }
  i = 0;
  for (auto d : docs) {
    std::string_view s;
    if (d.get(s) != simdjson::SUCCESS) {
      return sluice_plugin_fail(err, "documents[%zu]: must be a string", i);
    }
    sluice_plugin_error add_err{};
    if (call->add_text(call, query.data(), query.size(), s.data(), s.size(), 0, &add_err) < 0) {
      return sluice_plugin_fail(err, "documents[%zu]: %s", i, add_err.message);
    }
    std::vector<int32_t> m;
    for (size_t k = 0; k < r->keywords.size(); ++k) {
      if (Contains(s, r->keywords[k])) m.push_back(static_cast<int32_t>(k));
    }
    r->matched.push_back(std::move(m));
    ++i;
  }
  return 0;
}

int Respond(void*, sluice_io_call* call, const sluice_io_output* outs, int32_t n,
            sluice_plugin_error* err) {
  const Request& r = *static_cast<const Request*>(call->state);
  if (static_cast<size_t>(n) != r.matched.size()) {
    return sluice_plugin_fail(err, "%d outputs for %zu documents", n, r.matched.size());
  }
  std::vector<float> model(static_cast<size_t>(n)), score(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    if (outs[i].dim < 1) return sluice_plugin_fail(err, "document %d has no score", i);
    model[i] = outs[i].values[0];
    score[i] = model[i] + static_cast<float>(r.boost) * static_cast<float>(r.matched[i].size());
  }
  std::vector<size_t> order(static_cast<size_t>(n));
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
    put(",\"model_score\":");
    call->write_float(call, model[i]);
    put(",\"keywords\":[");
    for (size_t j = 0; j < r.matched[i].size(); ++j) {
      if (j > 0) put(",");
      const std::string& kw = r.keywords[static_cast<size_t>(r.matched[i][j])];
      call->write_string(call, kw.data(), kw.size());
    }
    put("]}");
  }
  put("]}");
  return 0;
}

int CheckModel(void*, const sluice_io_model* m, sluice_plugin_error* err) {
  if (!m->has_tokenizer) {
    return sluice_plugin_fail(err, "needs the model's tokenizer (it sends texts)");
  }
  return 0;
}

}  // namespace

extern "C" {

SLUICE_PLUGIN_DECLARE_ABI()

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  if (!SLUICE_PLUGIN_HOST_HAS(host, register_io_processor)) {
    return sluice_plugin_fail(err, "this sluice has no IO processors (ABI minor 1 needed)");
  }
  sluice_io_processor p{};
  p.struct_size = sizeof p;
  p.name = "keyword_rerank";
  p.task = SLUICE_TASK_SCORE;
  p.check_model = CheckModel;
  p.parse = Parse;
  p.respond = Respond;
  return host->register_io_processor(host->context, &p, err);
}

}  // extern "C"
