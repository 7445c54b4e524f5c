// Tokenizer: a native implementation of Hugging Face tokenizer.json pipelines
// (normalizer -> added tokens -> pre-tokenizer -> model -> post-processor, and decoders)
// with exact parity to HF tokenizers. See docs/tokenizer.md.
//
// Offsets are BYTE offsets into the UTF-8 input given to Encode/EncodePair (the second
// text of a pair has offsets relative to that text). Special tokens added by the
// post-processor have offsets (0, 0). Invalid UTF-8 input is decoded lossily (each maximal
// invalid subsequence becomes U+FFFD, as Python's errors="replace" and Rust's
// String::from_utf8_lossy do); offsets still refer to the raw input bytes.
//
// All const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<std::string> tokens;
  std::vector<std::pair<uint32_t, uint32_t>> offsets;  // byte offsets into the input text
  std::vector<uint8_t> special_tokens_mask;
  std::vector<int8_t> sequence_ids;  // 0 or 1 for tokens of text a / b; -1 for added specials
  std::vector<int32_t> word_ids;     // pre-tokenized word index within its text; -1 for specials
  size_t size() const { return ids.size(); }
};

enum class TruncationStrategy { kLongestFirst, kOnlyFirst, kOnlySecond };

struct TruncationParams {
  size_t max_length = 512;
  TruncationStrategy strategy = TruncationStrategy::kLongestFirst;
  size_t stride = 0;  // only 0 is supported
};

// Values read from tokenizer_config.json (all optional).
struct TokenizerConfig {
  std::optional<size_t> model_max_length;
  std::string padding_side = "right";
  std::string truncation_side = "right";
  std::optional<std::string> bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
      mask_token;
  std::optional<std::string> chat_template;
  std::optional<bool> add_bos_token, add_eos_token;
};

namespace tok {
class Pipeline;
}

class Tokenizer {
 public:
  ~Tokenizer();
  // Reads DIR/tokenizer.json (or DIR/vocab.txt for BERT repositories) and
  // DIR/tokenizer_config.json when present.
  static StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json);
  // A WordPiece (BERT) tokenizer from the lines of a vocab.txt.
  static StatusOr<std::unique_ptr<Tokenizer>> FromBertVocab(std::string_view vocab_txt,
                                                            bool lowercase = true,
                                                            std::optional<bool> strip_accents = {},
                                                            bool tokenize_chinese_chars = true);

  StatusOr<Encoding> Encode(std::string_view text, bool add_special_tokens = true,
                            const TruncationParams* trunc = nullptr) const;
  StatusOr<Encoding> EncodePair(std::string_view a, std::string_view b,
                                bool add_special_tokens = true,
                                const TruncationParams* trunc = nullptr) const;
  StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // The decoder over token strings, as transformers' convert_tokens_to_string: the
  // tokenizer.json decoder (no special-token skipping, no extra clean-up), or the tokens
  // joined by spaces when there is none. Tokens may be any strings (e.g. already decoded
  // words: a byte-level decoder keeps a token with characters outside its alphabet as it is).
  StatusOr<std::string> DecodeTokens(std::vector<std::string> tokens) const;
  // The model's continuing_subword_prefix ("##" for WordPiece; empty when none): the
  // token-classification pipeline's test for word-aware tokenizers.
  std::string ContinuingSubwordPrefix() const;
  // The unknown token's id: tokenizer_config.json's unk_token, else none.
  std::optional<int32_t> UnkId() const;
  // Where the post-processor puts the special tokens of a pair: ids of the tokens before
  // the first text, between the texts and after the second, and the type ids of each part
  // (`a_type`/`b_type` for the texts' own tokens). Lets pre-tokenised pairs get exactly the
  // tokenizer's pair template (BERT [CLS] a [SEP] b [SEP]; RoBERTa/XLM-R <s> a </s></s> b
  // </s>; any TemplateProcessing).
  struct PairLayout {
    std::vector<int32_t> prefix, middle, suffix;
    std::vector<int32_t> prefix_types, middle_types, suffix_types;
    int32_t a_type = 0, b_type = 0;
  };
  StatusOr<PairLayout> PairTemplate() const;
  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  size_t vocab_size() const;  // largest id + 1 (model vocabulary and added tokens)
  // Number of tokens the post-processor adds to a single text / a pair.
  size_t NumSpecialTokensToAdd(bool pair) const;
  bool IsSpecialId(int32_t id) const;
  // True when the decoder is byte-level (GPT-2 style), so that TokenBytes is context-free.
  bool HasByteLevelDecoder() const;
  // The bytes token `id` decodes to on its own (what it adds to any decoded text), for a
  // byte-level decoder; nullopt for special tokens, unused ids and other decoders.
  std::optional<std::string> TokenBytes(int32_t id) const;
  const TokenizerConfig& config() const { return config_; }

 private:
  Tokenizer();
  static bool IsValidUtf8If(std::string_view s);
  StatusOr<Encoding> EncodeImpl(std::string_view a, std::string_view b, bool is_pair,
                                bool add_special_tokens, const TruncationParams* trunc) const;
  std::unique_ptr<tok::Pipeline> p_;
  TokenizerConfig config_;
};

// Incremental decoding for generation: feed ids one at a time; returns the new text once it
// forms complete UTF-8 (never a dangling partial character), as HF tokenizers' DecodeStream.
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer* tokenizer, bool skip_special_tokens = true)
      : tok_(tokenizer), skip_(skip_special_tokens) {}
  StatusOr<std::optional<std::string>> Step(int32_t id);

 private:
  const Tokenizer* tok_;
  bool skip_;
  std::vector<int32_t> ids_;
  std::string prefix_;
  size_t prefix_index_ = 0;
};

}  // namespace sluice
