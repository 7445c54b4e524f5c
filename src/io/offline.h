// The offline tasks (embed, classify, score) over token-id or text inputs: tokenising text
// inputs, the q/d pair template, and the per-task post-processing of the engine's outputs.
// One path for the `sluice embed|classify|score` commands (src/cli/cmd_offline.cc) and the
// in-process C API (src/capi, include/sluice/sluice.h): the same inputs give bit-identical
// results through both, since both call Engine::Run on the same sequences in the same order.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "sluice/sequence.h"
#include "sluice/status.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {

// A text input waiting for the tokenizer; `index` is its place in OfflineInputs::seqs.
struct OfflineText {
  size_t index = 0;
  size_t line = 0;  // where it came from (a file's line, an API input's index), for errors
  std::string a, b;
  bool pair = false;
};

struct OfflineInputs {
  std::vector<TokenSequence> seqs;  // every input in order; text inputs filled by EncodeTexts
  std::vector<OfflineText> texts;
  std::vector<Encoding> encodings;  // per text input, when EncodeOptions::keep_encodings
};

// Whether the model reads token type ids (inputs' type ids are dropped otherwise).
bool UsesTokenTypes(const Engine& engine);

// The CLI's q/d pair: prefix + q + separator + d + suffix; with token types, the d part and
// the suffix get type id 1.
struct PairTemplate {
  std::vector<int32_t> prefix, separator, suffix;
};
TokenSequence AssemblePair(const PairTemplate& t, const std::vector<int32_t>& q,
                           const std::vector<int32_t>& d, bool use_types);

struct EncodeOptions {
  bool truncate = false;        // cut to the model's limit (pairs: only the second text)
  bool keep_encodings = false;  // keep each text's Encoding (token classification)
  // Names a text input in errors: the CLI's "in.jsonl:7", the C API's "input 6".
  std::function<std::string(const OfflineText&)> where;
  std::string truncate_hint = "pass --truncate";  // how the caller asks for truncation
};

// Tokenizes the text inputs into their places in inputs->seqs on `pool`, with the
// tokenizer's special tokens (pairs with its pair template). Errors name the first failing
// input in order: no tokenizer, text pairs for causal-LM rerankers (their prompt template is
// not applied here), a failed encoding, an encoding over the model's limit (OutOfRange).
Status EncodeTexts(const Engine& engine, const EncodeOptions& options, ThreadPool* pool,
                   OfflineInputs* inputs);

// Embed `dimensions` follows the server's rule: Matryoshka embedding models only (config.json
// or sluice.json), one of their matryoshka_dimensions when listed. `flag` names the option.
// ColBERT query expansion that the other tokens do not attend (a late-interaction model with
// query_length and attend_to_expansion_tokens false, PyLate's default): each input's trailing
// run of mask tokens (a query padded as PyLate pads it) is left out of the attention's keys
// (io::MarkQueryExpansion, as the server's routes do). Nothing for other models. Offline
// inputs are not padded: give a query padded to the query length to get PyLate's vectors.
Status MarkQueryExpansion(const Engine& engine, std::vector<TokenSequence>* seqs);
// ColBERT's document skiplist offline (as /pooling): a late-interaction model's input whose
// second token is the document prefix's (sluice.json document_prefix, one token) is a
// document, and the vectors of its skiplist tokens (PyLate's skiplist_words, default
// string.punctuation) are dropped from its output; token_indices names the kept tokens.
// Nothing for other models, or without a tokenizer.
void DropDocumentSkiplist(const Engine& engine, const std::vector<TokenSequence>& seqs,
                          std::vector<PooledOutput>* outs);

Status CheckDimensions(const Engine& engine, int dimensions, const std::string& flag);
// Embeddings as the embed routes return them: the first `dimensions` values (0 = all), then
// L2-normalised per row when `normalize`.
void FinishEmbedding(int dimensions, bool normalize, PooledOutput* out);
// Whether an embedding output is written as a list of vectors (token-level pooling).
bool MultiVector(const HeadSpec& head, const PooledOutput& out);

// Classification: the index of the highest probability (the first of equals).
size_t BestLabel(const PooledOutput& out);
// The indices whose probability reaches the head's threshold (empty without thresholds).
std::vector<size_t> LabelsOverThreshold(const HeadSpec& head, const PooledOutput& out);
// The label of index k (its number when the head names fewer labels).
std::string LabelName(const HeadSpec& head, size_t k);

}  // namespace sluice::io
