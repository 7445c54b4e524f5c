// IO processors: the request-specific code around the engine. A processor turns an API
// request into engine sequences and the engine's outputs into the response:
//
//   Parse(request)            -> IoState   validate the body; errors name the field
//   PreProcess(state)         -> sequences tokenise, assemble pairs/templates, truncate
//   (engine: packed forward over the sequences of many requests)
//   PostProcess(state, outs)  -> response  sort, top_n, labels, JSON
//
// Processors run on the server's worker pool (never on I/O threads, never on the engine
// thread). A processor object is const after construction and shared by all requests;
// per-request data lives in its IoState. The built-ins (embed, classify, score, rerank,
// token-classify, tokenize, ...) implement this interface, and so do plugins through plugin.h
// (src/io/plugin_io.cc adapts the C ABI onto it); a served model registers both kinds by name
// in one registry (src/io/registry.h) and runs them through the same server flow.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/sequence.h"
#include "sluice/status.h"

namespace sluice {

class Tokenizer;

// What a processor may know about the served model. Const after load.
struct ModelContext {
  std::string name;           // served model name (the `model` field must match when given)
  std::string version = "1";  // served version: `model` may also be "name:version"
  std::string task;           // "embed" | "classify" | "score" | "token-classify" | "clip"
  std::string family;         // "bert" | "qwen3" (architecture family)
  int output_dim = 0;         // values per row
  // Embeddings are L2-normalised unless a request asks otherwise ("normalize"): sluice.json
  // "normalize", default true (vLLM's rule).
  bool normalize = true;
  bool token_level = false;  // pooling keeps several rows per sequence (all/step)
  // Matryoshka embeddings: `dimensions` is accepted only when set; a non-empty list holds
  // the only values accepted (config.json or sluice.json "matryoshka_dimensions").
  bool matryoshka = false;
  std::vector<int> matryoshka_dimensions;
  std::vector<std::string> labels;
  std::vector<float> thresholds;
  bool uses_token_types = false;
  int model_max_tokens = 0;  // the model's limit
  // Request limits (flags): inputs per request; tokens per input (<= model_max_tokens).
  int max_inputs_per_request = 0;
  int max_tokens_per_input = 0;
  bool truncate_by_default = false;      // --truncate
  const Tokenizer* tokenizer = nullptr;  // null: token-id inputs only
  // Pre-tokenised pairs are assembled as prefix + a + separator + b + suffix, the tokenizer's
  // pair template (its post-processor: [CLS] a [SEP] b [SEP] for BERT, <s> a </s></s> b </s>
  // for RoBERTa/XLM-R), with the template's token types when the model uses them.
  std::vector<int32_t> pair_prefix, pair_separator, pair_suffix;
  std::vector<int32_t> pair_prefix_types, pair_separator_types, pair_suffix_types;
  int32_t pair_a_type = 0, pair_b_type = 1;
  // Causal-LM rerankers (Qwen3-Reranker style; needs the tokenizer): a text pair becomes
  //   prompt_prefix + tokens("<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}")
  //   + prompt_suffix
  // with the request's `instruction` or default_instruction (sluice.json, else Qwen's).
  // Truncation shortens the middle part and keeps the suffix. Pre-tokenised pairs (q, d) are
  // decoded to text and rendered the same way (the ids of /tokenize give the text's scores).
  bool causal_reranker = false;
  std::string default_instruction;
  std::vector<int32_t> prompt_prefix, prompt_suffix;
  // Late interaction (sluice.json "late_interaction"): queries and documents are embedded
  // on their own, token by token (prefixes prepended to texts), and scored by MaxSim.
  bool late_interaction = false;
  std::string query_prefix, document_prefix;
  // Text and token-id documents are cut to document_length tokens (PyLate's document_length;
  // 0 = only the limit per input), special tokens kept for texts, never refused for length.
  int document_length = 0;
  // ColBERT query augmentation (0 = off): a query (text or ids, after its prefix and special
  // tokens) is padded with query_mask_id up to query_length tokens; longer queries are
  // refused unless truncation is asked for (then cut to query_length).
  int query_length = 0;
  int32_t query_mask_id = -1;
  // Whether the query's other tokens attend to those [MASK] tokens (attend_to_expansion_tokens).
  // When not (PyLate's default), a late-interaction input's trailing run of query_mask_id
  // tokens (the expansion) is left out of the attention's keys (TokenSequence::attended), as
  // PyLate's attention_mask 0 leaves it; its token vectors are still computed and scored.
  bool query_expansion_attended = true;
  // ColBERT document skiplist (PyLate's skiplist_words, default string.punctuation, as token
  // ids; sorted): the vectors of these tokens are dropped from documents (never queries)
  // before MaxSim and in /pooling's token vectors of a document. A /pooling input is a
  // document when its second token is document_prefix_id (the document prefix's token, as
  // PyLate puts it after [CLS]; -1 = none, then /pooling inputs are never documents).
  std::vector<int32_t> skiplist_ids;
  int32_t document_prefix_id = -1;
  // Aspect-based sentiment (/absa; sluice.json "absa"): tag (or label) -> sentiment name,
  // the word aggregation that builds spans, the aspects one request may hold.
  bool absa = false;
  std::vector<std::pair<std::string, std::string>> absa_sentiments;
  std::string absa_aggregation = "first";
  int absa_max_aspects = 32;
  // sluice.json absa.sentiment_model: the sequence classifier served beside this model (its
  // companion): processors give it sequences through PreProcessCompanion and read its
  // outputs from IoState::companion_outputs. Null: no companion.
  std::shared_ptr<const ModelContext> companion;
  // The loaded version's directory (plugins read their own files from it).
  std::string model_dir;
  // A CLIP model as plugin IO processors see it (task "clip", server/clip_served.h): which
  // towers it has. Its plugins' inputs are images and texts, embedded by the CLIP path.
  bool clip = false;
  bool clip_vision = false, clip_text = false;
};

struct IoRequest {
  std::string_view route;  // e.g. "/v1/embeddings"
  std::string_view body;   // JSON
  const ModelContext* model = nullptr;
};

struct IoResponse {
  std::string body;
  std::string content_type = "application/json";
};

// Per-request state, owned by the server between the stages.
class IoState {
 public:
  virtual ~IoState() = default;
  int64_t prompt_tokens = 0;  // tokens sent to the engine (for usage and metrics)
  // The companion model's outputs (ModelContext::companion), one per sequence of
  // PreProcessCompanion, filled in before PostProcess.
  std::vector<PooledOutput> companion_outputs;
};

class IoProcessor {
 public:
  virtual ~IoProcessor() = default;
  virtual std::string_view name() const = 0;
  // Parses and validates the body. InvalidArgument names the field.
  virtual StatusOr<std::unique_ptr<IoState>> Parse(const IoRequest& request) const = 0;
  // Builds the engine sequences (may be none, e.g. /tokenize).
  virtual Status PreProcess(const ModelContext& model, IoState& state,
                            std::vector<TokenSequence>* sequences) const = 0;
  // Sequences for the model's companion (ModelContext::companion; called only when there is
  // one), run beside PreProcess's on the companion's engine. Default: none.
  virtual Status PreProcessCompanion(const ModelContext& companion, IoState& state,
                                     std::vector<TokenSequence>* sequences) const {
    (void)companion, (void)state, (void)sequences;
    return Status::Ok();
  }
  // outputs: one per sequence, in PreProcess order.
  virtual StatusOr<IoResponse> PostProcess(const ModelContext& model, IoState& state,
                                           std::vector<PooledOutput>& outputs) const = 0;
};

}  // namespace sluice
