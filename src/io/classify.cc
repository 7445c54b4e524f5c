// Classification endpoints: vLLM /classify and TEI /predict.
#include <algorithm>
#include <numeric>

#include "io/builtins.h"
#include "io/inputs.h"

namespace sluice::io {
namespace {

struct ClassifyState : IoState {
  struct Input {
    Item a, b;
    bool pair = false;
  };
  std::vector<Input> inputs;
  bool batch = true;  // TEI: a single input answers with one list, not a list of lists
  bool raw_scores = false;
  Truncate truncate;
};

std::string LabelOf(const ModelContext& m, size_t k) {
  return k < m.labels.size() ? m.labels[k] : "LABEL_" + std::to_string(k);
}

// TEI's input: "text" | ["a", "b"] (a pair) | [[int...]] | [item | [item, item], ...].
Status ReadTeiInputs(simdjson::dom::element e, ClassifyState* st) {
  simdjson::dom::array a;
  if (e.get(a) || (a.size() > 0 && (a.at(0).is_int64() || a.at(0).is_uint64()))) {
    ClassifyState::Input in;
    ASSIGN_OR_RETURN(in.a, ReadItem(e, "inputs"));
    st->inputs.push_back(std::move(in));
    st->batch = false;
    return Status::Ok();
  }
  if (a.size() == 0) return FieldError("inputs", "must not be an empty list");
  if (a.size() == 2 && a.at(0).is_string() && a.at(1).is_string()) {
    ClassifyState::Input in;
    ASSIGN_OR_RETURN(in.a, ReadItem(a.at(0), "inputs[0]"));
    ASSIGN_OR_RETURN(in.b, ReadItem(a.at(1), "inputs[1]"));
    in.pair = true;
    st->inputs.push_back(std::move(in));
    st->batch = false;
    return Status::Ok();
  }
  size_t i = 0;
  for (auto v : a) {
    const std::string path = "inputs[" + std::to_string(i++) + "]";
    ClassifyState::Input in;
    simdjson::dom::array pa;
    if (!v.get(pa) && pa.size() == 2 && !pa.at(0).is_int64() && !pa.at(0).is_uint64()) {
      ASSIGN_OR_RETURN(in.a, ReadItem(pa.at(0), path + "[0]"));
      ASSIGN_OR_RETURN(in.b, ReadItem(pa.at(1), path + "[1]"));
      in.pair = true;
    } else {
      ASSIGN_OR_RETURN(in.a, ReadItem(v, path));
    }
    st->inputs.push_back(std::move(in));
  }
  return Status::Ok();
}

class ClassifyProcessor : public IoProcessor {
 public:
  explicit ClassifyProcessor(ClassifyFlavor f) : flavor_(f) {}
  std::string_view name() const override {
    return flavor_ == ClassifyFlavor::kVllm ? "classify" : "predict";
  }

  StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& req) const override {
    const ModelContext& m = *req.model;
    ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(req.body));
    Fields f(obj, "");
    auto st = std::make_unique<ClassifyState>();
    simdjson::dom::element e;
    if (flavor_ == ClassifyFlavor::kVllm) {
      if (!f.Get("input", &e)) return FieldError("input", "is required");
      ASSIGN_OR_RETURN(std::vector<Item> items, ReadItems(e, "input"));
      for (auto& it : items) st->inputs.push_back({std::move(it), {}, false});
      std::string model, user;
      RETURN_IF_ERROR(f.GetString("model", &model));
      RETURN_IF_ERROR(CheckModelName(m, model));
      RETURN_IF_ERROR(f.GetString("user", &user));
      RETURN_IF_ERROR(ReadTruncatePromptTokens(f, &st->truncate));
    } else {
      if (!f.Get("inputs", &e)) return FieldError("inputs", "is required");
      RETURN_IF_ERROR(ReadTeiInputs(e, st.get()));
      RETURN_IF_ERROR(f.GetBool("raw_scores", &st->raw_scores));
      bool trunc = false;
      RETURN_IF_ERROR(f.GetBool("truncate", &trunc));
      if (trunc) st->truncate.tokens = -1;
    }
    RETURN_IF_ERROR(
        CheckCount(m, st->inputs.size(), flavor_ == ClassifyFlavor::kVllm ? "input" : "inputs"));
    RETURN_IF_ERROR(f.CheckNoUnknown());
    if (m.task != "classify" && m.task != "score") {
      return FailedPrecondition("this model's task is " + m.task + ", not classify");
    }
    return std::unique_ptr<IoState>(std::move(st));
  }

  Status PreProcess(const ModelContext& m, IoState& state,
                    std::vector<TokenSequence>* seqs) const override {
    auto& st = static_cast<ClassifyState&>(state);
    const std::string field = flavor_ == ClassifyFlavor::kVllm ? "input" : "inputs";
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      const auto& in = st.inputs[i];
      const std::string path = st.inputs.size() > 1 ? field + "[" + std::to_string(i) + "]" : field;
      TokenSequence s;
      if (in.pair) {
        ASSIGN_OR_RETURN(s, EncodePair(m, in.a, in.b, st.truncate, path));
      } else {
        ASSIGN_OR_RETURN(s, EncodeOne(m, in.a, st.truncate, path));
      }
      st.prompt_tokens += static_cast<int64_t>(s.ids.size());
      seqs->push_back(std::move(s));
    }
    return Status::Ok();
  }

  StatusOr<IoResponse> PostProcess(const ModelContext& m, IoState& state,
                                   std::vector<PooledOutput>& outs) const override {
    auto& st = static_cast<ClassifyState&>(state);
    JsonWriter w;
    if (flavor_ == ClassifyFlavor::kTei) {
      if (st.batch) w.BeginArray();
      for (const auto& o : outs) {
        const std::vector<float>& v = st.raw_scores ? o.raw : o.values;
        std::vector<size_t> order(v.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return v[a] > v[b]; });
        w.BeginArray();
        for (size_t k : order) {
          w.BeginObject();
          w.KeyFloat("score", v[k]);
          w.KeyString("label", LabelOf(m, k));
          w.EndObject();
        }
        w.EndArray();
      }
      if (st.batch) w.EndArray();
      return IoResponse{w.Take()};
    }
    BeginResponse(w, Envelope::kListWithCompletion, "classify", m.name);
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto& o = outs[i];
      size_t best = 0;
      for (size_t k = 1; k < o.values.size(); ++k) {
        if (o.values[k] > o.values[best]) best = k;
      }
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(i));
      w.KeyString("label", LabelOf(m, best));
      w.Key("probs");
      w.Floats(o.values.data(), o.values.size());
      w.Key("logits");
      w.Floats(o.raw.data(), o.raw.size());
      w.KeyInt("num_classes", static_cast<int64_t>(o.values.size()));
      if (!m.thresholds.empty()) {
        w.Key("labels");
        w.BeginArray();
        for (size_t k = 0; k < o.values.size() && k < m.thresholds.size(); ++k) {
          if (o.values[k] >= m.thresholds[k]) w.String(LabelOf(m, k));
        }
        w.EndArray();
      }
      w.EndObject();
    }
    EndResponse(w, Envelope::kListWithCompletion, st.prompt_tokens);
    return IoResponse{w.Take()};
  }

 private:
  ClassifyFlavor flavor_;
};

}  // namespace

std::unique_ptr<IoProcessor> MakeClassifyProcessor(ClassifyFlavor flavor) {
  return std::make_unique<ClassifyProcessor>(flavor);
}

}  // namespace sluice::io
