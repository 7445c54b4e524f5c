// Scoring endpoints: vLLM /score (1:1, 1:N, N:N), Cohere v1 / Jina /v1/rerank and /rerank,
// Cohere v2 /v2/rerank, and TEI /rerank (when the body has "texts").
//
// Conventions (the same on every route): an empty document is scored (as Cohere, vLLM and HF
// do; queries must not be empty); `top_n` absent = every document, else an integer >= 1
// (more than the documents = all of them); a document given as token ids is echoed as its
// decoded text ({"text": "..."}, never a list; without a tokenizer no "document" is
// returned); a query that leaves no room for a document is reported as the query.
// Late-interaction models (sluice.json) embed the query and each document on their own and
// score the pair by MaxSim (pooling/head.h), after dropping the document's skiplist tokens
// (PyLate's skiplist_words, default string.punctuation; never the query's).
#include <algorithm>
#include <numeric>

#include "io/builtins.h"
#include "io/inputs.h"
#include "pooling/head.h"

namespace sluice::io {
namespace {

constexpr int kCohereV2DefaultMaxTokensPerDoc = 4096;

struct ScoreState : IoState {
  std::vector<Item> queries, docs;  // pairs are (queries[i or 0], docs[i])
  std::string query_field, docs_field;
  bool tei = false;
  int64_t top_n = 0;  // 0 = every document
  bool return_documents = true;
  bool raw_scores = false;
  Truncate truncate;
  std::string instruction;     // causal-LM rerankers
  int max_tokens_per_doc = 0;  // Cohere v2: documents cut to this many tokens first
  // Late interaction: each pair's query and document sequence in the engine's outputs.
  std::vector<size_t> q_seq, d_seq;
  std::vector<std::vector<int32_t>> d_ids;  // each document's tokens (the skiplist)
};

// A rerank document: "text" | {"text": "..."} | [ids...]; empty text and ids are documents.
StatusOr<Item> ReadDocument(simdjson::dom::element e, const std::string& path) {
  simdjson::dom::object o;
  if (!e.get(o)) {
    Fields f(o, path);
    simdjson::dom::element t;
    if (!f.Get("text", &t)) return FieldError(path + ".text", "is required");
    ASSIGN_OR_RETURN(Item it, ReadItem(t, path + ".text", /*allow_empty=*/true));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    return it;
  }
  return ReadItem(e, path, /*allow_empty=*/true);
}

Status ReadTopN(Fields& f, int64_t* top_n) {
  int64_t v = INT64_MIN;
  RETURN_IF_ERROR(f.GetInt("top_n", &v));
  if (v == INT64_MIN) return Status::Ok();
  if (v < 1) return FieldError("top_n", "must be at least 1 (leave it out for every document)");
  *top_n = v;
  return Status::Ok();
}

// Cohere v2's max_tokens_per_doc: the document's text cut after its first `max` tokens.
Status CutDocument(const ModelContext& m, int max, Item* doc, const std::string& path) {
  if (doc->is_ids || !m.tokenizer) {
    if (doc->is_ids && doc->ids.size() > static_cast<size_t>(max)) doc->ids.resize(max);
    return Status::Ok();
  }
  auto enc = m.tokenizer->Encode(doc->text, false);
  if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
  if (enc->size() <= static_cast<size_t>(max)) return Status::Ok();
  doc->text.resize(enc->offsets[max - 1].second);
  return Status::Ok();
}

class ScoreProcessor : public IoProcessor {
 public:
  explicit ScoreProcessor(ScoreFlavor f) : flavor_(f) {}
  std::string_view name() const override {
    return flavor_ == ScoreFlavor::kScore    ? "score"
           : flavor_ == ScoreFlavor::kRerank ? "rerank"
                                             : "rerank-v2";
  }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<ScoreState>();
    simdjson::dom::element e;
    std::string model;
    if (flavor_ == ScoreFlavor::kScore) {
      st->query_field = f.Get("text_1", &e) ? "text_1" : "queries";
      if (st->query_field == "queries" && !f.Get("queries", &e)) {
        return FieldError("text_1", "is required (or \"queries\")");
      }
      ASSIGN_OR_RETURN(st->queries, ReadItems(e, st->query_field));
      st->docs_field = f.Get("text_2", &e) ? "text_2" : "documents";
      if (st->docs_field == "documents" && !f.Get("documents", &e)) {
        return FieldError("text_2", "is required (or \"documents\")");
      }
      ASSIGN_OR_RETURN(st->docs, ReadItems(e, st->docs_field, /*allow_empty=*/true));
      if (st->queries.size() != 1 && st->queries.size() != st->docs.size()) {
        return FieldError(st->query_field, "has " + std::to_string(st->queries.size()) +
                                               " items; it must have 1 or as many as \"" +
                                               st->docs_field + "\" (" +
                                               std::to_string(st->docs.size()) + ")");
      }
      std::string user;
      RETURN_IF_ERROR(f.GetString("model", &model));
      RETURN_IF_ERROR(f.GetString("user", &user));
      RETURN_IF_ERROR(ReadTruncatePromptTokens(f, &st->truncate));
      RETURN_IF_ERROR(f.GetString("instruction", &st->instruction));
    } else {
      st->query_field = "query";
      if (!f.Get("query", &e)) return FieldError("query", "is required");
      ASSIGN_OR_RETURN(Item q, ReadItem(e, "query"));
      if (flavor_ == ScoreFlavor::kCohereV2 && q.is_ids) {
        return FieldError("query", "must be a string (Cohere v2)");
      }
      st->queries.push_back(std::move(q));
      simdjson::dom::array arr;
      if (flavor_ == ScoreFlavor::kRerank && f.Get("texts", &e)) {  // TEI
        st->tei = true;
        st->docs_field = "texts";
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
        st->docs_field = "documents";
        if (!f.Get("documents", &e)) return FieldError("documents", "is required");
        RETURN_IF_ERROR(f.GetString("model", &model));
        RETURN_IF_ERROR(ReadTopN(f, &st->top_n));
        if (flavor_ == ScoreFlavor::kCohereV2) {
          // v2 returns no documents and never refuses a long one: it cuts it.
          st->return_documents = false;
          int64_t max = kCohereV2DefaultMaxTokensPerDoc;
          RETURN_IF_ERROR(f.GetInt("max_tokens_per_doc", &max));
          if (max < 1 || max > INT32_MAX) {
            return FieldError("max_tokens_per_doc", "must be a positive number of tokens");
          }
          st->max_tokens_per_doc = static_cast<int>(max);
          st->truncate.tokens = -1;
        } else {
          RETURN_IF_ERROR(f.GetBool("return_documents", &st->return_documents));
          RETURN_IF_ERROR(ReadTruncatePromptTokens(f, &st->truncate));
          RETURN_IF_ERROR(f.GetString("instruction", &st->instruction));
        }
      }
      if (e.get(arr)) return FieldError(st->docs_field, "must be a list");
      size_t i = 0;
      for (auto d : arr) {
        const std::string path = st->docs_field + "[" + std::to_string(i++) + "]";
        if (flavor_ == ScoreFlavor::kCohereV2 && !d.is_string()) {
          return FieldError(path, "must be a string (Cohere v2 documents are texts)");
        }
        ASSIGN_OR_RETURN(Item it, ReadDocument(d, path));
        st->docs.push_back(std::move(it));
      }
    }
    RETURN_IF_ERROR(CheckModelName(m, model));
    RETURN_IF_ERROR(CheckCount(m, st->docs.size(), st->docs_field));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (m.task != "score") {
      return FailedPrecondition("this model's task is " + m.task +
                                ", not score (a cross-encoder or reranker is needed)");
    }
    if (!st->instruction.empty() && !m.causal_reranker) {
      return FieldError("instruction", "applies to causal-LM rerankers (with a tokenizer) only");
    }
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext& m, IoState& state,
                    std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<ScoreState&>(state);
    for (size_t i = 0; i < st.queries.size(); ++i) {
      const std::string path =
          st.queries.size() > 1 ? st.query_field + "[" + std::to_string(i) + "]" : st.query_field;
      RETURN_IF_ERROR(CheckQueryFits(m, st.queries[i], st.truncate, path, st.instruction));
    }
    if (st.max_tokens_per_doc > 0) {
      for (size_t i = 0; i < st.docs.size(); ++i) {
        RETURN_IF_ERROR(CutDocument(m, st.max_tokens_per_doc, &st.docs[i],
                                    st.docs_field + "[" + std::to_string(i) + "]"));
      }
    }
    auto add = [&](TokenSequence s) {
      st.prompt_tokens += static_cast<int64_t>(s.ids.size());
      seqs->push_back(std::move(s));
      return seqs->size() - 1;
    };
    if (m.late_interaction) return PreProcessLateInteraction(m, st, add);
    for (size_t i = 0; i < st.docs.size(); ++i) {
      const Item& q = st.queries.size() == 1 ? st.queries[0] : st.queries[i];
      const std::string path = st.docs_field + "[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(TokenSequence s,
                       EncodePair(m, q, st.docs[i], st.truncate, path, st.instruction));
      add(std::move(s));
    }
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>& outs) const override {
    auto& st = static_cast<ScoreState&>(state);
    std::vector<float> scores(st.docs.size());
    for (size_t i = 0; i < scores.size(); ++i) {
      if (m.late_interaction) {
        // PyLate's skiplist: the document's punctuation (by default) is not scored.
        DropSkiplistRows(st.d_ids[i], m.skiplist_ids, &outs[st.d_seq[i]]);
        scores[i] = MaxSim(outs[st.q_seq[i]], outs[st.d_seq[i]]);
        continue;
      }
      const auto& v = st.raw_scores ? outs[i].raw : outs[i].values;
      scores[i] = v.empty() ? 0.f : v[0];
    }
    JsonWriter w;
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
          if (auto text = DocumentText(m, st.docs[order[k]])) w.KeyString("text", *text);
        }
        w.EndObject();
      }
      w.EndArray();
      return IoResponse{w.Take()};
    }
    if (flavor_ == ScoreFlavor::kCohereV2) {
      w.BeginObject();
      w.KeyString("id", NewResponseId("rerank"));
      w.Key("results");
      w.BeginArray();
    } else {
      BeginResponse(w, Envelope::kRerank, "rerank", m.name);
    }
    for (size_t k = 0; k < n; ++k) {
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(order[k]));
      w.KeyFloat("relevance_score", scores[order[k]]);
      if (st.return_documents) {
        if (auto text = DocumentText(m, st.docs[order[k]])) {
          w.Key("document");
          w.BeginObject();
          w.KeyString("text", *text);
          w.EndObject();
        }
      }
      w.EndObject();
    }
    if (flavor_ != ScoreFlavor::kCohereV2) {
      EndResponse(w, Envelope::kRerank, st.prompt_tokens);
      return IoResponse{w.Take()};
    }
    w.EndArray();
    w.Key("meta");
    w.BeginObject();
    w.Key("api_version");
    w.BeginObject();
    w.KeyString("version", "2");
    w.EndObject();
    w.Key("billed_units");
    w.BeginObject();
    w.KeyInt("search_units", 1);
    w.EndObject();
    w.Key("tokens");
    w.BeginObject();
    w.KeyInt("input_tokens", st.prompt_tokens);
    w.KeyInt("output_tokens", 0);
    w.EndObject();
    w.EndObject();
    w.EndObject();
    return IoResponse{w.Take()};
  }

 private:
  // Queries and documents embedded on their own (each query once), prefixes on texts.
  template <typename Add>
  static Status PreProcessLateInteraction(const ModelContext& m, ScoreState& st, Add& add) {
    auto encode = [&](const Item& it, const std::string& prefix, const Truncate& t,
                      const std::string& path) -> StatusOr<TokenSequence> {
      Item x = it;
      if (!x.is_ids) x.text = prefix + x.text;
      return EncodeOne(m, x, t, path);
    };
    std::vector<size_t> q_index(st.queries.size());
    for (size_t i = 0; i < st.queries.size(); ++i) {
      const std::string path =
          st.queries.size() > 1 ? st.query_field + "[" + std::to_string(i) + "]" : st.query_field;
      Truncate qt = st.truncate;
      bool truncating = false;
      const int limit = EffectiveLimit(m, qt, &truncating);
      if (m.query_length > 0 && truncating) qt.tokens = std::min(limit, m.query_length);
      ASSIGN_OR_RETURN(TokenSequence s, encode(st.queries[i], m.query_prefix, qt, path));
      if (m.query_length > 0) {
        // ColBERT query augmentation: [MASK] up to the query length.
        const size_t n = static_cast<size_t>(m.query_length);
        if (s.ids.size() > n) {
          return OutOfRange("\"" + path + "\" has " + std::to_string(s.ids.size()) +
                            " tokens, over the model's query length of " + std::to_string(n) +
                            " (query_length, ColBERT query augmentation); shorten it or ask "
                            "for truncation (\"truncate_prompt_tokens\" or \"truncate\")");
        }
        if (!s.type_ids.empty()) s.type_ids.resize(n, 0);
        s.ids.resize(n, m.query_mask_id);
        MarkQueryExpansion(m, &s);  // [MASK] tokens the others do not attend (PyLate's default)
      }
      q_index[i] = add(std::move(s));
    }
    for (size_t i = 0; i < st.docs.size(); ++i) {
      Truncate dt = st.truncate;
      if (m.document_length > 0) {
        // PyLate cuts documents to its document_length (the prefix and special tokens in).
        dt.tokens = dt.tokens > 0 ? std::min(dt.tokens, m.document_length) : m.document_length;
      }
      ASSIGN_OR_RETURN(TokenSequence s, encode(st.docs[i], m.document_prefix, dt,
                                               st.docs_field + "[" + std::to_string(i) + "]"));
      st.q_seq.push_back(q_index[st.queries.size() == 1 ? 0 : i]);
      st.d_ids.push_back(s.ids);
      st.d_seq.push_back(add(std::move(s)));
    }
    return Status::Ok();
  }

  ScoreFlavor flavor_;
};

}  // namespace

std::unique_ptr<IoProcessor> MakeScoreProcessor(ScoreFlavor flavor) {
  return std::make_unique<ScoreProcessor>(flavor);
}

}  // namespace sluice::io
