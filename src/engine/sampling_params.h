// What a generation request asks for, named as in vLLM's SamplingParams (the OpenAI fields
// map onto it in the front ends). Unset optional fields take the model's defaults
// (generation_config.json) in Resolve; Validate refuses out-of-range values with an error
// naming the field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sluice/status.h"
#include "structured/constraint.h"
#include "weights/config.h"

namespace sluice {

struct SamplingParams {
  int n = 1;                         // completions per prompt (they share the prompt's KV blocks)
  std::optional<float> temperature;  // 0 = greedy
  std::optional<float> top_p;        // (0, 1]
  std::optional<int> top_k;          // 0 or -1 = all tokens
  std::optional<float> min_p;        // [0, 1]
  std::optional<float> repetition_penalty;  // > 0; 1 = off (prompt and output tokens)
  float presence_penalty = 0.f;             // [-2, 2] (output tokens)
  float frequency_penalty = 0.f;            // [-2, 2] (output tokens)
  std::map<int32_t, float> logit_bias;      // token -> bias in [-100, 100]
  std::optional<uint64_t> seed;             // unset: a random seed per request
  std::optional<int> max_tokens;            // unset: up to the model length
  int min_tokens = 0;                       // stop tokens and strings suppressed before this many
  std::vector<std::string> stop;            // stop strings (matched on the detokenised output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool detokenize = true;              // produce text (needs the tokenizer)
  std::optional<int> logprobs;         // top raw logprobs per output token (0..20)
  std::optional<int> prompt_logprobs;  // top raw logprobs per prompt token (0..20)
  // Structured outputs (docs/structured-outputs.md): the constraint every sampled token obeys,
  // and its grammar once compiled for the model's vocabulary (Generator::CompileConstraint;
  // Generator::Add compiles it when unset).
  std::optional<structured::ConstraintSpec> constraint;
  std::shared_ptr<structured::Grammar> grammar;
  // Logits processors of plugins (docs/plugins.md), by name, and the free-form parameters
  // they read (the request's "extra_args" object as JSON text; empty = none).
  std::vector<std::string> logits_processors;
  std::string extra_args;
};

// Limits a generation request is checked against at admission.
struct GenerationLimits {
  int vocab_size = 0;
  int max_model_len = 0;      // prompt + output tokens at most
  int64_t max_kv_tokens = 0;  // tokens the whole KV cache holds
  int max_n = 128;
  int max_logprobs = 20;
  int max_stop_strings = 64;
  bool has_tokenizer = false;
};

// Checks the parameters and the prompt against the limits. InvalidArgument names the field
// ("temperature must be >= 0, got -1"); a prompt too long for the model or the KV cache is
// OutOfRange with the numbers.
Status ValidateGeneration(const SamplingParams& p, size_t prompt_len, const GenerationLimits& l);

// Sampling parameters after defaults: everything set.
struct ResolvedSampling {
  float temperature = 1.f;
  float top_p = 1.f;
  int top_k = 0;
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  int max_tokens = 0;
};
// Unset fields from generation_config.json (its temperature/top_p/top_k/min_p/
// repetition_penalty when do_sample is true; greedy when it is false), else vLLM's defaults
// (temperature 1, top_p 1, all tokens, min_p 0, no penalty); max_tokens defaults to what the
// model length leaves after the prompt.
ResolvedSampling ResolveSampling(const SamplingParams& p, const GenerationConfig& defaults,
                                 size_t prompt_len, int max_model_len);

}  // namespace sluice
