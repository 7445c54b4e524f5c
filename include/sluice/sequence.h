// The request and sequence types every layer shares: what a model runs (TokenSequence)
// and what a pooling model returns per sequence (PooledOutput). IO processors build the
// former and read the latter; the engine runs them; nothing converts between copies.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

// One sequence for the engine (a full model input: special tokens included).
struct TokenSequence {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;  // empty = all zero
  // Keys of the attention: > 0 = only the first `attended` tokens; the later ones attend to
  // those (they are queries and get outputs) but no token attends to them (ColBERT query
  // expansion tokens with attention_mask 0, PyLate's attend_to_expansion_tokens false).
  // 0 = every token. Encoder models only (BERT family, ModernBERT).
  int32_t attended = 0;
};

// A pooling model's output for one sequence.
struct PooledOutput {
  std::vector<float> values;  // embed: vector (rows x dim for token-level pooling);
                              // classify/score: activated scores
  std::vector<float> raw;     // classify/score: logits after calibration, before activation
  int rows = 1;
  std::vector<int32_t> token_indices;  // STEP pooling: positions of the rows
};

}  // namespace sluice
