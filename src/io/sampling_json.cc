#include "io/sampling_json.h"

#include <cmath>
#include <limits>

namespace sluice::io {
namespace {

Status GetFloat(Fields& f, std::string_view name, std::optional<float>* out) {
  simdjson::dom::element e;
  if (!f.Get(name, &e)) return Status::Ok();
  double v;
  if (e.get(v)) return FieldError(f.Path(name), "must be a number");
  *out = static_cast<float>(v);
  return Status::Ok();
}

Status GetIntOpt(Fields& f, std::string_view name, std::optional<int>* out) {
  simdjson::dom::element e;
  if (!f.Get(name, &e)) return Status::Ok();
  int64_t v;
  if (e.get(v)) return FieldError(f.Path(name), "must be an integer");
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return FieldError(f.Path(name), "is out of range");
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status GetTokenIds(Fields& f, std::string_view name, std::vector<int32_t>* out) {
  simdjson::dom::element e;
  if (!f.Get(name, &e)) return Status::Ok();
  simdjson::dom::array arr;
  if (e.get(arr)) return FieldError(f.Path(name), "must be a list of token ids");
  out->clear();
  for (auto x : arr) {
    int64_t v;
    if (x.get(v) || v < 0 || v > std::numeric_limits<int32_t>::max()) {
      return FieldError(f.Path(name), "must be a list of token ids (integers >= 0)");
    }
    out->push_back(static_cast<int32_t>(v));
  }
  return Status::Ok();
}

}  // namespace

Status ReadSamplingFields(Fields& f, SamplingParams* p, bool openai_logprobs) {
  std::optional<int> n;
  RETURN_IF_ERROR(GetIntOpt(f, "n", &n));
  if (n) p->n = *n;
  RETURN_IF_ERROR(GetFloat(f, "temperature", &p->temperature));
  RETURN_IF_ERROR(GetFloat(f, "top_p", &p->top_p));
  RETURN_IF_ERROR(GetIntOpt(f, "top_k", &p->top_k));
  RETURN_IF_ERROR(GetFloat(f, "min_p", &p->min_p));
  RETURN_IF_ERROR(GetFloat(f, "repetition_penalty", &p->repetition_penalty));
  std::optional<float> v;
  RETURN_IF_ERROR(GetFloat(f, "presence_penalty", &v));
  if (v) p->presence_penalty = *v;
  v.reset();
  RETURN_IF_ERROR(GetFloat(f, "frequency_penalty", &v));
  if (v) p->frequency_penalty = *v;
  simdjson::dom::element e;
  if (f.Get("seed", &e)) {
    int64_t s;
    if (e.get(s)) return FieldError(f.Path("seed"), "must be an integer");
    p->seed = static_cast<uint64_t>(s);
  }
  RETURN_IF_ERROR(GetIntOpt(f, "max_tokens", &p->max_tokens));
  std::optional<int> min_tokens;
  RETURN_IF_ERROR(GetIntOpt(f, "min_tokens", &min_tokens));
  if (min_tokens) p->min_tokens = *min_tokens;
  if (f.Get("stop", &e)) {
    p->stop.clear();
    std::string_view s;
    simdjson::dom::array arr;
    if (!e.get(s)) {
      p->stop.emplace_back(s);
    } else if (!e.get(arr)) {
      for (auto x : arr) {
        if (x.get(s)) return FieldError(f.Path("stop"), "must be a string or a list of strings");
        p->stop.emplace_back(s);
      }
    } else {
      return FieldError(f.Path("stop"), "must be a string or a list of strings");
    }
  }
  RETURN_IF_ERROR(GetTokenIds(f, "stop_token_ids", &p->stop_token_ids));
  RETURN_IF_ERROR(f.GetBool("ignore_eos", &p->ignore_eos));
  RETURN_IF_ERROR(f.GetBool("include_stop_str_in_output", &p->include_stop_str_in_output));
  RETURN_IF_ERROR(f.GetBool("skip_special_tokens", &p->skip_special_tokens));
  RETURN_IF_ERROR(f.GetBool("detokenize", &p->detokenize));
  if (openai_logprobs) RETURN_IF_ERROR(GetIntOpt(f, "logprobs", &p->logprobs));
  RETURN_IF_ERROR(GetIntOpt(f, "prompt_logprobs", &p->prompt_logprobs));
  if (f.Get("logit_bias", &e)) {
    simdjson::dom::object obj;
    if (e.get(obj)) return FieldError(f.Path("logit_bias"), "must be an object {token id: bias}");
    p->logit_bias.clear();
    for (auto kv : obj) {
      const std::string key(kv.key);
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return FieldError(f.Path("logit_bias"), "keys must be token ids, got \"" + key + "\"");
      }
      double b;
      if (kv.value.get(b) || !std::isfinite(b)) {
        return FieldError(f.Path("logit_bias") + "." + key, "must be a number");
      }
      p->logit_bias[static_cast<int32_t>(id)] = static_cast<float>(b);
    }
  }
  if (f.Get("logits_processors", &e)) {
    simdjson::dom::array arr;
    if (e.get(arr)) return FieldError(f.Path("logits_processors"), "must be a list of names");
    p->logits_processors.clear();
    for (auto x : arr) {
      std::string_view name;
      if (x.get(name) || name.empty()) {
        return FieldError(f.Path("logits_processors"), "must be a list of names (strings)");
      }
      p->logits_processors.emplace_back(name);
    }
  }
  if (f.Get("extra_args", &e)) {
    simdjson::dom::object obj;
    if (e.get(obj)) return FieldError(f.Path("extra_args"), "must be an object");
    p->extra_args = simdjson::minify(e);
  }
  return Status::Ok();
}

Status ReadStreamAndUser(Fields& f, bool* stream, bool* include_usage, std::string* user) {
  RETURN_IF_ERROR(f.GetBool("stream", stream));
  simdjson::dom::element e;
  if (f.Get("stream_options", &e)) {
    simdjson::dom::object so;
    if (e.get(so)) return FieldError("stream_options", "must be an object");
    if (!*stream) return FieldError("stream_options", "is only allowed with \"stream\": true");
    Fields sf(so, "stream_options");
    RETURN_IF_ERROR(sf.GetBool("include_usage", include_usage));
    RETURN_IF_ERROR(sf.CheckNoUnknown());
  }
  RETURN_IF_ERROR(f.GetString("user", user));
  if (user->size() > 256) return FieldError("user", "is longer than 256 bytes");
  return Status::Ok();
}

}  // namespace sluice::io
