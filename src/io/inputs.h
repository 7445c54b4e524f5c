// Request inputs shared by the built-in processors: texts or pre-tokenised token-id
// lists, tokenisation, pair assembly, the per-request limits and explicit truncation.
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "sluice/io_processor.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {

// A text, or token ids used verbatim (vLLM's pre-tokenised input).
struct Item {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

// `string | [string, ...] | [int, ...] | [[int, ...], ...]` (the OpenAI `input` shape).
// Empty strings and token lists are refused (as OpenAI does) unless allow_empty (rerank and
// score documents: an empty document is scored); errors name path ("input[3]").
StatusOr<std::vector<Item>> ReadItems(simdjson::dom::element e, const std::string& path,
                                      bool allow_empty = false);
// `string | [int, ...]`.
StatusOr<Item> ReadItem(simdjson::dom::element e, const std::string& path,
                        bool allow_empty = false);
// Token ids: each an integer in [0, 2^31).
Status ReadIds(simdjson::dom::array a, const std::string& path, std::vector<int32_t>* out,
               bool allow_empty = false);

// Refuses more than model.max_inputs_per_request items (and zero items).
Status CheckCount(const ModelContext& model, size_t n, const std::string& path);

// Truncation asked for by a request: 0 = none (an over-long input is an error),
// > 0 = at most that many tokens, -1 = the server's limit.
struct Truncate {
  int tokens = 0;
};
// Reads vLLM's `truncate_prompt_tokens` (-1 = the limit, or a positive count).
Status ReadTruncatePromptTokens(Fields& f, Truncate* t);
// The request's `truncate_prompt_tokens` (vLLM) or `truncate` (TEI, bool) or --truncate.
int EffectiveLimit(const ModelContext& model, const Truncate& t, bool* truncating);

StatusOr<TokenSequence> EncodeOne(const ModelContext& model, const Item& item, const Truncate& t,
                                  const std::string& path);
// ColBERT query expansion that the other tokens do not attend (late interaction with
// query_length and !query_expansion_attended): the trailing run of query_mask_id tokens of
// `s` (a query padded by the server or by the client) is left out of the attention's keys
// (TokenSequence::attended). Nothing otherwise.
void MarkQueryExpansion(const ModelContext& model, TokenSequence* s);

// PyLate's skiplist as token ids: each word converted as convert_tokens_to_ids does (the
// token's id, else the unknown token's, else none); sorted, without duplicates.
std::vector<int32_t> SkiplistIds(const Tokenizer& tok, const std::vector<std::string>& words);
// Whether a late-interaction /pooling (or offline) input is a document: its second token is
// the document prefix's (ModelContext::document_prefix_id).
bool IsMarkedDocument(const ModelContext& model, const TokenSequence& s);

// A (query, document) pair for cross-encoders: the tokenizer's pair template for texts,
// prefix + a + separator + b + suffix for token ids. Truncation shortens the document.
// Causal-LM rerankers render text pairs with the prompt template and `instruction`
// (empty = the model's default), and put token-id pairs into the same template (see
// ModelContext); truncation keeps the template's suffix.
StatusOr<TokenSequence> EncodePair(const ModelContext& model, const Item& a, const Item& b,
                                   const Truncate& t, const std::string& path,
                                   const std::string& instruction = {});

// A text (or a text pair: b non-null) through the tokenizer with its special tokens, the
// whole Encoding kept (offsets, special-token mask, sequence ids): for outputs that point
// back into the text. The request limits apply as in EncodeOne/EncodePair (pairs truncate
// the second text). Needs the tokenizer.
StatusOr<Encoding> EncodeText(const ModelContext& model, std::string_view a, const std::string* b,
                              const Truncate& t, const std::string& path);
// The engine sequence of an encoding (type ids when the model uses them).
TokenSequence ToSequence(const ModelContext& model, const Encoding& enc);

// The query of a scoring request must leave room for a document: its tokens with the pair's
// special tokens (or the causal-LM reranker's template) under the limit; else OutOfRange
// naming `path` (the query field), whatever truncation asks (only documents are truncated).
Status CheckQueryFits(const ModelContext& model, const Item& query, const Truncate& t,
                      const std::string& path, const std::string& instruction = {});
// A document given as token ids, as text for responses: decoded with the tokenizer (special
// tokens kept); nullopt without a tokenizer.
std::optional<std::string> DocumentText(const ModelContext& model, const Item& doc);

// Refuses a `model` field naming another model.
Status CheckModelName(const ModelContext& model, const std::string& requested);

}  // namespace sluice::io
