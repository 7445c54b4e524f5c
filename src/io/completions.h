// OpenAI /v1/completions: the request reader (every field reaches the engine or is refused
// by name) and the response writers (one JSON body, or server-sent-event chunks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generator.h"
#include "sluice/status.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::io {

struct CompletionRequest {
  std::string model;                          // as sent ("" = the served model)
  std::vector<std::vector<int32_t>> prompts;  // one per prompt (a list of prompts -> many)
  SamplingParams params;                      // shared by every prompt
  bool echo = false;                          // prepend the prompt to each choice's text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;            // recorded in the server log with the request id
  // prompt_logprobs was set only because echo + logprobs asked for the prompt's logprobs
  // (they appear in the legacy logprobs object, not as a separate prompt_logprobs field).
  bool prompt_logprobs_for_echo = false;
};

// Reads a /v1/completions body. `tokenizer` may be null (token-id prompts only).
// Fields not implemented (suffix, best_of != n, unknown ones) are InvalidArgument naming
// them. max_tokens defaults to 16 (OpenAI's default for completions).
StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                   const Tokenizer* tokenizer);

// What a response needs besides the engine's results.
struct CompletionContext {
  std::string id;       // "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string system_fingerprint;
  const Tokenizer* tokenizer = nullptr;
};

// The non-streaming response: one choice per (prompt, completion), index = prompt * n + c.
std::string CompletionResponse(const CompletionContext& ctx, const CompletionRequest& req,
                               const std::vector<std::shared_ptr<GenerateRequest>>& results);

// Streaming: tracks what each choice has sent and writes "data: {...}\n\n" events.
class CompletionStream {
 public:
  CompletionStream(const CompletionContext& ctx, const CompletionRequest& req);
  // Events for what prompt `p`'s request produced since the last call (text held back
  // while it may still be cut by a stop string or ends inside a UTF-8 character).
  std::string Update(size_t p, const GenerateRequest& r);
  // After every prompt's request finished: the usage chunk (when asked) and [DONE].
  std::string Finish(const std::vector<std::shared_ptr<GenerateRequest>>& results);

 private:
  struct ChoiceState {
    size_t text_sent = 0, tokens_sent = 0;
    bool started = false, finished = false;
  };
  CompletionContext ctx_;
  const CompletionRequest& req_;
  size_t holdback_ = 0;  // longest stop string - 1
  std::vector<ChoiceState> choices_;
};

// Usage counts over every prompt's request.
struct CompletionUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
CompletionUsage UsageOf(const std::vector<std::shared_ptr<GenerateRequest>>& results);

}  // namespace sluice::io
