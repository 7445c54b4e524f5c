// POST /absa: aspect-based sentiment (enabled by sluice.json "absa").
//   {"review": "...", "aspects": ["food", "waiting"], "model": "..."}
// Each aspect becomes the pair (aspect, review) through the tokenizer's pair template
// ([CLS] aspect [SEP] review [SEP]); all aspects of a request run as one engine request.
//
// On a token classifier with BIO labels (O, B-X, I-X) the review's tokens are grouped into
// spans by the token-classification pipeline's rules (absa.aggregation, default "first";
// io/token_classify.h), and each aspect answers
//   {"aspect", "sentiment", "score", "spans": [{"label", "start", "end", "text", "score"}]}
// where a span's label is the sentiment of its tag X (absa.sentiments, default X lower-cased),
// start/end are character offsets into the review and text is review[start:end]. The
// aspect's sentiment and score are those of its highest-scoring span; without a span,
// "none" with the mean probability of "O" over the review's tokens.
// With absa.sentiment_model (a sequence classifier loaded beside the token classifier, its
// companion) the spans still come from the token classifier, but each aspect's sentiment and
// score come from the companion: its most probable label for the pair, encoded with its own
// tokenizer (all aspects one engine request there too), mapped through absa.sentiments.
// On a sequence classifier the pair is classified instead: the sentiment is its most probable
// label (mapped through absa.sentiments, default the label lower-cased), the score its
// probability, and spans is empty.
#include <algorithm>
#include <cctype>

#include "io/builtins.h"
#include "io/inputs.h"
#include "io/token_classify.h"

namespace sluice::io {
namespace {

struct AbsaState : IoState {
  std::string review;
  std::vector<std::string> aspects;
  std::vector<Encoding> encodings;
};

// The most probable label of a sequence classifier's output, and its probability.
std::pair<std::string, float> TopLabel(const std::vector<std::string>& labels,
                                       const PooledOutput& o) {
  size_t best = 0;
  for (size_t k = 1; k < o.values.size(); ++k) {
    if (o.values[k] > o.values[best]) best = k;
  }
  return {best < labels.size() ? labels[best] : "LABEL_" + std::to_string(best),
          o.values.empty() ? 0.f : o.values[best]};
}

std::string Sentiment(const ModelContext& m, const std::string& tag) {
  for (const auto& [k, v] : m.absa_sentiments) {
    if (k == tag) return v;
  }
  std::string s = tag;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class AbsaProcessor : public IoProcessor {
 public:
  std::string_view name() const override { return "absa"; }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<AbsaState>();
    simdjson::dom::element e;
    if (!f.Get("review", &e)) return FieldError("review", "is required");
    std::string_view review;
    if (e.get(review)) return FieldError("review", "must be a string");
    if (review.empty()) return FieldError("review", "must not be an empty string");
    st->review = std::string(review);
    if (!f.Get("aspects", &e)) return FieldError("aspects", "is required");
    simdjson::dom::array a;
    if (e.get(a)) return FieldError("aspects", "must be a list of strings");
    size_t i = 0;
    for (auto v : a) {
      std::string_view s;
      const std::string path = "aspects[" + std::to_string(i++) + "]";
      if (v.get(s)) return FieldError(path, "must be a string");
      if (s.empty()) return FieldError(path, "must not be an empty string");
      st->aspects.emplace_back(s);
    }
    if (st->aspects.empty()) return FieldError("aspects", "must not be empty");
    if (st->aspects.size() > static_cast<size_t>(m.absa_max_aspects)) {
      return FieldError(
          "aspects", "has " + std::to_string(st->aspects.size()) + " aspects, over the limit of " +
                         std::to_string(m.absa_max_aspects) + " (sluice.json absa.max_aspects)");
    }
    RETURN_IF_ERROR(CheckCount(m, st->aspects.size(), "aspects"));
    std::string model;
    RETURN_IF_ERROR(f.GetString("model", &model));
    RETURN_IF_ERROR(CheckModelName(m, model));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (!m.absa) {
      return FailedPrecondition(
          "this model is not configured for aspect sentiment: add \"absa\" to its sluice.json");
    }
    if (m.task != "token-classify" && m.task != "classify") {
      return FailedPrecondition(
          "aspect sentiment needs a token or sequence classifier; this "
          "model's task is " +
          m.task);
    }
    if (!m.tokenizer) {
      return FailedPrecondition("aspect sentiment needs the model's tokenizer (tokenizer.json)");
    }
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext& m, IoState& state,
                    std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<AbsaState&>(state);
    for (size_t i = 0; i < st.aspects.size(); ++i) {
      ASSIGN_OR_RETURN(Encoding enc, EncodeText(m, st.aspects[i], &st.review, {},
                                                "aspects[" + std::to_string(i) + "]"));
      seqs->push_back(ToSequence(m, enc));
      st.prompt_tokens += static_cast<int64_t>(enc.size());
      st.encodings.push_back(std::move(enc));
    }
    return Status::Ok();
  }

  Status PreProcessCompanion(const ModelContext& c, IoState& state,
                             std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<AbsaState&>(state);
    if (!c.tokenizer) return Internal("the absa sentiment model has no tokenizer");
    for (size_t i = 0; i < st.aspects.size(); ++i) {
      ASSIGN_OR_RETURN(Encoding enc, EncodeText(c, st.aspects[i], &st.review, {},
                                                "aspects[" + std::to_string(i) + "]"));
      seqs->push_back(ToSequence(c, enc));
      st.prompt_tokens += static_cast<int64_t>(enc.size());
    }
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>& outs) const override {
    auto& st = static_cast<AbsaState&>(state);
    const bool tokens = m.task == "token-classify";
    TokenClassifyParams params;
    params.tokenizer = m.tokenizer;
    params.labels = &m.labels;
    if (!ParseAggregation(m.absa_aggregation, &params.aggregation) ||
        params.aggregation == Aggregation::kNone) {
      return Internal("bad absa aggregation " + m.absa_aggregation);
    }
    const CharOffsets chars(st.review);
    const size_t L = m.labels.size();
    const auto o_label = std::find(m.labels.begin(), m.labels.end(), "O");
    if (m.companion && st.companion_outputs.size() != outs.size()) {
      return Internal("the absa sentiment model's outputs do not match the aspects");
    }
    JsonWriter w;
    w.BeginObject();
    w.KeyString("model", m.name);
    w.Key("results");
    w.BeginArray();
    for (size_t i = 0; i < outs.size(); ++i) {
      const PooledOutput& o = outs[i];
      w.BeginObject();
      w.KeyString("aspect", st.aspects[i]);
      if (!tokens) {
        const auto [label, score] = TopLabel(m.labels, o);
        w.KeyString("sentiment", Sentiment(m, label));
        w.KeyFloat("score", score);
        w.Key("spans");
        w.BeginArray();
        w.EndArray();
        w.EndObject();
        continue;
      }
      const Encoding& enc = st.encodings[i];
      if (o.rows != static_cast<int>(enc.size()) || o.values.size() != enc.size() * L) {
        return Internal("token classification output does not match its input");
      }
      ASSIGN_OR_RETURN(auto spans, ClassifyTokens(params, st.review, enc, 1, o.values.data()));
      const TokenEntity* top = nullptr;
      for (const auto& s : spans) {
        if (!top || s.score > top->score) top = &s;
      }
      if (m.companion) {
        const auto [label, score] = TopLabel(m.companion->labels, st.companion_outputs[i]);
        w.KeyString("sentiment", Sentiment(m, label));
        w.KeyFloat("score", score);
      } else if (top) {
        w.KeyString("sentiment", Sentiment(m, top->label));
        w.KeyFloat("score", top->score);
      } else {
        double p_o = 0;
        int n = 0;
        for (size_t t = 0; t < enc.size(); ++t) {
          if (enc.sequence_ids[t] != 1 || enc.special_tokens_mask[t]) continue;
          if (o_label != m.labels.end()) p_o += o.values[t * L + (o_label - m.labels.begin())];
          ++n;
        }
        w.KeyString("sentiment", "none");
        w.KeyFloat("score", n > 0 ? static_cast<float>(p_o / n) : 0.f);
      }
      w.Key("spans");
      w.BeginArray();
      for (const auto& s : spans) {
        w.BeginObject();
        w.KeyString("label", Sentiment(m, s.label));
        w.KeyInt("start", s.start);
        w.KeyInt("end", s.end);
        w.KeyString("text", chars.Slice(s.start, s.end));
        w.KeyFloat("score", s.score);
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
    w.Key("usage");
    w.BeginObject();
    w.KeyInt("prompt_tokens", st.prompt_tokens);
    w.KeyInt("total_tokens", st.prompt_tokens);
    w.EndObject();
    w.EndObject();
    return IoResponse{w.Take()};
  }
};

}  // namespace

std::unique_ptr<IoProcessor> MakeAbsaProcessor() { return std::make_unique<AbsaProcessor>(); }

}  // namespace sluice::io
