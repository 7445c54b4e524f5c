#include "pooling/head.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace sluice {

const char* PoolingName(PoolingKind p) {
  switch (p) {
    case PoolingKind::kCls:
      return "cls";
    case PoolingKind::kMean:
      return "mean";
    case PoolingKind::kMax:
      return "max";
    case PoolingKind::kLast:
      return "last";
    case PoolingKind::kAll:
      return "all";
    case PoolingKind::kStep:
      return "step";
  }
  return "?";
}

bool ParsePooling(std::string_view s, PoolingKind* out) {
  if (s == "cls")
    *out = PoolingKind::kCls;
  else if (s == "mean")
    *out = PoolingKind::kMean;
  else if (s == "max")
    *out = PoolingKind::kMax;
  else if (s == "last" || s == "lasttoken")
    *out = PoolingKind::kLast;
  else if (s == "all")
    *out = PoolingKind::kAll;
  else if (s == "step")
    *out = PoolingKind::kStep;
  else
    return false;
  return true;
}

const char* OutputActivationName(OutputActivation a) {
  switch (a) {
    case OutputActivation::kNone:
      return "none";
    case OutputActivation::kSigmoid:
      return "sigmoid";
    case OutputActivation::kSoftmax:
      return "softmax";
  }
  return "?";
}

namespace {

std::vector<float> ToF32(const HostTensor& t, int64_t row0 = 0, int64_t rows = -1) {
  const int64_t cols = t.shape.size() >= 2 ? t.shape[1] : t.numel();
  if (rows < 0) rows = t.shape.size() >= 2 ? t.shape[0] : 1;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const int64_t src = row0 * cols + i;
    switch (t.dtype) {
      case DType::kF32:
        out[i] = static_cast<const float*>(t.data)[src];
        break;
      case DType::kBF16:
        out[i] = BF16ToF32(static_cast<const uint16_t*>(t.data)[src]);
        break;
      case DType::kF16:
        out[i] = F16ToF32(static_cast<const uint16_t*>(t.data)[src]);
        break;
      default:
        out[i] = 0.f;
    }
  }
  return out;
}

StatusOr<HostLinear> LoadHostLinear(const WeightStore& w, const std::string& name, int out, int in,
                                    bool bias, const std::string& act) {
  HostLinear l;
  l.name = name;
  l.in = in;
  l.out = out;
  l.act = act;
  ASSIGN_OR_RETURN(HostTensor wt, w.Get(name + ".weight", {out, in}));
  l.weight = ToF32(wt);
  if (bias) {
    ASSIGN_OR_RETURN(HostTensor bt, w.Get(name + ".bias", {out}));
    l.bias = ToF32(bt);
  }
  return l;
}

// ModernBERT's prediction head (dense -> classifier_activation -> LayerNorm) as one layer.
StatusOr<HostLinear> LoadModernBertHead(const WeightStore& w, const ModelConfig& c) {
  const int H = c.hidden_size;
  ASSIGN_OR_RETURN(std::string act,
                   HostActivation(c.head_activation.empty() ? "gelu" : c.head_activation));
  ASSIGN_OR_RETURN(HostLinear l, LoadHostLinear(w, "head.dense", H, H, c.classifier_bias, act));
  ASSIGN_OR_RETURN(HostTensor nw, w.Get("head.norm.weight", {H}));
  l.norm_weight = ToF32(nw);
  if (c.norm_bias) {
    ASSIGN_OR_RETURN(HostTensor nb, w.Get("head.norm.bias", {H}));
    l.norm_bias = ToF32(nb);
  }
  l.norm_eps = static_cast<float>(c.norm_eps.value_or(1e-5));
  return l;
}

// sentence-transformers / torch activation class name -> host activation name.
StatusOr<std::string> TorchActivation(const std::string& name) {
  if (name.empty()) return std::string("tanh");  // ST Dense default
  const auto dot = name.rfind('.');
  const std::string cls = dot == std::string::npos ? name : name.substr(dot + 1);
  if (cls == "Tanh") return std::string("tanh");
  if (cls == "Identity") return std::string("none");
  if (cls == "ReLU") return std::string("relu");
  if (cls == "GELU") return std::string("gelu");
  if (cls == "Sigmoid") return std::string("sigmoid");
  return Unsupported("activation function " + name + " is not supported");
}

// Looks a token up in tokenizer.json (model.vocab and added_tokens).
std::optional<int> LookupVocabToken(const std::string& dir, const std::string& token) {
  const auto path = std::filesystem::path(dir) / "tokenizer.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.load(path.string()).get(doc)) return std::nullopt;
  simdjson::dom::array added;
  if (!doc["added_tokens"].get(added)) {
    for (auto t : added) {
      std::string_view content;
      int64_t id;
      if (!t["content"].get(content) && content == token && !t["id"].get(id)) {
        return static_cast<int>(id);
      }
    }
  }
  int64_t id;
  if (!doc["model"]["vocab"][token].get(id)) return static_cast<int>(id);
  return std::nullopt;
}

}  // namespace

StatusOr<HeadSpec> ResolveHead(const HeadResolveInput& in) {
  const ArchitectureInfo& arch = *in.arch;
  const ModelConfig& c = *in.config;
  const SluiceOverrides& ov = *in.overrides;
  const WeightStore& w = *in.weights;
  HeadSpec h;
  h.task = arch.default_task;
  if (arch.head != HeadKind::kNone && c.num_labels == 1) h.task = Task::kScore;
  if (ov.task) {
    Task t;
    if (!ParseTask(*ov.task, &t)) return InvalidArgument("sluice.json: unknown task " + *ov.task);
    h.task = t;
  }
  // A causal LM whose sluice.json names yes/no tokens is a causal-LM reranker.
  if (!ov.task && arch.default_task == Task::kGenerate &&
      (ov.yes_token || ov.no_token || ov.yes_token_id || ov.no_token_id)) {
    h.task = Task::kScore;
  }
  if (in.task) h.task = *in.task;
  if (h.task == Task::kGenerate) {
    if (arch.head != HeadKind::kLanguageModel) {
      return FailedPrecondition(arch.name + " has no language-model head; it cannot generate");
    }
    h.description = "language-model head (generation)";
    return h;
  }
  const int H = c.hidden_size;
  const PoolingKind first_or_last =
      arch.pooling == DefaultPooling::kLast ? PoolingKind::kLast : PoolingKind::kCls;
  std::string desc;

  const bool token_head =
      arch.head == HeadKind::kTokenClassifier || arch.head == HeadKind::kModernBertTokenClassifier;
  if (ov.late_interaction) {
    if (arch.head != HeadKind::kNone) {
      return FailedPrecondition("sluice.json: late_interaction needs a base model (" + arch.name +
                                " carries a head)");
    }
    if (in.task && *in.task != Task::kScore) {
      return FailedPrecondition("a late-interaction model (sluice.json) scores pairs: --task " +
                                std::string(TaskName(*in.task)) + " does not apply");
    }
    h.task = Task::kScore;
    h.late_interaction = true;
  }
  if (h.task == Task::kTokenClassify && !token_head) {
    return FailedPrecondition(arch.name +
                              " has no token-classification head (token-classify needs a "
                              "...ForTokenClassification checkpoint)");
  }
  if (token_head && (h.task == Task::kClassify || h.task == Task::kScore)) {
    return FailedPrecondition(arch.name + " classifies tokens: use --task token-classify");
  }
  if (arch.head == HeadKind::kNone) {
    if (h.task != Task::kEmbed && !h.late_interaction) {
      return FailedPrecondition(arch.name +
                                " has no classification head; it can only embed "
                                "(use --task embed)");
    }
    h.pooling = first_or_last;
    if (in.st && in.st->pooling) {
      const StPooling& p = *in.st->pooling;
      int modes = p.cls + p.mean + p.max + p.last_token + p.mean_sqrt_len + p.weighted_mean;
      if (modes != 1 || p.mean_sqrt_len || p.weighted_mean) {
        return Unsupported(
            "sentence-transformers Pooling with more than one mode, "
            "mean_sqrt_len or weightedmean is not supported");
      }
      h.pooling = p.cls    ? PoolingKind::kCls
                  : p.mean ? PoolingKind::kMean
                  : p.max  ? PoolingKind::kMax
                           : PoolingKind::kLast;
    }
    int dim = H;
    if (in.st) {
      for (const auto& d : in.st->dense) {
        if (d.in_features != dim) {
          return FailedPrecondition("Dense module " + d.dir + " expects " +
                                    std::to_string(d.in_features) + " inputs but gets " +
                                    std::to_string(dim));
        }
        ASSIGN_OR_RETURN(WeightStore dw, WeightStore::OpenDirectory(d.dir));
        ASSIGN_OR_RETURN(std::string act, TorchActivation(d.activation));
        ASSIGN_OR_RETURN(HostLinear l,
                         LoadHostLinear(dw, "linear", d.out_features, d.in_features, d.bias, act));
        l.name = d.dir;
        h.layers.push_back(std::move(l));
        dim = d.out_features;
      }
      h.st_normalize = in.st->normalize;
    }
    h.output_dim = dim;
    if (h.late_interaction) h.pooling = PoolingKind::kAll;
  } else {
    if (h.task == Task::kEmbed) {
      // Embedding from a classifier checkpoint: pooled hidden state, no head.
      h.pooling = first_or_last;
      h.output_dim = H;
    } else if (arch.head == HeadKind::kBertPoolerClassifier) {
      h.pooling = PoolingKind::kCls;
      ASSIGN_OR_RETURN(auto pooler,
                       LoadHostLinear(w, in.weight_prefix + "pooler.dense", H, H, true, "tanh"));
      h.layers.push_back(std::move(pooler));
      ASSIGN_OR_RETURN(auto cls, LoadHostLinear(w, "classifier", c.num_labels, H, true, "none"));
      h.layers.push_back(std::move(cls));
    } else if (arch.head == HeadKind::kRobertaClassifier) {
      h.pooling = PoolingKind::kCls;
      ASSIGN_OR_RETURN(auto dense, LoadHostLinear(w, "classifier.dense", H, H, true, "tanh"));
      h.layers.push_back(std::move(dense));
      ASSIGN_OR_RETURN(auto out,
                       LoadHostLinear(w, "classifier.out_proj", c.num_labels, H, true, "none"));
      h.layers.push_back(std::move(out));
    } else if (arch.head == HeadKind::kModernBertClassifier) {
      if (!c.classifier_pooling.empty() && c.classifier_pooling != "cls" &&
          c.classifier_pooling != "mean") {
        return Unsupported("classifier_pooling \"" + c.classifier_pooling +
                           "\" is not supported (cls, mean)");
      }
      h.pooling = c.classifier_pooling == "mean" ? PoolingKind::kMean : PoolingKind::kCls;
      ASSIGN_OR_RETURN(auto head, LoadModernBertHead(w, c));
      h.layers.push_back(std::move(head));
      ASSIGN_OR_RETURN(auto cls, LoadHostLinear(w, "classifier", c.num_labels, H, true, "none"));
      h.layers.push_back(std::move(cls));
    } else if (token_head) {
      h.pooling = PoolingKind::kAll;
      if (arch.head == HeadKind::kModernBertTokenClassifier) {
        ASSIGN_OR_RETURN(auto head, LoadModernBertHead(w, c));
        h.layers.push_back(std::move(head));
      }
      ASSIGN_OR_RETURN(auto cls, LoadHostLinear(w, "classifier", c.num_labels, H, true, "none"));
      h.layers.push_back(std::move(cls));
    } else if (arch.head == HeadKind::kScoreLast) {
      h.pooling = PoolingKind::kLast;
      ASSIGN_OR_RETURN(auto score, LoadHostLinear(w, "score", c.num_labels, H, false, "none"));
      h.layers.push_back(std::move(score));
    } else if (arch.head == HeadKind::kLanguageModel) {
      h.pooling = PoolingKind::kLast;
      h.yes_no = true;
      if (ov.yes_token_id) h.yes_token_id = *ov.yes_token_id;
      if (ov.no_token_id) h.no_token_id = *ov.no_token_id;
      const std::string yes = ov.yes_token.value_or("yes"), no = ov.no_token.value_or("no");
      if (h.yes_token_id < 0) h.yes_token_id = LookupVocabToken(c.dir, yes).value_or(-1);
      if (h.no_token_id < 0) h.no_token_id = LookupVocabToken(c.dir, no).value_or(-1);
      if (h.yes_token_id < 0 || h.no_token_id < 0) {
        return FailedPrecondition(
            "causal-LM reranker needs the token ids of \"" + yes + "\" and \"" + no +
            "\": not found in tokenizer.json; set yes_token_id/no_token_id in sluice.json");
      }
      for (int id : {h.yes_token_id, h.no_token_id}) {
        if (id >= c.vocab_size) return InvalidArgument("yes/no token id outside the vocabulary");
      }
      const std::string lm =
          w.Has("lm_head.weight") ? "lm_head.weight" : in.weight_prefix + "embed_tokens.weight";
      ASSIGN_OR_RETURN(HostTensor table, w.Get(lm, {c.vocab_size, H}));
      HostLinear rows;
      rows.name = lm + "[yes,no]";
      rows.in = H;
      rows.out = 2;
      rows.act = "none";
      for (int id : {h.yes_token_id, h.no_token_id}) {
        auto r = ToF32(table, id, 1);
        rows.weight.insert(rows.weight.end(), r.begin(), r.end());
      }
      h.layers.push_back(std::move(rows));
    } else {
      return Internal("unknown head kind of " + arch.name);
    }
    if (h.task != Task::kEmbed) {
      h.output_dim = h.yes_no ? 1 : c.num_labels;
      // Activation: sigmoid for one output or multi-label, softmax otherwise; tokens:
      // softmax (the token-classification pipeline's).
      h.activation = h.task != Task::kTokenClassify &&
                             (h.output_dim == 1 || c.problem_type == "multi_label_classification")
                         ? OutputActivation::kSigmoid
                         : OutputActivation::kSoftmax;
      if (!c.classifier_activation.empty()) {
        ASSIGN_OR_RETURN(std::string a, TorchActivation(c.classifier_activation));
        if (a == "none")
          h.activation = OutputActivation::kNone;
        else if (a == "sigmoid")
          h.activation = OutputActivation::kSigmoid;
        else
          return Unsupported("CrossEncoder activation " + c.classifier_activation);
      }
      h.labels = c.id2label;
      if (h.labels.empty() && !h.yes_no) {
        for (int i = 0; i < c.num_labels; ++i) h.labels.push_back("LABEL_" + std::to_string(i));
      }
      if (h.yes_no) h.labels = {"yes"};
    }
  }

  // sluice.json overrides.
  if (ov.pooling) {
    PoolingKind p;
    if (!ParsePooling(*ov.pooling, &p)) {
      return InvalidArgument("sluice.json: unknown pooling \"" + *ov.pooling + "\"");
    }
    h.pooling = p;
  }
  if (ov.activation) {
    if (*ov.activation == "sigmoid")
      h.activation = OutputActivation::kSigmoid;
    else if (*ov.activation == "softmax")
      h.activation = OutputActivation::kSoftmax;
    else if (*ov.activation == "none")
      h.activation = OutputActivation::kNone;
    else
      return InvalidArgument("sluice.json: unknown activation \"" + *ov.activation + "\"");
  }
  if (!ov.labels.empty()) {
    if (static_cast<int>(ov.labels.size()) != h.output_dim) {
      return InvalidArgument("sluice.json: " + std::to_string(ov.labels.size()) +
                             " labels for a head with " + std::to_string(h.output_dim) +
                             " outputs");
    }
    h.labels = ov.labels;
  }
  auto per_label = [&](const std::vector<float>& v,
                       const char* what) -> StatusOr<std::vector<float>> {
    if (v.empty()) return v;
    if (v.size() == 1) return std::vector<float>(h.output_dim, v[0]);
    if (static_cast<int>(v.size()) != h.output_dim) {
      return InvalidArgument(std::string("sluice.json: ") + what + " needs 1 or " +
                             std::to_string(h.output_dim) + " values");
    }
    return v;
  };
  if (!ov.calibration_mean.empty() || !ov.thresholds.empty()) {
    if (h.task == Task::kEmbed) {
      return InvalidArgument("sluice.json: calibration/thresholds apply to classify/score only");
    }
  }
  ASSIGN_OR_RETURN(h.calibration_mean, per_label(ov.calibration_mean, "calibration.mean"));
  ASSIGN_OR_RETURN(h.calibration_std, per_label(ov.calibration_std, "calibration.std"));
  ASSIGN_OR_RETURN(h.thresholds, per_label(ov.thresholds, "thresholds"));
  if (ov.step_token_id) h.step_token_id = *ov.step_token_id;
  if (h.pooling == PoolingKind::kStep && h.step_token_id < 0) {
    return InvalidArgument("STEP pooling needs step_token_id in sluice.json");
  }
  if ((h.pooling == PoolingKind::kAll || h.pooling == PoolingKind::kStep) &&
      h.task != Task::kEmbed && h.task != Task::kTokenClassify && !h.late_interaction) {
    return InvalidArgument("token-level pooling (all/step) only applies to embed/pooling tasks");
  }
  if (h.task == Task::kTokenClassify && h.pooling != PoolingKind::kAll) {
    return InvalidArgument(
        "token classification keeps every token: sluice.json pooling must be "
        "\"all\" (or absent)");
  }
  if (h.late_interaction && h.pooling != PoolingKind::kAll) {
    return InvalidArgument(
        "late interaction keeps every token: sluice.json pooling must be "
        "\"all\" (or absent)");
  }
  h.normalize = ov.normalize.value_or(true);

  desc = std::string("pooling=") + PoolingName(h.pooling);
  for (const auto& l : h.layers) {
    desc += " -> linear(" + l.name + ", " + std::to_string(l.in) + "->" + std::to_string(l.out) +
            (l.act != "none" ? ", " + l.act : "") + (l.norm_weight.empty() ? "" : ", layernorm") +
            ")";
  }
  if (h.yes_no) desc += " -> sigmoid(yes - no)";
  if (!h.calibration_mean.empty()) desc += " -> calibrate";
  if (h.task != Task::kEmbed && !h.yes_no)
    desc += std::string(" -> ") + OutputActivationName(h.activation);
  if (h.late_interaction) {
    desc += " -> normalize tokens -> MaxSim";
  } else if (h.task == Task::kEmbed) {
    desc += h.normalize ? " -> normalize (default)" : " (not normalised by default)";
  }
  h.description = desc;
  return h;
}

void L2Normalize(float* v, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
  // torch.nn.functional.normalize: x / max(||x||, 1e-12)
  const double norm = std::max(std::sqrt(ss), 1e-12);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] / norm);
}

void NormalizeRows(PooledOutput* out) {
  if (out->rows <= 0 || out->values.empty()) return;
  const int dim = static_cast<int>(out->values.size() / out->rows);
  for (int r = 0; r < out->rows; ++r)
    L2Normalize(out->values.data() + static_cast<size_t>(r) * dim, dim);
}

float MaxSim(const PooledOutput& q, const PooledOutput& d) {
  if (q.rows <= 0 || d.rows <= 0 || q.values.empty() || d.values.empty()) return 0.f;
  const size_t dim = q.values.size() / q.rows;
  double total = 0;
  for (int i = 0; i < q.rows; ++i) {
    const float* qi = q.values.data() + i * dim;
    double best = -INFINITY;
    for (int j = 0; j < d.rows; ++j) {
      const float* dj = d.values.data() + j * dim;
      double dot = 0;
      for (size_t k = 0; k < dim; ++k) dot += static_cast<double>(qi[k]) * dj[k];
      best = std::max(best, dot);
    }
    total += best;
  }
  return static_cast<float>(total);
}

void DropSkiplistRows(const std::vector<int32_t>& ids, const std::vector<int32_t>& skip,
                      PooledOutput* out) {
  if (out->rows <= 0 || static_cast<size_t>(out->rows) != ids.size() || out->values.empty()) {
    return;
  }
  const size_t dim = out->values.size() / static_cast<size_t>(out->rows);
  size_t kept = 0;
  out->token_indices.clear();
  for (size_t r = 0; r < ids.size(); ++r) {
    if (std::binary_search(skip.begin(), skip.end(), ids[r])) continue;
    if (kept != r) {
      std::copy_n(out->values.begin() + static_cast<long>(r * dim), dim,
                  out->values.begin() + static_cast<long>(kept * dim));
    }
    out->token_indices.push_back(static_cast<int32_t>(r));
    ++kept;
  }
  out->values.resize(kept * dim);
  out->rows = static_cast<int>(kept);
}

StatusOr<std::string> HostActivation(const std::string& a) {
  if (a == "gelu" || a == "gelu_python") return std::string("gelu");
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") {
    return std::string("gelu_tanh");
  }
  if (a == "relu") return std::string("relu");
  if (a == "silu" || a == "swish") return std::string("silu");
  if (a == "tanh") return std::string("tanh");
  if (a == "sigmoid") return std::string("sigmoid");
  if (a == "linear" || a == "identity" || a == "none") return std::string("none");
  return Unsupported("activation \"" + a +
                     "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu, "
                     "tanh, sigmoid, linear)");
}

float ApplyHostActivation(const std::string& act, float x) {
  if (act == "tanh") return std::tanh(x);
  if (act == "relu") return x > 0 ? x : 0;
  if (act == "gelu") return 0.5f * x * (1.f + std::erf(x / std::sqrt(2.f)));
  if (act == "gelu_tanh") {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
  }
  if (act == "silu") return x / (1.f + std::exp(-x));
  if (act == "sigmoid") return 1.f / (1.f + std::exp(-x));
  return x;
}

namespace {

// The activation and LayerNorm of layer l on y (its matrix product's output), in place.
void Finish(const HostLinear& l, float* y) {
  for (int o = 0; o < l.out; ++o) y[o] = ApplyHostActivation(l.act, y[o]);
  if (l.norm_weight.empty()) return;
  double mean = 0, var = 0;
  for (int o = 0; o < l.out; ++o) mean += y[o];
  mean /= l.out;
  for (int o = 0; o < l.out; ++o) var += (y[o] - mean) * (y[o] - mean);
  var /= l.out;
  const double rstd = 1.0 / std::sqrt(var + l.norm_eps);
  for (int o = 0; o < l.out; ++o) {
    y[o] = static_cast<float>((y[o] - mean) * rstd * l.norm_weight[o] +
                              (l.norm_bias.empty() ? 0.0 : l.norm_bias[o]));
  }
}

void HostLinearApply(const HostLinear& l, const float* x, float* y) {
  for (int o = 0; o < l.out; ++o) {
    const float* wr = l.weight.data() + static_cast<size_t>(o) * l.in;
    double acc = l.bias.empty() ? 0.0 : l.bias[o];
    for (int i = 0; i < l.in; ++i) acc += static_cast<double>(wr[i]) * x[i];
    y[o] = static_cast<float>(acc);
  }
  Finish(l, y);
}

// Calibration and the output activation of one row of logits (classification heads).
void Activate(const HeadSpec& spec, std::vector<float>* a, PooledOutput* o) {
  for (size_t i = 0; i < spec.calibration_mean.size() && i < a->size(); ++i) {
    (*a)[i] = ((*a)[i] - spec.calibration_mean[i]) / spec.calibration_std[i];
  }
  o->raw.insert(o->raw.end(), a->begin(), a->end());
  const size_t base = o->values.size();
  o->values.insert(o->values.end(), a->begin(), a->end());
  float* v = o->values.data() + base;
  const size_t n = a->size();
  if (spec.yes_no || spec.activation == OutputActivation::kSigmoid) {
    for (size_t i = 0; i < n; ++i) v[i] = 1.f / (1.f + std::exp(-v[i]));
  } else if (spec.activation == OutputActivation::kSoftmax) {
    float mx = v[0];
    for (size_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(v[i] - mx));
    for (size_t i = 0; i < n; ++i) {
      v[i] = static_cast<float>(std::exp(static_cast<double>(v[i] - mx)) / sum);
    }
  }
}

}  // namespace

void HeadRunner::Apply(const float* pooled, int n, int hidden, PooledOutput* outs) const {
  std::vector<float> a, b;
  for (int r = 0; r < n; ++r) {
    a.assign(pooled + static_cast<size_t>(r) * hidden,
             pooled + static_cast<size_t>(r + 1) * hidden);
    if (first_layer_ > 0) Finish(spec_.layers[first_layer_ - 1], a.data());
    for (size_t li = first_layer_; li < spec_.layers.size(); ++li) {
      const auto& l = spec_.layers[li];
      b.resize(l.out);
      HostLinearApply(l, a.data(), b.data());
      a.swap(b);
    }
    PooledOutput& o = outs[r];
    o.rows = 1;
    o.values.clear();
    o.raw.clear();
    if (spec_.task == Task::kEmbed) {
      o.values = a;
      continue;
    }
    if (spec_.yes_no) a = {a[0] - a[1]};
    Activate(spec_, &a, &o);
  }
}

void HeadRunner::ApplyTokens(const float* rows, int n, int width, PooledOutput* out) const {
  out->rows = n;
  out->values.clear();
  out->raw.clear();
  if (spec_.task != Task::kTokenClassify) {
    out->values.assign(rows, rows + static_cast<size_t>(n) * width);
    if (!spec_.layers.empty()) {
      const std::string& act = spec_.layers.back().act;
      if (!DeviceActivation(act, nullptr)) {
        for (auto& v : out->values) v = ApplyHostActivation(act, v);
      }
    }
    if (spec_.late_interaction) NormalizeRows(out);
    return;
  }
  out->values.reserve(static_cast<size_t>(n) * width);
  out->raw.reserve(static_cast<size_t>(n) * width);
  std::vector<float> a;
  const std::string& act = spec_.layers.back().act;
  const bool host_act = !DeviceActivation(act, nullptr);
  for (int r = 0; r < n; ++r) {
    a.assign(rows + static_cast<size_t>(r) * width, rows + static_cast<size_t>(r + 1) * width);
    if (host_act) {
      for (auto& v : a) v = ApplyHostActivation(act, v);
    }
    Activate(spec_, &a, out);
  }
}

bool DeviceActivation(const std::string& act, Activation* out) {
  Activation a;
  if (act == "none")
    a = Activation::kNone;
  else if (act == "gelu")
    a = Activation::kGeluErf;
  else if (act == "gelu_tanh")
    a = Activation::kGeluTanh;
  else if (act == "relu")
    a = Activation::kRelu;
  else if (act == "silu")
    a = Activation::kSilu;
  else
    return false;
  if (out) *out = a;
  return true;
}

}  // namespace sluice
