// Generator's private parts shared by its translation units (generator.cc: loading,
// requests and acceptance; generator_step.cc: the step loop). Not a public header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace sluice::generator_internal {

inline uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace sluice::generator_internal

namespace sluice {

// A sequence's engine-side state: its scheduler view, its request and output, and what its
// stop checks and sampling need.
struct Generator::SeqState {
  GenSequence seq;
  std::shared_ptr<GenerateRequest> request;
  int index = 0;  // which of the request's n outputs
  uint64_t seed = 0;
  ResolvedSampling rs;
  std::unique_ptr<DecodeStream> detok;
  bool finished = false;
  bool fork_pending = false;        // index 0 of n > 1, before its first token: samples n rows
  int prompt_logprob_next = 1;      // the next prompt position whose logprob is due
  std::vector<int32_t> prompt_set;  // distinct prompt tokens (repetition penalty)
  std::unordered_map<int32_t, int> output_counts;
  // Structured outputs: the grammar and its DFA state after the tokens so far (for the stop
  // check; the mask comes from the structured-output logits processor).
  std::shared_ptr<structured::Grammar> grammar;
  int32_t gstate = 0;
  Status mask_error;  // a logits processor failed on this sequence: fails its request
  // Logits processors: memberships (sized once, in AttachProcessors), what they are told.
  std::vector<LpSlot> lps;
  sluice_request_params cparams{};
  sluice_token_view out_view{};
  CompletionOutput& out() { return request->outputs[index]; }
};

}  // namespace sluice
