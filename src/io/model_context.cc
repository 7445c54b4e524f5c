#include "io/model_context.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace sluice::io {

StatusOr<ModelContext> BuildModelContext(const Engine& engine, const Tokenizer* tokenizer,
                                         const ContextOptions& options) {
  const ModelInfo& info = engine.info();
  const HeadSpec& head = engine.head();
  ModelContext m;
  m.name = options.served_name;
  m.task = TaskName(info.task);
  m.family = info.family;
  m.output_dim = head.output_dim;
  m.normalized = head.normalize;
  m.token_level = head.pooling == PoolingKind::kAll || head.pooling == PoolingKind::kStep;
  m.labels = head.labels;
  m.thresholds = head.thresholds;
  if (m.thresholds.size() == 1 && m.output_dim > 1)
    m.thresholds.resize(m.output_dim, m.thresholds[0]);
  m.uses_token_types = engine.model().config().type_vocab_size > 1;
  m.model_max_tokens = info.max_sequence_length > 0 ? info.max_sequence_length : INT32_MAX;
  m.max_tokens_per_input = m.model_max_tokens;
  if (options.max_tokens_per_input > 0) {
    if (options.max_tokens_per_input > m.model_max_tokens) {
      return InvalidArgument("--max-tokens-per-input " +
                             std::to_string(options.max_tokens_per_input) +
                             " is over the model's limit of " + std::to_string(m.model_max_tokens));
    }
    m.max_tokens_per_input = options.max_tokens_per_input;
  }
  m.max_inputs_per_request = options.max_inputs_per_request;
  m.truncate_by_default = options.truncate;
  m.tokenizer = tokenizer;
  if (tokenizer) {
    auto cls = tokenizer->TokenToId("[CLS]"), sep = tokenizer->TokenToId("[SEP]");
    auto bos = tokenizer->TokenToId("<s>"), eos = tokenizer->TokenToId("</s>");
    if (info.family == "bert" && cls && sep) {
      m.pair_prefix = {*cls};
      m.pair_separator = {*sep};
      m.pair_suffix = {*sep};
    } else if (info.family == "bert" && bos && eos) {  // RoBERTa / XLM-R
      m.pair_prefix = {*bos};
      m.pair_separator = {*eos, *eos};
      m.pair_suffix = {*eos};
    }
  }
  return m;
}

}  // namespace sluice::io
