#include "weights/config.h"

#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace sluice {

namespace fs = std::filesystem;
using simdjson::dom::element;
using simdjson::dom::object;

namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Field readers: absent or null -> leave *out unchanged; wrong type -> error.
class Fields {
 public:
  Fields(object obj, std::string origin) : obj_(obj), origin_(std::move(origin)) {}

  Status Int(const char* key, int* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    int64_t v;
    if (e.get(v)) return Bad(key, "an integer");
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status OptInt(const char* key, std::optional<int>* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    int64_t v;
    if (e.get(v)) {
      // Some configs store a list (e.g. several eos ids); take the first.
      simdjson::dom::array arr;
      if (!e.get(arr) && arr.size() > 0 && !arr.at(0).get(v)) {
        *out = static_cast<int>(v);
        return Status::Ok();
      }
      return Bad(key, "an integer");
    }
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status Double(const char* key, double* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    double v;
    if (e.get(v)) return Bad(key, "a number");
    *out = v;
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    bool v;
    if (e.get(v)) return Bad(key, "a boolean");
    *out = v;
    return Status::Ok();
  }
  // An integer or a list of integers (token ids), each >= 0.
  Status IntOrInts(const char* key, std::vector<int>* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    out->clear();
    int64_t v;
    if (!e.get(v)) {
      if (v < 0 || v > INT32_MAX) return Bad(key, "a token id or a list of token ids");
      out->push_back(static_cast<int>(v));
      return Status::Ok();
    }
    simdjson::dom::array arr;
    if (e.get(arr)) return Bad(key, "a token id or a list of token ids");
    for (auto x : arr) {
      if (x.get(v) || v < 0 || v > INT32_MAX) return Bad(key, "a token id or a list of token ids");
      out->push_back(static_cast<int>(v));
    }
    return Status::Ok();
  }
  // A list of positive integers.
  Status Ints(const char* key, std::vector<int>* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    simdjson::dom::array arr;
    if (e.get(arr)) return Bad(key, "a list of positive integers");
    out->clear();
    for (auto x : arr) {
      int64_t v;
      if (x.get(v) || v < 1 || v > INT32_MAX) return Bad(key, "a list of positive integers");
      out->push_back(static_cast<int>(v));
    }
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) const {
    element e;
    if (!Get(key, &e)) return Status::Ok();
    std::string_view v;
    if (e.get(v)) return Bad(key, "a string");
    *out = std::string(v);
    return Status::Ok();
  }
  bool Get(const char* key, element* out) const {
    element e;
    if (obj_[key].get(e)) return false;
    if (e.is_null()) return false;
    *out = e;
    return true;
  }
  Status Bad(const char* key, const char* what) const {
    return InvalidArgument(origin_ + ": field \"" + key + "\" must be " + what);
  }

 private:
  object obj_;
  std::string origin_;
};

Status ParseDTypeField(const Fields& f, std::optional<DType>* out, const std::string& origin) {
  std::string s;
  RETURN_IF_ERROR(f.String("dtype", &s));                       // transformers 5.x
  if (s.empty()) RETURN_IF_ERROR(f.String("torch_dtype", &s));  // 4.x
  if (s.empty()) return Status::Ok();
  DType t;
  if (!ParseDType(s, &t) || t == DType::kI8) {  // int8 is a compute dtype, not a checkpoint's
    return Unsupported(origin + ": unsupported checkpoint dtype \"" + s +
                       "\" (supported: float32, float16, bfloat16)");
  }
  *out = t;
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view json, const std::string& origin) {
  simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(json.data(), json.size()).get(doc)) {
    return InvalidArgument(origin + ": invalid JSON: " + simdjson::error_message(err));
  }
  object obj;
  if (doc.get(obj)) return InvalidArgument(origin + ": not a JSON object");
  Fields f(obj, origin);
  ModelConfig c;

  element archs;
  if (f.Get("architectures", &archs)) {
    simdjson::dom::array arr;
    std::string_view a;
    if (archs.get(arr) || arr.size() == 0 || arr.at(0).get(a)) {
      return InvalidArgument(origin + ": \"architectures\" must be a non-empty list of strings");
    }
    c.architecture = std::string(a);
  }
  RETURN_IF_ERROR(f.String("model_type", &c.model_type));
  RETURN_IF_ERROR(ParseDTypeField(f, &c.dtype, origin));
  RETURN_IF_ERROR(f.Int("vocab_size", &c.vocab_size));
  RETURN_IF_ERROR(f.Int("hidden_size", &c.hidden_size));
  RETURN_IF_ERROR(f.Int("num_hidden_layers", &c.num_hidden_layers));
  RETURN_IF_ERROR(f.Int("num_attention_heads", &c.num_attention_heads));
  RETURN_IF_ERROR(f.Int("num_key_value_heads", &c.num_key_value_heads));
  RETURN_IF_ERROR(f.Int("head_dim", &c.head_dim));
  RETURN_IF_ERROR(f.Int("intermediate_size", &c.intermediate_size));
  RETURN_IF_ERROR(f.Int("max_position_embeddings", &c.max_position_embeddings));
  RETURN_IF_ERROR(f.Int("type_vocab_size", &c.type_vocab_size));
  RETURN_IF_ERROR(f.OptInt("pad_token_id", &c.pad_token_id));
  RETURN_IF_ERROR(f.OptInt("bos_token_id", &c.bos_token_id));
  RETURN_IF_ERROR(f.IntOrInts("eos_token_id", &c.eos_token_ids));
  RETURN_IF_ERROR(f.String("hidden_act", &c.hidden_act));
  RETURN_IF_ERROR(f.String("hidden_activation", &c.hidden_act));
  RETURN_IF_ERROR(f.Double("layer_norm_eps", &c.layer_norm_eps));
  RETURN_IF_ERROR(f.Double("rms_norm_eps", &c.rms_norm_eps));
  RETURN_IF_ERROR(f.Double("rope_theta", &c.rope_theta));  // transformers 4.x
  element rope;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {  // 5.x / 4.x
    if (f.Get(key, &rope)) {
      object ro;
      if (rope.get(ro)) return InvalidArgument(origin + ": \"" + key + "\" must be an object");
      Fields rf(ro, origin + " " + key);
      RETURN_IF_ERROR(rf.Double("rope_theta", &c.rope_theta));
      RETURN_IF_ERROR(rf.String("rope_type", &c.rope_type));
      RETURN_IF_ERROR(rf.String("type", &c.rope_type));
      RETURN_IF_ERROR(rf.Double("factor", &c.rope_factor));
      RETURN_IF_ERROR(rf.Double("low_freq_factor", &c.rope_low_freq_factor));
      RETURN_IF_ERROR(rf.Double("high_freq_factor", &c.rope_high_freq_factor));
      RETURN_IF_ERROR(rf.Int("original_max_position_embeddings", &c.rope_original_max_position));
    }
  }
  // ModernBERT: 5.x nests one rope_parameters object per layer type.
  if (f.Get("rope_parameters", &rope)) {
    for (const char* type : {"full_attention", "sliding_attention"}) {
      element sub;
      object so;
      if (rope[type].get(sub) || sub.get(so)) continue;
      Fields sf(so, origin + " rope_parameters." + type);
      double theta = 0;
      RETURN_IF_ERROR(sf.Double("rope_theta", &theta));
      std::string rope_type;
      RETURN_IF_ERROR(sf.String("rope_type", &rope_type));
      if (!rope_type.empty() && rope_type != "default") c.rope_type = rope_type;
      if (theta > 0) {
        (std::string(type) == "full_attention" ? c.global_rope_theta : c.local_rope_theta) = theta;
      }
    }
  }
  double theta = 0;
  RETURN_IF_ERROR(f.Double("global_rope_theta", &theta));  // 4.x
  if (theta > 0) c.global_rope_theta = theta;
  theta = 0;
  RETURN_IF_ERROR(f.Double("local_rope_theta", &theta));
  if (theta > 0) c.local_rope_theta = theta;
  RETURN_IF_ERROR(f.Int("global_attn_every_n_layers", &c.global_attn_every_n_layers));
  RETURN_IF_ERROR(f.Int("local_attention", &c.local_attention));
  double norm_eps = 0;
  RETURN_IF_ERROR(f.Double("norm_eps", &norm_eps));
  if (norm_eps > 0) c.norm_eps = norm_eps;
  RETURN_IF_ERROR(f.Bool("norm_bias", &c.norm_bias));
  RETURN_IF_ERROR(f.Bool("classifier_bias", &c.classifier_bias));
  RETURN_IF_ERROR(f.String("classifier_pooling", &c.classifier_pooling));
  RETURN_IF_ERROR(f.String("classifier_activation", &c.head_activation));
  RETURN_IF_ERROR(f.String("position_embedding_type", &c.position_embedding_type));
  RETURN_IF_ERROR(f.Bool("attention_bias", &c.attention_bias));
  RETURN_IF_ERROR(f.Bool("mlp_bias", &c.mlp_bias));
  RETURN_IF_ERROR(f.Int("max_window_layers", &c.max_window_layers));
  element layer_types;
  if (f.Get("layer_types", &layer_types)) {
    simdjson::dom::array arr;
    if (layer_types.get(arr)) return InvalidArgument(origin + ": \"layer_types\" must be a list");
    for (auto x : arr) {
      std::string_view t;
      if (x.get(t)) return InvalidArgument(origin + ": \"layer_types\" must hold strings");
      c.layer_types.emplace_back(t);
    }
  }
  RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  RETURN_IF_ERROR(f.Bool("use_sliding_window", &c.use_sliding_window));
  RETURN_IF_ERROR(f.Int("sliding_window", &c.sliding_window));
  RETURN_IF_ERROR(f.String("problem_type", &c.problem_type));

  // Labels: id2label {"0": "neg", "1": "pos"} wins over num_labels.
  RETURN_IF_ERROR(f.Int("num_labels", &c.num_labels));
  element id2label;
  if (f.Get("id2label", &id2label)) {
    object lo;
    if (id2label.get(lo)) return InvalidArgument(origin + ": \"id2label\" must be an object");
    std::map<int, std::string> labels;
    for (auto kv : lo) {
      std::string_view name;
      if (kv.value.get(name)) return InvalidArgument(origin + ": id2label values must be strings");
      int idx = -1;
      try {
        idx = std::stoi(std::string(kv.key));
      } catch (...) {
        return InvalidArgument(origin + ": id2label key \"" + std::string(kv.key) +
                               "\" is not an integer");
      }
      labels[idx] = std::string(name);
    }
    int n = static_cast<int>(labels.size());
    for (int i = 0; i < n; ++i) {
      if (!labels.count(i)) {
        return InvalidArgument(origin + ": id2label is missing index " + std::to_string(i));
      }
      c.id2label.push_back(labels[i]);
    }
    c.num_labels = n;
  }
  // transformers' default is 2 labels, and it omits num_labels/id2label from config.json
  // when they are the default (LABEL_0, LABEL_1).
  if (c.num_labels == 0) c.num_labels = 2;
  if (c.id2label.empty()) {
    for (int i = 0; i < c.num_labels; ++i) c.id2label.push_back("LABEL_" + std::to_string(i));
  }
  // sentence-transformers CrossEncoder activation, written into config.json.
  element st;
  if (f.Get("sentence_transformers", &st)) {
    object so;
    if (!st.get(so))
      RETURN_IF_ERROR(Fields(so, origin).String("activation_fn", &c.classifier_activation));
  }
  RETURN_IF_ERROR(f.String("sbert_ce_default_activation_function", &c.classifier_activation));
  RETURN_IF_ERROR(f.Bool("is_matryoshka", &c.is_matryoshka));
  RETURN_IF_ERROR(f.Ints("matryoshka_dimensions", &c.matryoshka_dimensions));

  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.head_dim == 0 && c.num_attention_heads > 0) {
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  return c;
}

StatusOr<GenerationConfig> ParseGenerationConfig(std::string_view json, const std::string& origin) {
  simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(json.data(), json.size()).get(doc)) {
    return InvalidArgument(origin + ": invalid JSON: " + simdjson::error_message(err));
  }
  object obj;
  if (doc.get(obj)) return InvalidArgument(origin + ": not a JSON object");
  Fields f(obj, origin);
  GenerationConfig g;
  g.present = true;
  RETURN_IF_ERROR(f.IntOrInts("eos_token_id", &g.eos_token_ids));
  RETURN_IF_ERROR(f.OptInt("bos_token_id", &g.bos_token_id));
  RETURN_IF_ERROR(f.OptInt("pad_token_id", &g.pad_token_id));
  RETURN_IF_ERROR(f.Bool("do_sample", &g.do_sample));
  RETURN_IF_ERROR(f.Double("temperature", &g.temperature));
  RETURN_IF_ERROR(f.Double("top_p", &g.top_p));
  RETURN_IF_ERROR(f.Int("top_k", &g.top_k));
  RETURN_IF_ERROR(f.Double("min_p", &g.min_p));
  RETURN_IF_ERROR(f.Double("repetition_penalty", &g.repetition_penalty));
  RETURN_IF_ERROR(f.OptInt("max_new_tokens", &g.max_new_tokens));
  if (g.temperature < 0 || g.top_p <= 0 || g.top_p > 1 || g.top_k < 0 || g.min_p < 0 ||
      g.min_p > 1 || g.repetition_penalty <= 0) {
    return InvalidArgument(origin +
                           ": temperature >= 0, 0 < top_p <= 1, top_k >= 0, 0 <= min_p <= 1 "
                           "and repetition_penalty > 0 are required");
  }
  return g;
}

StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "generation_config.json").string();
  if (!fs::exists(path)) return GenerationConfig{};
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseGenerationConfig(text, path);
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(path)) return NotFound("no config.json in model directory " + dir);
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(text, path));
  c.dir = dir;
  return c;
}

namespace {

// "sentence_transformers.models.Pooling" (2.x-5.x),
// "sentence_transformers.sentence_transformer.models.Pooling" (6.x) -> "Pooling".
std::string StModuleKind(std::string_view type) {
  if (type.rfind("sentence_transformers.", 0) != 0) return "";
  auto dot = type.rfind('.');
  return std::string(type.substr(dot + 1));
}

Status ParsePoolingConfig(const std::string& path, StPooling* p) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  simdjson::dom::parser parser;
  element doc;
  object o;
  if (parser.parse(text).get(doc) || doc.get(o)) return InvalidArgument(path + ": invalid JSON");
  Fields f(o, path);
  RETURN_IF_ERROR(f.Bool("pooling_mode_cls_token", &p->cls));
  RETURN_IF_ERROR(f.Bool("pooling_mode_mean_tokens", &p->mean));
  RETURN_IF_ERROR(f.Bool("pooling_mode_max_tokens", &p->max));
  RETURN_IF_ERROR(f.Bool("pooling_mode_mean_sqrt_len_tokens", &p->mean_sqrt_len));
  RETURN_IF_ERROR(f.Bool("pooling_mode_weightedmean_tokens", &p->weighted_mean));
  RETURN_IF_ERROR(f.Bool("pooling_mode_lasttoken", &p->last_token));
  RETURN_IF_ERROR(f.Bool("include_prompt", &p->include_prompt));
  std::string mode;
  RETURN_IF_ERROR(f.String("pooling_mode", &mode));
  if (mode == "cls")
    p->cls = true;
  else if (mode == "mean")
    p->mean = true;
  else if (mode == "max")
    p->max = true;
  else if (mode == "lasttoken")
    p->last_token = true;
  else if (!mode.empty())
    return Unsupported(path + ": unsupported pooling_mode \"" + mode + "\"");
  return Status::Ok();
}

Status ParseDenseConfig(const std::string& dir, StDense* d) {
  const std::string path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  simdjson::dom::parser parser;
  element doc;
  object o;
  if (parser.parse(text).get(doc) || doc.get(o)) return InvalidArgument(path + ": invalid JSON");
  Fields f(o, path);
  d->dir = dir;
  RETURN_IF_ERROR(f.Int("in_features", &d->in_features));
  RETURN_IF_ERROR(f.Int("out_features", &d->out_features));
  RETURN_IF_ERROR(f.Bool("bias", &d->bias));
  RETURN_IF_ERROR(f.String("activation_function", &d->activation));
  if (d->in_features <= 0 || d->out_features <= 0) {
    return InvalidArgument(path + ": Dense module needs positive in_features and out_features");
  }
  return Status::Ok();
}

// A JSON list of strings (`what` names it in the error).
StatusOr<std::vector<std::string>> StringList(element e, const std::string& what) {
  simdjson::dom::array a;
  if (e.get(a)) return InvalidArgument(what + " must be a list of strings");
  std::vector<std::string> out;
  for (auto x : a) {
    std::string_view s;
    if (x.get(s)) return InvalidArgument(what + " must be a list of strings");
    out.emplace_back(s);
  }
  return out;
}

// PyLate's ColBERT settings (config_sentence_transformers.json); the file's other fields
// (versions, prompts) are not ours.
Status ReadPylateSettings(const std::string& dir, SentenceTransformersConfig* st) {
  const fs::path stc = fs::path(dir) / "config_sentence_transformers.json";
  if (!fs::exists(stc)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string sc, ReadFile(stc.string()));
  simdjson::dom::parser parser;
  element cd;
  object co;
  if (parser.parse(sc).get(cd) || cd.get(co)) {
    return InvalidArgument(stc.string() + ": invalid JSON object");
  }
  Fields cf(co, stc.string());
  element e;
  RETURN_IF_ERROR(cf.OptInt("query_length", &st->query_length));
  RETURN_IF_ERROR(cf.Bool("do_query_expansion", &st->do_query_expansion));
  if (cf.Get("attend_to_expansion_tokens", &e)) {
    bool b = false;
    RETURN_IF_ERROR(cf.Bool("attend_to_expansion_tokens", &b));
    st->attend_to_expansion_tokens = b;
  }
  for (auto [key, out] : {std::pair{"query_prefix", &st->query_prefix},
                          std::pair{"document_prefix", &st->document_prefix}}) {
    if (!cf.Get(key, &e) || e.is_null()) continue;  // PyLate writes null for "no prefix" too
    std::string v;
    RETURN_IF_ERROR(cf.String(key, &v));
    *out = v;
  }
  if (cf.Get("document_length", &e) && !e.is_null()) {
    RETURN_IF_ERROR(cf.OptInt("document_length", &st->document_length));
  }
  if (cf.Get("skiplist_words", &e)) {
    ASSIGN_OR_RETURN(st->skiplist_words, StringList(e, stc.string() + ": skiplist_words"));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<SentenceTransformersConfig> LoadSentenceTransformersConfig(const std::string& dir) {
  SentenceTransformersConfig st;
  RETURN_IF_ERROR(ReadPylateSettings(dir, &st));
  const fs::path modules = fs::path(dir) / "modules.json";
  if (!fs::exists(modules)) return st;
  st.present = true;
  ASSIGN_OR_RETURN(std::string text, ReadFile(modules.string()));
  simdjson::dom::parser parser;
  element doc;
  simdjson::dom::array arr;
  if (parser.parse(text).get(doc) || doc.get(arr)) {
    return InvalidArgument(modules.string() + ": must be a JSON list of modules");
  }
  std::vector<std::pair<std::string, std::string>> mods;  // (kind, path)
  for (auto m : arr) {
    std::string_view type, path;
    if (m["type"].get(type)) return InvalidArgument(modules.string() + ": module without \"type\"");
    if (m["path"].get(path)) path = "";
    mods.emplace_back(std::string(type), std::string(path));
  }
  for (const auto& [type, path] : mods) {
    st.module_types.push_back(type);
    const std::string kind = StModuleKind(type);
    const std::string mdir = (fs::path(dir) / path).string();
    if (kind == "Transformer") {
      // The transformer itself is the model directory's config.json + weights.
    } else if (kind == "Pooling") {
      StPooling p;
      RETURN_IF_ERROR(ParsePoolingConfig((fs::path(mdir) / "config.json").string(), &p));
      st.pooling = p;
    } else if (kind == "Dense") {
      StDense d;
      RETURN_IF_ERROR(ParseDenseConfig(mdir, &d));
      st.dense.push_back(d);
    } else if (kind == "Normalize") {
      st.normalize = true;
    } else {
      return Unsupported(modules.string() + ": sentence-transformers module type \"" + type +
                         "\" is not supported (supported: Transformer, Pooling, Dense, Normalize)");
    }
  }
  const fs::path sbert = fs::path(dir) / "sentence_bert_config.json";
  if (fs::exists(sbert)) {
    ASSIGN_OR_RETURN(std::string sb, ReadFile(sbert.string()));
    element sd;
    object so;
    if (parser.parse(sb).get(sd) || sd.get(so)) {
      return InvalidArgument(sbert.string() + ": invalid JSON");
    }
    RETURN_IF_ERROR(Fields(so, sbert.string()).Int("max_seq_length", &st.max_seq_length));
  }
  return st;
}

StatusOr<SluiceOverrides> LoadSluiceOverrides(const std::string& dir) {
  SluiceOverrides o;
  const fs::path path = fs::path(dir) / "sluice.json";
  if (!fs::exists(path)) return o;
  ASSIGN_OR_RETURN(std::string text, ReadFile(path.string()));
  simdjson::dom::parser parser;
  element doc;
  object obj;
  if (parser.parse(text).get(doc) || doc.get(obj)) {
    return InvalidArgument(path.string() + ": invalid JSON object");
  }
  const std::string origin = path.string();
  Fields f(obj, origin);
  static const char* kKnown[] = {"task",           "pooling",
                                 "activation",     "calibration",
                                 "labels",         "thresholds",
                                 "yes_token",      "no_token",
                                 "yes_token_id",   "no_token_id",
                                 "instruction",    "step_token_id",
                                 "is_matryoshka",  "matryoshka_dimensions",
                                 "normalize",      "late_interaction",
                                 "query_prefix",   "document_prefix",
                                 "absa",           "plugins",
                                 "query_length",   "attend_to_expansion_tokens",
                                 "skiplist_words", "document_length"};
  for (auto kv : obj) {
    bool known = false;
    for (const char* k : kKnown) known |= kv.key == k;
    if (!known) {
      return InvalidArgument(origin + ": unknown field \"" + std::string(kv.key) + "\"");
    }
  }
  auto opt_string = [&](const char* key, std::optional<std::string>* out) -> Status {
    std::string s;
    RETURN_IF_ERROR(f.String(key, &s));
    if (!s.empty()) *out = s;
    return Status::Ok();
  };
  RETURN_IF_ERROR(opt_string("task", &o.task));
  RETURN_IF_ERROR(opt_string("pooling", &o.pooling));
  RETURN_IF_ERROR(opt_string("activation", &o.activation));
  RETURN_IF_ERROR(opt_string("yes_token", &o.yes_token));
  RETURN_IF_ERROR(opt_string("no_token", &o.no_token));
  RETURN_IF_ERROR(opt_string("instruction", &o.instruction));
  RETURN_IF_ERROR(f.OptInt("yes_token_id", &o.yes_token_id));
  RETURN_IF_ERROR(f.OptInt("no_token_id", &o.no_token_id));
  RETURN_IF_ERROR(f.OptInt("step_token_id", &o.step_token_id));
  bool matryoshka = false;
  element e_matryoshka;
  if (f.Get("is_matryoshka", &e_matryoshka)) {
    RETURN_IF_ERROR(f.Bool("is_matryoshka", &matryoshka));
    o.is_matryoshka = matryoshka;
  }
  RETURN_IF_ERROR(f.Ints("matryoshka_dimensions", &o.matryoshka_dimensions));
  element e_normalize;
  if (f.Get("normalize", &e_normalize)) {
    bool normalize = true;
    RETURN_IF_ERROR(f.Bool("normalize", &normalize));
    o.normalize = normalize;
  }
  RETURN_IF_ERROR(f.Bool("late_interaction", &o.late_interaction));
  for (auto [key, out] : {std::pair{"query_prefix", &o.query_prefix},
                          std::pair{"document_prefix", &o.document_prefix}}) {
    element e_prefix;
    if (!f.Get(key, &e_prefix)) continue;
    std::string v;
    RETURN_IF_ERROR(f.String(key, &v));
    *out = v;
  }
  RETURN_IF_ERROR(f.OptInt("document_length", &o.document_length));
  RETURN_IF_ERROR(f.OptInt("query_length", &o.query_length));
  element e_attend;
  if (f.Get("attend_to_expansion_tokens", &e_attend)) {
    bool attend = false;
    RETURN_IF_ERROR(f.Bool("attend_to_expansion_tokens", &attend));
    o.attend_to_expansion_tokens = attend;
  }
  element e_skip;
  if (f.Get("skiplist_words", &e_skip)) {
    ASSIGN_OR_RETURN(o.skiplist_words, StringList(e_skip, origin + ": skiplist_words"));
  }
  element plugins;
  if (f.Get("plugins", &plugins)) {
    simdjson::dom::array pa;
    if (plugins.get(pa)) {
      return InvalidArgument(origin + ": \"plugins\" must be a list of shared-library paths");
    }
    for (auto x : pa) {
      std::string_view v;
      if (x.get(v) || v.empty()) {
        return InvalidArgument(origin + ": \"plugins\" must be a list of shared-library paths");
      }
      const fs::path pp(v);
      o.plugins.push_back(pp.is_absolute() ? pp.string() : (fs::path(dir) / pp).string());
    }
  }
  element absa;
  if (f.Get("absa", &absa)) {
    object ao;
    if (absa.get(ao)) return InvalidArgument(origin + ": \"absa\" must be an object");
    SluiceOverrides::Absa a;
    Fields af(ao, origin + " absa");
    for (auto kv : ao) {
      if (kv.key != "sentiments" && kv.key != "aggregation" && kv.key != "max_aspects" &&
          kv.key != "sentiment_model") {
        return InvalidArgument(origin + ": unknown field \"absa." + std::string(kv.key) +
                               "\" (sentiments, aggregation, max_aspects, sentiment_model)");
      }
    }
    element sent;
    if (af.Get("sentiments", &sent)) {
      object so;
      if (sent.get(so)) return InvalidArgument(origin + ": absa.sentiments must be an object");
      for (auto kv : so) {
        std::string_view v;
        if (kv.value.get(v)) {
          return InvalidArgument(origin + ": absa.sentiments values must be strings");
        }
        a.sentiments.emplace_back(std::string(kv.key), std::string(v));
      }
    }
    RETURN_IF_ERROR(af.String("aggregation", &a.aggregation));
    if (a.aggregation != "first" && a.aggregation != "average" && a.aggregation != "max" &&
        a.aggregation != "simple") {
      return InvalidArgument(origin + ": absa.aggregation must be first, average, max or simple");
    }
    RETURN_IF_ERROR(af.Int("max_aspects", &a.max_aspects));
    if (a.max_aspects < 1) return InvalidArgument(origin + ": absa.max_aspects must be >= 1");
    element sm;
    if (af.Get("sentiment_model", &sm)) {
      std::string_view v;
      if (sm.get(v) || v.empty()) {
        return InvalidArgument(origin +
                               ": absa.sentiment_model must be a model directory (a string)");
      }
      const fs::path mp(v);
      a.sentiment_model = mp.is_absolute() ? mp.string() : (fs::path(dir) / mp).string();
    }
    o.absa = std::move(a);
  }
  auto floats = [&](element e, const std::string& what, std::vector<float>* out) -> Status {
    simdjson::dom::array a;
    double dv;
    if (!e.get(dv)) {
      out->push_back(static_cast<float>(dv));
      return Status::Ok();
    }
    if (e.get(a)) return InvalidArgument(origin + ": " + what + " must be a number or list");
    for (auto x : a) {
      if (x.get(dv)) return InvalidArgument(origin + ": " + what + " must hold numbers");
      out->push_back(static_cast<float>(dv));
    }
    return Status::Ok();
  };
  element cal;
  if (f.Get("calibration", &cal)) {
    element mean, std;
    if (cal["mean"].get(mean) || cal["std"].get(std)) {
      return InvalidArgument(origin + ": calibration needs \"mean\" and \"std\"");
    }
    RETURN_IF_ERROR(floats(mean, "calibration.mean", &o.calibration_mean));
    RETURN_IF_ERROR(floats(std, "calibration.std", &o.calibration_std));
    if (o.calibration_mean.size() != o.calibration_std.size()) {
      return InvalidArgument(origin + ": calibration.mean and calibration.std differ in length");
    }
    for (float s : o.calibration_std) {
      if (!(s > 0.f)) return InvalidArgument(origin + ": calibration.std must be > 0");
    }
  }
  element th;
  if (f.Get("thresholds", &th)) RETURN_IF_ERROR(floats(th, "thresholds", &o.thresholds));
  element labels;
  if (f.Get("labels", &labels)) {
    simdjson::dom::array a;
    if (labels.get(a)) return InvalidArgument(origin + ": labels must be a list of strings");
    for (auto x : a) {
      std::string_view s;
      if (x.get(s)) return InvalidArgument(origin + ": labels must be a list of strings");
      o.labels.emplace_back(s);
    }
  }
  return o;
}

Matryoshka ResolveMatryoshka(const ModelConfig& config, const SluiceOverrides& overrides) {
  Matryoshka m;
  m.dimensions = config.matryoshka_dimensions;
  m.enabled = config.is_matryoshka || !m.dimensions.empty();
  if (!overrides.matryoshka_dimensions.empty()) {
    m.dimensions = overrides.matryoshka_dimensions;
    m.enabled = true;
  }
  if (overrides.is_matryoshka) {
    m.enabled = *overrides.is_matryoshka;
    if (!m.enabled) m.dimensions.clear();
  }
  return m;
}

StatusOr<QueryExpansion> ResolveQueryExpansion(const SentenceTransformersConfig& st,
                                               const SluiceOverrides& overrides,
                                               bool late_interaction) {
  QueryExpansion q;
  const bool from_sluice = overrides.query_length.has_value();
  if (from_sluice) {
    q.length = *overrides.query_length;
  } else if (st.query_length && st.do_query_expansion) {
    q.length = *st.query_length;
  }
  q.attend =
      overrides.attend_to_expansion_tokens.value_or(st.attend_to_expansion_tokens.value_or(false));
  const std::string origin =
      from_sluice ? "sluice.json query_length" : "config_sentence_transformers.json query_length";
  if (q.length < 0) return InvalidArgument(origin + " must be >= 0 (0 = no query augmentation)");
  if (q.length == 0) return q;
  if (!late_interaction) {
    if (!from_sluice) return QueryExpansion{};  // PyLate's settings of a model served otherwise
    return InvalidArgument(origin +
                           " (ColBERT query augmentation) applies to late-interaction "
                           "models (sluice.json \"late_interaction\": true)");
  }
  return q;
}

StatusOr<LateInteractionTexts> ResolveLateInteractionTexts(const SentenceTransformersConfig& st,
                                                           const SluiceOverrides& overrides) {
  LateInteractionTexts t;
  t.query_prefix = overrides.query_prefix.value_or(st.query_prefix.value_or(""));
  t.document_prefix = overrides.document_prefix.value_or(st.document_prefix.value_or(""));
  t.document_length = overrides.document_length.value_or(st.document_length.value_or(0));
  if (t.document_length < 0) {
    return InvalidArgument(std::string(overrides.document_length
                                           ? "sluice.json"
                                           : "config_sentence_transformers.json") +
                           " document_length must be >= 0 (0 = the model's limit only)");
  }
  return t;
}

std::vector<std::string> ResolveSkiplistWords(const SentenceTransformersConfig& st,
                                              const SluiceOverrides& overrides) {
  if (overrides.skiplist_words) return *overrides.skiplist_words;
  if (st.skiplist_words) return *st.skiplist_words;
  // Python's string.punctuation, PyLate's default.
  const std::string punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  std::vector<std::string> words;
  for (char c : punctuation) words.emplace_back(1, c);
  return words;
}

std::string MatryoshkaDimensionsError(const Matryoshka& m, int64_t dimensions, int output_dim) {
  if (!m.enabled) {
    return "is supported only for Matryoshka models, and this model is not marked as one "
           "(\"is_matryoshka\": true or \"matryoshka_dimensions\" in its config.json or "
           "sluice.json); truncating its embeddings would give poor results";
  }
  if (!m.dimensions.empty()) {
    for (int d : m.dimensions) {
      if (d == dimensions && d <= output_dim) return "";
    }
    std::string list;
    for (int d : m.dimensions) list += (list.empty() ? "" : ", ") + std::to_string(d);
    return "must be one of this model's matryoshka_dimensions [" + list + "]";
  }
  if (dimensions < 1 || dimensions > output_dim) {
    return "must be between 1 and " + std::to_string(output_dim);
  }
  return "";
}

}  // namespace sluice
