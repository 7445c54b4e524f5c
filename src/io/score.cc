// Scoring endpoints: vLLM /score (1:1, 1:N, N:N), Cohere/Jina /v1/rerank and /rerank, and
// TEI /rerank (when the body has "texts").
#include <algorithm>
#include <numeric>

#include "io/builtins.h"
#include "io/inputs.h"

namespace sluice::io {
namespace {

struct ScoreState : IoState {
  std::vector<Item> queries, docs;  // /score: pairs are (queries[i or 0], docs[i])
  bool tei = false;
  int64_t top_n = -1;
  bool return_documents = true;  // rerank (Cohere/Jina); TEI: return_text (default false)
  bool raw_scores = false;
  Truncate truncate;
  std::string instruction;  // causal-LM rerankers
};

// A rerank document: "text" | {"text": "..."} | [ids...].
StatusOr<Item> ReadDocument(simdjson::dom::element e, const std::string& path) {
  simdjson::dom::object o;
  if (!e.get(o)) {
    Fields f(o, path);
    simdjson::dom::element t;
    if (!f.Get("text", &t)) return FieldError(path + ".text", "is required");
    ASSIGN_OR_RETURN(Item it, ReadItem(t, path + ".text"));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    return it;
  }
  return ReadItem(e, path);
}

class ScoreProcessor : public IoProcessor {
 public:
  explicit ScoreProcessor(ScoreFlavor f) : flavor_(f) {}
  std::string_view name() const override {
    return flavor_ == ScoreFlavor::kScore ? "score" : "rerank";
  }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<ScoreState>();
    simdjson::dom::element e;
    std::string docs_field;
    if (flavor_ == ScoreFlavor::kScore) {
      const char* qf = f.Get("text_1", &e) ? "text_1" : "queries";
      if (std::string(qf) == "queries" && !f.Get("queries", &e)) {
        return FieldError("text_1", "is required (or \"queries\")");
      }
      ASSIGN_OR_RETURN(st->queries, ReadItems(e, qf));
      docs_field = f.Get("text_2", &e) ? "text_2" : "documents";
      if (docs_field == "documents" && !f.Get("documents", &e)) {
        return FieldError("text_2", "is required (or \"documents\")");
      }
      ASSIGN_OR_RETURN(st->docs, ReadItems(e, docs_field));
      if (st->queries.size() != 1 && st->queries.size() != st->docs.size()) {
        return FieldError(qf, "has " + std::to_string(st->queries.size()) +
                                  " items; it must have 1 or as many as \"" + docs_field + "\" (" +
                                  std::to_string(st->docs.size()) + ")");
      }
      std::string model, user;
      RETURN_IF_ERROR(f.GetString("model", &model));
      RETURN_IF_ERROR(CheckModelName(m, model));
      RETURN_IF_ERROR(f.GetString("user", &user));
      RETURN_IF_ERROR(ReadTruncatePromptTokens(f, &st->truncate));
      RETURN_IF_ERROR(f.GetString("instruction", &st->instruction));
    } else {
      if (!f.Get("query", &e)) return FieldError("query", "is required");
      ASSIGN_OR_RETURN(Item q, ReadItem(e, "query"));
      st->queries.push_back(std::move(q));
      simdjson::dom::array arr;
      if (f.Get("texts", &e)) {  // TEI
        st->tei = true;
        docs_field = "texts";
        st->return_documents = false;
        RETURN_IF_ERROR(f.GetBool("raw_scores", &st->raw_scores));
        RETURN_IF_ERROR(f.GetBool("return_text", &st->return_documents));
        bool trunc = false;
        RETURN_IF_ERROR(f.GetBool("truncate", &trunc));
        if (trunc) st->truncate.tokens = -1;
        std::string dir = "Right";
        RETURN_IF_ERROR(f.GetString("truncation_direction", &dir));
        if (dir != "Right" && dir != "right") {
          return FieldError("truncation_direction", "must be \"Right\" (only right truncation)");
        }
      } else {
        docs_field = "documents";
        if (!f.Get("documents", &e)) return FieldError("documents", "is required");
        std::string model;
        RETURN_IF_ERROR(f.GetString("model", &model));
        RETURN_IF_ERROR(CheckModelName(m, model));
        RETURN_IF_ERROR(f.GetInt("top_n", &st->top_n));
        if (st->top_n != -1 && st->top_n < 1) return FieldError("top_n", "must be at least 1");
        RETURN_IF_ERROR(f.GetBool("return_documents", &st->return_documents));
        RETURN_IF_ERROR(ReadTruncatePromptTokens(f, &st->truncate));
        RETURN_IF_ERROR(f.GetString("instruction", &st->instruction));
      }
      if (e.get(arr)) return FieldError(docs_field, "must be a list");
      size_t i = 0;
      for (auto d : arr) {
        ASSIGN_OR_RETURN(Item it, ReadDocument(d, docs_field + "[" + std::to_string(i++) + "]"));
        st->docs.push_back(std::move(it));
      }
    }
    RETURN_IF_ERROR(CheckCount(m, st->docs.size(), docs_field));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (m.task != "score") {
      return FailedPrecondition("this model's task is " + m.task +
                                ", not score (a cross-encoder or reranker is needed)");
    }
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext& m, IoState& state,
                    std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<ScoreState&>(state);
    for (size_t i = 0; i < st.docs.size(); ++i) {
      const Item& q = st.queries.size() == 1 ? st.queries[0] : st.queries[i];
      const std::string path = (st.tei ? "texts[" : "documents[") + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(TokenSequence s,
                       EncodePair(m, q, st.docs[i], st.truncate, path, st.instruction));
      st.prompt_tokens += static_cast<int64_t>(s.ids.size());
      seqs->push_back(std::move(s));
    }
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>& outs) const override {
    auto& st = static_cast<ScoreState&>(state);
    std::vector<float> scores(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto& v = st.raw_scores ? outs[i].raw : outs[i].values;
      scores[i] = v.empty() ? 0.f : v[0];
    }
    JsonWriter w;
    auto write_doc_text = [&](size_t i) {
      const Item& d = st.docs[i];
      if (d.is_ids) {
        w.Ints(d.ids);
      } else {
        w.String(d.text);
      }
    };
    if (flavor_ == ScoreFlavor::kScore) {
      BeginResponse(w, Envelope::kList, "score", m.name);
      for (size_t i = 0; i < scores.size(); ++i) {
        w.BeginObject();
        w.KeyInt("index", static_cast<int64_t>(i));
        w.KeyString("object", "score");
        w.KeyFloat("score", scores[i]);
        w.EndObject();
      }
      EndResponse(w, Envelope::kList, st.prompt_tokens);
      return IoResponse{w.Take()};
    }
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    size_t n = order.size();
    if (st.top_n > 0) n = std::min(n, static_cast<size_t>(st.top_n));
    if (st.tei) {
      w.BeginArray();
      for (size_t k = 0; k < n; ++k) {
        w.BeginObject();
        w.KeyInt("index", static_cast<int64_t>(order[k]));
        w.KeyFloat("score", scores[order[k]]);
        if (st.return_documents) {
          w.Key("text");
          write_doc_text(order[k]);
        }
        w.EndObject();
      }
      w.EndArray();
      return IoResponse{w.Take()};
    }
    BeginResponse(w, Envelope::kRerank, "rerank", m.name);
    for (size_t k = 0; k < n; ++k) {
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(order[k]));
      w.KeyFloat("relevance_score", scores[order[k]]);
      if (st.return_documents) {
        w.Key("document");
        w.BeginObject();
        w.Key("text");
        write_doc_text(order[k]);
        w.EndObject();
      }
      w.EndObject();
    }
    EndResponse(w, Envelope::kRerank, st.prompt_tokens);
    return IoResponse{w.Take()};
  }

 private:
  ScoreFlavor flavor_;
};

}  // namespace

std::unique_ptr<IoProcessor> MakeScoreProcessor(ScoreFlavor flavor) {
  return std::make_unique<ScoreProcessor>(flavor);
}

}  // namespace sluice::io
