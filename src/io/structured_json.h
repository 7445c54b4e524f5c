// The structured-output fields of /v1/completions, /v1/chat/completions and `sluice generate`
// lines (docs/structured-outputs.md): OpenAI's response_format (text, json_object,
// json_schema), vLLM's structured_outputs {json, regex, choice, grammar, json_object,
// whitespace_pattern} and its legacy guided_json, guided_regex, guided_choice, guided_grammar
// and guided_whitespace_pattern. At most one constraint per request; every error names the
// field.
#pragma once

#include "engine/sampling_params.h"
#include "io/json.h"

namespace sluice::io {

Status ReadStructuredFields(Fields& f, SamplingParams* p);

}  // namespace sluice::io
