// Token classification post-processing: what the Hugging Face token-classification
// pipeline (transformers TokenClassificationPipeline.postprocess) returns for one text, from
// the text's encoding and the model's per-token probabilities. Shared by POST
// /token-classify, /pooling (task token_classify), `sluice classify --task token-classify`
// and the aspect-sentiment processor (/absa).
//
// Offsets are character (code point) offsets into the text, as Python strings count them:
// byte offsets from the tokenizer are converted the way HF tokenizers converts them
// (CharOffsets). Aggregation strategies follow the pipeline exactly:
//   none:    one entity per token ("entity", "score", "index", "word" = the token string,
//            "start", "end")
//   simple:  tokens grouped by their B-/I- tags ("entity_group" = the tag, "score" = mean,
//            "word" = the decoded tokens)
//   first / average / max: tokens grouped into words first (a token continues a word when
//            the tokenizer's model has a continuing_subword_prefix and the token's string is
//            longer or shorter than its text, or, without one, when neither the character
//            before the token nor its first character is a space), each word labelled by its
//            first token, the average of its tokens' probabilities, or its most confident
//            token; then grouped as simple.
// Entities whose label (none) or group (the others) is in ignore_labels (default ["O"])
// are dropped. Special tokens (special_tokens_mask) are skipped; a token whose id is the
// unknown token's reports its text as its word and starts a word.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/json.h"
#include "sluice/status.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {

enum class Aggregation { kNone, kSimple, kFirst, kAverage, kMax };
bool ParseAggregation(std::string_view s, Aggregation* out);

// Byte offsets -> character offsets of one text, as HF tokenizers' BytesToCharOffsetConverter:
// a start maps to the index of the character holding that byte; an end to the index of the
// character holding it, or (at the end of the text) one past the character holding the last
// byte. Offsets starting at or past the end are returned unchanged.
class CharOffsets {
 public:
  explicit CharOffsets(std::string_view text);
  std::pair<int64_t, int64_t> Convert(uint32_t start, uint32_t end) const;
  int64_t num_chars() const { return static_cast<int64_t>(starts_.size()); }
  // The text's characters [begin, end) (clipped to the text), as UTF-8.
  std::string_view Slice(int64_t begin, int64_t end) const;
  // The character at index i as UTF-8 (empty when out of range).
  std::string_view Char(int64_t i) const { return Slice(i, i + 1); }

 private:
  std::string_view text_;
  std::vector<int32_t> char_of_byte_;  // per byte of text_
  std::vector<int32_t> starts_;        // byte offset of each character
};

struct TokenEntity {
  std::string label;  // "entity" (aggregation none) or "entity_group" (the others)
  float score = 0.f;
  int index = -1;  // aggregation none: the token's index in the encoding
  std::string word;
  int64_t start = -1, end = -1;  // character offsets into the text
};

struct TokenClassifyParams {
  const Tokenizer* tokenizer = nullptr;
  const std::vector<std::string>* labels = nullptr;  // id2label, one per probability
  Aggregation aggregation = Aggregation::kNone;
  std::vector<std::string> ignore_labels = {"O"};
};

// The entities of the tokens of `enc` with sequence id `sequence` (0: the first text, 1: the
// second of a pair), whose text is `text`. probs: [enc.size(), labels.size()] row-major.
StatusOr<std::vector<TokenEntity>> ClassifyTokens(const TokenClassifyParams& p,
                                                  std::string_view text, const Encoding& enc,
                                                  int sequence, const float* probs);

// One entity as the pipeline writes it: {"entity", "score", "index", "word", "start", "end"}
// for aggregation none, {"entity_group", "score", "word", "start", "end"} otherwise;
// `sequence` >= 0 adds "sequence" (the text of a pair it belongs to).
void WriteEntity(JsonWriter& w, const TokenEntity& e, Aggregation aggregation, int sequence = -1);

}  // namespace sluice::io
