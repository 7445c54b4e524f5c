// Reads vLLM SamplingParams fields (n, temperature, top_p, top_k, min_p, seed, max_tokens,
// min_tokens, stop, stop_token_ids, ignore_eos, presence_penalty, frequency_penalty,
// repetition_penalty, logit_bias, logprobs, prompt_logprobs, skip_special_tokens,
// include_stop_str_in_output, detokenize; logits_processors and extra_args for plugins,
// docs/plugins.md) from a JSON object into SamplingParams. Shared by
// `sluice generate` lines and the HTTP generation routes; every field read is marked as
// known, so Fields::CheckNoUnknown refuses the rest by name.
#pragma once

#include "engine/sampling_params.h"
#include "io/json.h"

namespace sluice::io {

// `openai_logprobs`: "logprobs" is the completions-style integer (true) or left to the
// caller (false: chat, where it is a boolean next to top_logprobs).
Status ReadSamplingFields(Fields& f, SamplingParams* p, bool openai_logprobs = true);

// The OpenAI request fields completions and chat share: stream, stream_options
// (include_usage; only with stream) and user (<= 256 bytes).
Status ReadStreamAndUser(Fields& f, bool* stream, bool* include_usage, std::string* user);

}  // namespace sluice::io
