// Admission checks: what a model accepts as input, checked once, where work enters the
// runtime (EngineLoop::Submit for served requests, Engine::Run for offline batches, the
// generation engine's Add). Nothing after admission re-checks token ids or lengths: a
// packed batch is built only from admitted sequences.
#pragma once

#include <span>

#include "sluice/sequence.h"
#include "sluice/status.h"

namespace sluice {

// Limits a model puts on one input sequence.
struct SequenceLimits {
  int vocab_size = 0;       // token ids in [0, vocab_size)
  int type_vocab_size = 1;  // token type ids in [0, max(1, type_vocab_size))
  int max_tokens = 0;       // tokens per sequence at most (0 = no limit)
  bool key_limits = false;  // TokenSequence::attended may be set (Model::SupportsKeyLimits)
};

// Checks every sequence: non-empty, at most max_tokens, ids and type ids in range, type ids
// as many as ids, `attended` in [0, tokens] and only where the model takes it. The error names the
// input index ("input 3: ...").
Status ValidateSequences(const SequenceLimits& limits, std::span<const TokenSequence> inputs);

}  // namespace sluice
