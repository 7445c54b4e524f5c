// Embedding endpoints: OpenAI /v1/embeddings, TEI /embed, vLLM /pooling.
//
// Normalisation (vLLM's rule, the same on every route and in `sluice embed`): embeddings are
// L2-normalised unless the request's "normalize" is false; the model's default is sluice.json
// "normalize", else true. `dimensions` (Matryoshka) truncates before normalising.
// /pooling's "task" names what the model pools: embed (one vector per input), token_embed
// (a vector per token: pooling all/step, late-interaction models), classify, score,
// token_classify (per-token label probabilities); it must be the model's own (the default).
// A late-interaction model's document (an input whose second token is the document prefix's)
// loses its skiplist tokens' vectors (PyLate's skiplist_words); token_indices names the kept.
#include <cmath>

#include "io/builtins.h"
#include "io/inputs.h"
#include "pooling/head.h"
#include "weights/config.h"

namespace sluice::io {
namespace {

struct EmbedState : IoState {
  std::vector<Item> items;
  std::string model;
  bool base64 = false;
  int dimensions = 0;
  bool normalize = true;  // L2-normalise the embeddings (the model's default unless asked)
  Truncate truncate;
  // Late interaction: the tokens of each input that is a document (empty: not one), whose
  // skiplist tokens' vectors are dropped.
  std::vector<std::vector<int32_t>> doc_ids;
};

// What /pooling pools for this model (vLLM's task names).
const char* PoolingTask(const ModelContext& m) {
  if (m.task == "embed") return m.token_level ? "token_embed" : "embed";
  if (m.late_interaction) return "token_embed";
  if (m.task == "token-classify") return "token_classify";
  return m.task == "score" ? "score" : "classify";
}

class EmbedProcessor : public IoProcessor {
 public:
  explicit EmbedProcessor(EmbedFlavor f) : flavor_(f) {}
  std::string_view name() const override {
    return flavor_ == EmbedFlavor::kOpenAI ? "embeddings"
           : flavor_ == EmbedFlavor::kTei  ? "embed"
                                           : "pooling";
  }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<EmbedState>();
    const char* input_field = flavor_ == EmbedFlavor::kTei ? "inputs" : "input";
    simdjson::dom::element e;
    if (!f.Get(input_field, &e)) return FieldError(input_field, "is required");
    ASSIGN_OR_RETURN(st->items, ReadItems(e, input_field));
    RETURN_IF_ERROR(CheckCount(m, st->items.size(), input_field));
    int64_t dims = INT64_MIN;  // absent
    RETURN_IF_ERROR(f.GetInt("dimensions", &dims));
    st->normalize = m.normalize;
    simdjson::dom::element ne;
    const bool normalize_given = f.Get("normalize", &ne);
    RETURN_IF_ERROR(f.GetBool("normalize", &st->normalize));
    const bool embeddings = m.task == "embed" || m.late_interaction;
    if (normalize_given && !embeddings) {
      return FieldError("normalize",
                        "applies to embeddings only (this model's task is " + m.task + ")");
    }
    if (normalize_given && m.late_interaction && !st->normalize) {
      return FieldError("normalize",
                        "cannot be false for a late-interaction model: its token "
                        "vectors are normalised for MaxSim");
    }
    if (!embeddings) st->normalize = false;
    if (flavor_ == EmbedFlavor::kPooling) {
      std::string task = PoolingTask(m);
      RETURN_IF_ERROR(f.GetString("task", &task));
      if (task != PoolingTask(m)) {
        return FieldError("task", "is \"" + task + "\", but this model pools for \"" +
                                      PoolingTask(m) + "\" (its only task here)");
      }
    }
    if (flavor_ == EmbedFlavor::kTei) {
      bool trunc = false;
      RETURN_IF_ERROR(f.GetBool("truncate", &trunc));
      if (trunc) st->truncate.tokens = -1;
      std::string dir = "Right";
      RETURN_IF_ERROR(f.GetString("truncation_direction", &dir));
      if (dir != "Right" && dir != "right") {
        return FieldError("truncation_direction", "must be \"Right\" (only right truncation)");
      }
    } else {
      RETURN_IF_ERROR(f.GetString("model", &st->model));
      RETURN_IF_ERROR(CheckModelName(m, st->model));
      std::string fmt = "float";
      RETURN_IF_ERROR(f.GetString("encoding_format", &fmt));
      if (fmt != "float" && fmt != "base64") {
        return FieldError("encoding_format", "must be \"float\" or \"base64\"");
      }
      st->base64 = fmt == "base64";
      std::string user;
      RETURN_IF_ERROR(f.GetString("user", &user));
      RETURN_IF_ERROR(ReadTruncatePromptTokens(f, &st->truncate));
    }
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (flavor_ != EmbedFlavor::kPooling && m.task != "embed") {
      return FailedPrecondition("this model's task is " + m.task +
                                ", not embed; use the endpoint of its task (or /pooling)");
    }
    if (flavor_ != EmbedFlavor::kPooling && m.token_level) {
      return FailedPrecondition("this model pools every token (token-level output); use /pooling");
    }
    if (dims != INT64_MIN) {
      if (m.task != "embed" || m.token_level) {
        return FieldError("dimensions", "applies to embedding models (one vector per input) only");
      }
      Matryoshka mat{m.matryoshka, m.matryoshka_dimensions};
      if (std::string why = MatryoshkaDimensionsError(mat, dims, m.output_dim); !why.empty()) {
        return FieldError("dimensions", why);
      }
      st->dimensions = static_cast<int>(dims);
    }
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext& m, IoState& state,
                    std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<EmbedState&>(state);
    const char* field = flavor_ == EmbedFlavor::kTei ? "inputs" : "input";
    const bool many = st.items.size() > 1;
    for (size_t i = 0; i < st.items.size(); ++i) {
      const std::string path = many ? std::string(field) + "[" + std::to_string(i) + "]" : field;
      ASSIGN_OR_RETURN(TokenSequence s, EncodeOne(m, st.items[i], st.truncate, path));
      // A query the client padded with [MASK] (token ids) gets the query path's vectors.
      MarkQueryExpansion(m, &s);
      // A document (its second token the document prefix's) loses its skiplist tokens.
      st.doc_ids.push_back(IsMarkedDocument(m, s) ? s.ids : std::vector<int32_t>{});
      st.prompt_tokens += static_cast<int64_t>(s.ids.size());
      seqs->push_back(std::move(s));
    }
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>& outs) const override {
    auto& st = static_cast<EmbedState&>(state);
    for (size_t i = 0; i < outs.size() && i < st.doc_ids.size(); ++i) {
      if (!st.doc_ids[i].empty()) DropSkiplistRows(st.doc_ids[i], m.skiplist_ids, &outs[i]);
    }
    for (auto& o : outs) {
      if (st.dimensions > 0 && static_cast<size_t>(st.dimensions) < o.values.size()) {
        o.values.resize(st.dimensions);
      }
      if (st.normalize && !m.late_interaction) NormalizeRows(&o);
    }
    JsonWriter w;
    if (flavor_ == EmbedFlavor::kTei) {
      w.BeginArray();
      for (auto& o : outs) w.Floats(o.values.data(), o.values.size());
      w.EndArray();
      return IoResponse{w.Take()};
    }
    const bool openai = flavor_ == EmbedFlavor::kOpenAI;
    BeginResponse(w, Envelope::kList, openai ? "embd" : "pool", m.name);
    for (size_t i = 0; i < outs.size(); ++i) {
      const PooledOutput& o = outs[i];
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(i));
      w.KeyString("object", openai ? "embedding" : "pooling");
      w.Key(openai ? "embedding" : "data");
      if (st.base64) {
        w.String(Base64(o.values.data(), o.values.size() * sizeof(float)));
      } else if (!openai && m.token_level) {
        const size_t dim = o.rows > 0 ? o.values.size() / o.rows : 0;
        w.BeginArray();
        for (int r = 0; r < o.rows; ++r) w.Floats(o.values.data() + r * dim, dim);
        w.EndArray();
      } else {
        w.Floats(o.values.data(), o.values.size());
      }
      if (!openai && !o.token_indices.empty()) {
        w.Key("token_indices");
        w.Ints(o.token_indices);
      }
      w.EndObject();
    }
    EndResponse(w, Envelope::kList, st.prompt_tokens);
    return IoResponse{w.Take()};
  }

 private:
  EmbedFlavor flavor_;
};

}  // namespace

std::unique_ptr<IoProcessor> MakeEmbedProcessor(EmbedFlavor flavor) {
  return std::make_unique<EmbedProcessor>(flavor);
}

}  // namespace sluice::io
