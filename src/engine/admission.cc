#include "engine/admission.h"

#include <algorithm>
#include <string>

namespace sluice {

Status ValidateSequences(const SequenceLimits& limits, std::span<const TokenSequence> inputs) {
  const int types = std::max(1, limits.type_vocab_size);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TokenSequence& s = inputs[i];
    const std::string where = "input " + std::to_string(i);
    if (s.ids.empty()) return InvalidArgument(where + " has no tokens");
    if (limits.max_tokens > 0 && s.ids.size() > static_cast<size_t>(limits.max_tokens)) {
      return OutOfRange(where + " has " + std::to_string(s.ids.size()) +
                        " tokens, over the model's limit of " + std::to_string(limits.max_tokens));
    }
    for (int32_t id : s.ids) {
      if (id < 0 || id >= limits.vocab_size) {
        return InvalidArgument(where + ": token id " + std::to_string(id) +
                               " outside the vocabulary [0, " + std::to_string(limits.vocab_size) +
                               ")");
      }
    }
    if (s.attended != 0) {
      if (!limits.key_limits) {
        return InvalidArgument(where +
                               ": this model cannot leave tokens out of the attention's keys "
                               "(ColBERT query expansion tokens not attended need an encoder of "
                               "the BERT family or ModernBERT)");
      }
      if (s.attended < 0 || static_cast<size_t>(s.attended) > s.ids.size()) {
        return InvalidArgument(where + ": attended tokens " + std::to_string(s.attended) +
                               " outside [0, " + std::to_string(s.ids.size()) + "]");
      }
    }
    if (s.type_ids.empty()) continue;
    if (s.type_ids.size() != s.ids.size()) {
      return InvalidArgument(where + ": token_type_ids length differs from input_ids");
    }
    for (int32_t t : s.type_ids) {
      if (t < 0 || t >= types) {
        return InvalidArgument(where + ": token type id " + std::to_string(t) + " outside [0, " +
                               std::to_string(types) + ")");
      }
    }
  }
  return Status::Ok();
}

}  // namespace sluice
