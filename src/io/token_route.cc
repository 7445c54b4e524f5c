// POST /token-classify: the Hugging Face token-classification pipeline as a route.
//   {"inputs": "text" | ["text", ...], "text_pair": "..." | [...] (optional),
//    "aggregation_strategy": "none" | "simple" | "first" | "average" | "max",
//    "ignore_labels": ["O"], "model": "..."}
// answers what the pipeline returns: a list of entities for one text, a list of lists for a
// list (io/token_classify.h). With text_pair, each input is a pair: the entities of both texts
// in order, each with "sequence" (0: the text, 1: text_pair) and offsets into its own text.
#include "io/builtins.h"
#include "io/inputs.h"
#include "io/token_classify.h"

namespace sluice::io {
namespace {

struct TokenState : IoState {
  std::vector<std::string> texts, pairs;  // pairs: empty, or one per text
  bool batch = false;                     // `inputs` was a list
  TokenClassifyParams params;
  std::vector<Encoding> encodings;
};

Status ReadStrings(simdjson::dom::element e, const std::string& path, bool allow_empty,
                   std::vector<std::string>* out, bool* was_list) {
  std::string_view s;
  simdjson::dom::array a;
  if (!e.get(s)) {
    if (s.empty() && !allow_empty) return FieldError(path, "must not be an empty string");
    out->emplace_back(s);
    if (was_list) *was_list = false;
    return Status::Ok();
  }
  if (e.get(a)) return FieldError(path, "must be a string or a list of strings");
  if (a.size() == 0) return FieldError(path, "must not be an empty list");
  size_t i = 0;
  for (auto v : a) {
    const std::string p = path + "[" + std::to_string(i++) + "]";
    if (v.get(s)) return FieldError(p, "must be a string");
    if (s.empty() && !allow_empty) return FieldError(p, "must not be an empty string");
    out->emplace_back(s);
  }
  if (was_list) *was_list = true;
  return Status::Ok();
}

class TokenClassifyProcessor : public IoProcessor {
 public:
  std::string_view name() const override { return "token-classify"; }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<TokenState>();
    simdjson::dom::element e;
    if (!f.Get("inputs", &e)) return FieldError("inputs", "is required");
    RETURN_IF_ERROR(ReadStrings(e, "inputs", false, &st->texts, &st->batch));
    if (f.Get("text_pair", &e)) {
      bool list = false;
      RETURN_IF_ERROR(ReadStrings(e, "text_pair", false, &st->pairs, &list));
      if (st->pairs.size() != st->texts.size() || list != st->batch) {
        return FieldError("text_pair", "must match \"inputs\": one string, or a list as long");
      }
    }
    RETURN_IF_ERROR(CheckCount(m, st->texts.size(), "inputs"));
    std::string agg = "none";
    RETURN_IF_ERROR(f.GetString("aggregation_strategy", &agg));
    if (!ParseAggregation(agg, &st->params.aggregation)) {
      return FieldError("aggregation_strategy", "must be none, simple, first, average or max");
    }
    if (f.Get("ignore_labels", &e)) {
      simdjson::dom::array a;
      if (e.get(a)) return FieldError("ignore_labels", "must be a list of labels");
      st->params.ignore_labels.clear();
      size_t i = 0;
      for (auto v : a) {
        std::string_view s;
        if (v.get(s))
          return FieldError("ignore_labels[" + std::to_string(i) + "]", "must be a string");
        st->params.ignore_labels.emplace_back(s);
        ++i;
      }
    }
    std::string model;
    RETURN_IF_ERROR(f.GetString("model", &model));
    RETURN_IF_ERROR(CheckModelName(m, model));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    RETURN_IF_ERROR(CheckTokenClassifier(m));
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext& m, IoState& state,
                    std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<TokenState&>(state);
    st.params.tokenizer = m.tokenizer;
    st.params.labels = &m.labels;
    for (size_t i = 0; i < st.texts.size(); ++i) {
      const std::string path = st.batch ? "inputs[" + std::to_string(i) + "]" : "inputs";
      ASSIGN_OR_RETURN(
          Encoding enc,
          EncodeText(m, st.texts[i], st.pairs.empty() ? nullptr : &st.pairs[i], {}, path));
      seqs->push_back(ToSequence(m, enc));
      st.prompt_tokens += static_cast<int64_t>(enc.size());
      st.encodings.push_back(std::move(enc));
    }
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>& outs) const override {
    auto& st = static_cast<TokenState&>(state);
    JsonWriter w;
    if (st.batch) w.BeginArray();
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i].rows != static_cast<int>(st.encodings[i].size()) ||
          outs[i].values.size() != st.encodings[i].size() * m.labels.size()) {
        return Internal("token classification output does not match its input");
      }
      w.BeginArray();
      const int texts = st.pairs.empty() ? 1 : 2;
      for (int s = 0; s < texts; ++s) {
        const std::string& text = s == 0 ? st.texts[i] : st.pairs[i];
        ASSIGN_OR_RETURN(
            auto ents, ClassifyTokens(st.params, text, st.encodings[i], s, outs[i].values.data()));
        for (const auto& e : ents) {
          WriteEntity(w, e, st.params.aggregation, st.pairs.empty() ? -1 : s);
        }
      }
      w.EndArray();
    }
    if (st.batch) w.EndArray();
    return IoResponse{w.Take()};
  }
};

}  // namespace

Status CheckTokenClassifier(const ModelContext& m) {
  if (m.task != "token-classify") {
    return FailedPrecondition("this model's task is " + m.task +
                              ", not token-classify (a ...ForTokenClassification model is needed)");
  }
  if (!m.tokenizer) {
    return FailedPrecondition(
        "token classification reports character offsets and words: the model needs its "
        "tokenizer (tokenizer.json)");
  }
  return Status::Ok();
}

std::unique_ptr<IoProcessor> MakeTokenClassifyProcessor() {
  return std::make_unique<TokenClassifyProcessor>();
}

}  // namespace sluice::io
