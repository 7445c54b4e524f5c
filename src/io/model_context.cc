#include "io/model_context.h"

#include <algorithm>

#include "io/inputs.h"
#include "tokenizer/tokenizer.h"
#include "weights/config.h"

namespace sluice::io {
namespace {

// Qwen3-Reranker's prompt (its model card), around "<Instruct>: ...\n<Query>: ...\n<Document>:
// ...".
constexpr const char* kCausalPrefix =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
    "<|im_end|>\n<|im_start|>user\n";
constexpr const char* kCausalSuffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
constexpr const char* kDefaultInstruction =
    "Given a web search query, retrieve relevant passages that answer the query";

}  // namespace

StatusOr<ModelContext> BuildModelContext(const Engine& engine, const Tokenizer* tokenizer,
                                         const ContextOptions& options) {
  const ModelInfo& info = engine.info();
  const HeadSpec& head = engine.head();
  ModelContext m;
  m.name = options.served_name;
  m.version = options.served_version;
  m.task = TaskName(info.task);
  m.family = info.family;
  m.model_dir = engine.bundle().dir;
  m.output_dim = head.output_dim;
  m.normalize = head.normalize;
  m.token_level = head.pooling == PoolingKind::kAll || head.pooling == PoolingKind::kStep;
  const SluiceOverrides& overrides = engine.bundle().overrides;
  const Matryoshka mat = ResolveMatryoshka(engine.model().config(), overrides);
  m.matryoshka = mat.enabled && info.task == Task::kEmbed && !m.token_level;
  if (m.matryoshka) m.matryoshka_dimensions = mat.dimensions;
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
    // Pre-tokenised pairs get the tokenizer's own pair template (its post-processor).
    ASSIGN_OR_RETURN(Tokenizer::PairLayout pair, tokenizer->PairTemplate());
    m.pair_prefix = std::move(pair.prefix);
    m.pair_separator = std::move(pair.middle);
    m.pair_suffix = std::move(pair.suffix);
    m.pair_prefix_types = std::move(pair.prefix_types);
    m.pair_separator_types = std::move(pair.middle_types);
    m.pair_suffix_types = std::move(pair.suffix_types);
    m.pair_a_type = pair.a_type;
    m.pair_b_type = pair.b_type;
  }
  m.late_interaction = head.late_interaction;
  if (m.late_interaction) {
    ASSIGN_OR_RETURN(LateInteractionTexts texts,
                     ResolveLateInteractionTexts(engine.bundle().st, overrides));
    m.query_prefix = texts.query_prefix;
    m.document_prefix = texts.document_prefix;
    m.document_length = texts.document_length;
  }
  if (m.late_interaction && tokenizer) {
    m.skiplist_ids = SkiplistIds(*tokenizer, ResolveSkiplistWords(engine.bundle().st, overrides));
    if (!m.document_prefix.empty()) {
      m.document_prefix_id = tokenizer->TokenToId(m.document_prefix).value_or(-1);
    }
  }
  ASSIGN_OR_RETURN(QueryExpansion qe,
                   ResolveQueryExpansion(engine.bundle().st, overrides, m.late_interaction));
  if (qe.length > 0) {
    // The tokenizer's mask token (tokenizer_config.json mask_token, else "[MASK]").
    std::optional<int32_t> mask;
    if (tokenizer) {
      mask = tokenizer->TokenToId(tokenizer->config().mask_token.value_or("[MASK]"));
    }
    if (!mask) {
      return FailedPrecondition(
          "query_length (ColBERT query augmentation) needs the tokenizer's mask token "
          "(tokenizer.json with tokenizer_config.json mask_token, or a [MASK] token)");
    }
    if (qe.length > m.max_tokens_per_input) {
      return InvalidArgument("query_length " + std::to_string(qe.length) +
                             " is over the limit of " + std::to_string(m.max_tokens_per_input) +
                             " tokens per input");
    }
    if (!qe.attend && !engine.model().SupportsKeyLimits()) {
      return Unsupported(
          "query_length " + std::to_string(qe.length) +
          " with attend_to_expansion_tokens false (ColBERT query expansion tokens the other "
          "tokens do not attend) needs an encoder of the BERT family or ModernBERT, which "
          "can leave tokens out of the attention's keys; this model (" +
          m.family +
          ") cannot: set sluice.json \"attend_to_expansion_tokens\": true if the model was "
          "trained so, or \"query_length\": 0");
    }
    m.query_length = qe.length;
    m.query_mask_id = *mask;
    m.query_expansion_attended = qe.attend;
  }
  if (overrides.absa) {
    m.absa = true;
    m.absa_sentiments = overrides.absa->sentiments;
    m.absa_aggregation = overrides.absa->aggregation;
    m.absa_max_aspects = overrides.absa->max_aspects;
  }
  if (tokenizer && head.yes_no) {
    m.causal_reranker = true;
    m.default_instruction = overrides.instruction.value_or(kDefaultInstruction);
    ASSIGN_OR_RETURN(Encoding pre, tokenizer->Encode(kCausalPrefix, false));
    ASSIGN_OR_RETURN(Encoding suf, tokenizer->Encode(kCausalSuffix, false));
    m.prompt_prefix = std::move(pre.ids);
    m.prompt_suffix = std::move(suf.ids);
  }
  return m;
}

}  // namespace sluice::io
