#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>

namespace sluice {
namespace {

template <typename T>
Status Range(const char* field, T v, T lo, T hi, const char* rule) {
  if (!(v >= lo && v <= hi)) {
    return InvalidArgument(std::string(field) + " must be " + rule + ", got " + std::to_string(v));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateGeneration(const SamplingParams& p, size_t prompt_len, const GenerationLimits& l) {
  if (p.constraint) {
    if (!l.has_tokenizer) {
      return InvalidArgument(p.constraint->field +
                             ": structured outputs need the model's tokenizer");
    }
    if (p.min_tokens > 0) {
      return InvalidArgument("min_tokens cannot be combined with " + p.constraint->field +
                             " (the constraint decides where the output may end)");
    }
    if (p.ignore_eos) {
      return InvalidArgument("ignore_eos cannot be combined with " + p.constraint->field +
                             " (the constraint decides where the output ends)");
    }
  }
  RETURN_IF_ERROR(Range("n", p.n, 1, l.max_n, ("in [1, " + std::to_string(l.max_n) + "]").c_str()));
  if (p.temperature) {
    if (!(*p.temperature >= 0.f) || !std::isfinite(*p.temperature)) {
      return InvalidArgument("temperature must be >= 0, got " + std::to_string(*p.temperature));
    }
  }
  if (p.top_p && !(*p.top_p > 0.f && *p.top_p <= 1.f)) {
    return InvalidArgument("top_p must be in (0, 1], got " + std::to_string(*p.top_p));
  }
  if (p.top_k && *p.top_k < -1) {
    return InvalidArgument("top_k must be -1, 0 (all tokens) or positive, got " +
                           std::to_string(*p.top_k));
  }
  if (p.min_p) RETURN_IF_ERROR(Range("min_p", *p.min_p, 0.f, 1.f, "in [0, 1]"));
  if (p.repetition_penalty && !(*p.repetition_penalty > 0.f && *p.repetition_penalty <= 100.f)) {
    return InvalidArgument("repetition_penalty must be in (0, 100], got " +
                           std::to_string(*p.repetition_penalty));
  }
  RETURN_IF_ERROR(Range("presence_penalty", p.presence_penalty, -2.f, 2.f, "in [-2, 2]"));
  RETURN_IF_ERROR(Range("frequency_penalty", p.frequency_penalty, -2.f, 2.f, "in [-2, 2]"));
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= l.vocab_size) {
      return InvalidArgument("logit_bias: token id " + std::to_string(token) +
                             " outside the vocabulary [0, " + std::to_string(l.vocab_size) + ")");
    }
    RETURN_IF_ERROR(Range("logit_bias value", bias, -100.f, 100.f, "in [-100, 100]"));
  }
  for (int32_t t : p.stop_token_ids) {
    if (t < 0 || t >= l.vocab_size) {
      return InvalidArgument("stop_token_ids: token id " + std::to_string(t) +
                             " outside the vocabulary [0, " + std::to_string(l.vocab_size) + ")");
    }
  }
  if (static_cast<int>(p.stop.size()) > l.max_stop_strings) {
    return InvalidArgument("stop: at most " + std::to_string(l.max_stop_strings) +
                           " stop strings, got " + std::to_string(p.stop.size()));
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) return InvalidArgument("stop: empty stop string");
  }
  if (!p.stop.empty() && !l.has_tokenizer) {
    return InvalidArgument("stop strings need the model's tokenizer (tokenizer.json)");
  }
  if (p.logprobs) {
    RETURN_IF_ERROR(Range("logprobs", *p.logprobs, 0, l.max_logprobs,
                          ("in [0, " + std::to_string(l.max_logprobs) + "]").c_str()));
  }
  if (p.prompt_logprobs) {
    RETURN_IF_ERROR(Range("prompt_logprobs", *p.prompt_logprobs, 0, l.max_logprobs,
                          ("in [0, " + std::to_string(l.max_logprobs) + "]").c_str()));
  }
  if (p.min_tokens < 0) {
    return InvalidArgument("min_tokens must be >= 0, got " + std::to_string(p.min_tokens));
  }
  if (prompt_len == 0) return InvalidArgument("the prompt is empty");
  const int64_t len = static_cast<int64_t>(prompt_len);
  if (len >= l.max_model_len) {
    return OutOfRange("the prompt has " + std::to_string(len) +
                      " tokens; the model's maximum length is " + std::to_string(l.max_model_len) +
                      " tokens, which leaves no room for output");
  }
  if (p.max_tokens) {
    if (*p.max_tokens < 1) {
      return InvalidArgument("max_tokens must be >= 1, got " + std::to_string(*p.max_tokens));
    }
    if (len + *p.max_tokens > l.max_model_len) {
      return OutOfRange(
          "prompt (" + std::to_string(len) + " tokens) + max_tokens (" +
          std::to_string(*p.max_tokens) + ") = " + std::to_string(len + *p.max_tokens) +
          " tokens exceeds the model's maximum length of " + std::to_string(l.max_model_len));
    }
    if (p.min_tokens > *p.max_tokens) {
      return InvalidArgument("min_tokens (" + std::to_string(p.min_tokens) +
                             ") must not exceed max_tokens (" + std::to_string(*p.max_tokens) +
                             ")");
    }
  }
  const int64_t need = len + (p.max_tokens ? *p.max_tokens : l.max_model_len - len);
  if (l.max_kv_tokens > 0 && need > l.max_kv_tokens) {
    return OutOfRange("prompt + max_tokens = " + std::to_string(need) +
                      " tokens can never fit the KV cache, which holds " +
                      std::to_string(l.max_kv_tokens) + " tokens");
  }
  return Status::Ok();
}

ResolvedSampling ResolveSampling(const SamplingParams& p, const GenerationConfig& g,
                                 size_t prompt_len, int max_model_len) {
  ResolvedSampling r;
  if (g.present) {
    r.temperature = g.do_sample ? static_cast<float>(g.temperature) : 0.f;
    r.top_p = static_cast<float>(g.top_p);
    r.top_k = g.top_k;
    r.min_p = static_cast<float>(g.min_p);
    r.repetition_penalty = static_cast<float>(g.repetition_penalty);
  }
  if (p.temperature) r.temperature = *p.temperature;
  if (p.top_p) r.top_p = *p.top_p;
  if (p.top_k) r.top_k = *p.top_k < 0 ? 0 : *p.top_k;
  if (p.min_p) r.min_p = *p.min_p;
  if (p.repetition_penalty) r.repetition_penalty = *p.repetition_penalty;
  // max_tokens: the request's, else generation_config.json's max_new_tokens, else up to the
  // model length (always capped by it).
  const int room = max_model_len - static_cast<int>(prompt_len);
  r.max_tokens = p.max_tokens ? *p.max_tokens
                 : g.present && g.max_new_tokens && *g.max_new_tokens > 0
                     ? std::min(*g.max_new_tokens, room)
                     : room;
  return r;
}

}  // namespace sluice
