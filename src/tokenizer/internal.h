// Internal building blocks of the tokenizer (not part of the public API).
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/status.h"
#include "tokenizer/tokenizer.h"

namespace sluice::tok {

using Offsets = std::pair<uint32_t, uint32_t>;
using JsonValue = simdjson::dom::element;

// ---- Unicode helpers (unicode.cc) ----
// Decodes one code point at s[i] (valid UTF-8 assumed); returns its length in `len`.
inline char32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = s.size() - i;
  if (c < 0x80 || n < 2) {
    *len = 1;
    return c;
  }
  auto b = [&](size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  };
  if (c < 0xE0) {
    *len = 2;
    return ((c & 0x1Fu) << 6) | b(1);
  }
  if (c < 0xF0 || n < 4) {
    if (n < 3) {
      *len = n;
      return 0xFFFD;
    }
    *len = 3;
    return ((c & 0x0Fu) << 12) | (b(1) << 6) | b(2);
  }
  *len = 4;
  return ((c & 0x07u) << 18) | (b(1) << 12) | (b(2) << 6) | b(3);
}
void AppendUtf8(std::string* out, char32_t c);
size_t Utf8Len(char32_t c);
std::vector<char32_t> ToCodePoints(std::string_view s);
// Lossy UTF-8 decoding: each maximal invalid subsequence becomes U+FFFD.
bool IsValidUtf8(std::string_view s);
std::string LossyUtf8(std::string_view s, std::vector<uint32_t>* byte_map = nullptr);
// Character properties exactly as HF tokenizers 0.23.2 sees them (tables probed from HF, see
// tests/golden/tokenizers/probe_unicode.py); each names the HF function it reproduces.
bool IsWhitespace(char32_t c);        // Rust char::is_whitespace (= regex crate \s)
bool IsPunctuation(char32_t c);       // is_bert_punc: ASCII punctuation or P* (Unicode 8)
bool IsBertCleanRemoved(char32_t c);  // BertNormalizer clean_text: NUL, U+FFFD, C* but \t\n\r
bool IsChineseChar(char32_t c);       // BertNormalizer handle_chinese_chars
bool IsMarkNonspacing(char32_t c);    // Mn (Unicode 8), BertNormalizer strip_accents
bool IsMark(char32_t c);              // is_combining_mark (Unicode 9), StripAccents
bool IsNumeric(char32_t c);           // Rust char::is_numeric (Digits)
bool IsWordChar(char32_t c);          // regex crate \w (Whitespace, single_word added tokens)
// Relative canonical combining class: 0 for starters; compares like HF's classes.
int CombiningClass(char32_t c);
// UnicodeScripts' fixed_script as a number: 0 = Any (never splits), others compare by equality.
int ScriptOf(char32_t c);
// PCRE2 class items (no brackets) equal to Oniguruma's \p{NAME} (L, Lu, Ll, Lt, Lm, Lo, M, N,
// Nd, P, S, Z) or \w (name "w") in HF tokenizers; nullptr for other names.
const std::string* OnigClassItems(std::string_view name);
// Lowercase mapping as Rust's char::to_lowercase.
void ToLowercase(char32_t c, std::vector<char32_t>* out);
// Canonical (compat=false) or compatibility decomposition of one code point.
void Decompose(char32_t c, bool compat, std::vector<char32_t>* out);
// Canonical primary composition of a pair, or 0 when none.
char32_t Compose(char32_t a, char32_t b);
// Extended grapheme cluster boundaries (byte offsets, including 0 and size).
std::vector<size_t> GraphemeBoundaries(std::string_view s);
// GPT-2 byte <-> unicode char mapping.
const std::vector<char32_t>& BytesToChars();
int CharToByte(char32_t c);  // -1 when not a byte-level char

// PCRE2 regex (UTF + UCP, JIT). Thread-safe for matching.
class Regex {
 public:
  static StatusOr<std::shared_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  // All non-overlapping matches as byte ranges (onig find_iter semantics).
  std::vector<Offsets> FindAll(std::string_view s) const;

 private:
  void* code_ = nullptr;
};

// ---- NormalizedString (normalized.cc) ----
// Normalized text plus, for each normalized byte, the original byte range it came from
// (absolute offsets into the whole input).
struct NormalizedString {
  std::string norm;
  std::vector<Offsets> align;
  uint32_t orig_begin = 0, orig_end = 0;

  static NormalizedString FromOriginal(std::string_view s, uint32_t shift = 0);
  bool empty() const { return norm.empty(); }
  // HF transform(): `dest` lists the new chars with their change (+n inserted, 0 replaced,
  // -n replaced and n following removed); `initial_offset` chars are removed first.
  void Transform(const std::vector<std::pair<char32_t, int>>& dest, size_t initial_offset);
  NormalizedString Slice(size_t start, size_t end) const;
  // Original offsets of a normalized byte range [s, e).
  std::optional<Offsets> ConvertOffsets(size_t s, size_t e) const;

  void Nfd() { Normalize(false, false); }
  void Nfkd() { Normalize(true, false); }
  void Nfc() { Normalize(false, true); }
  void Nfkc() { Normalize(true, true); }
  void Normalize(bool compat, bool compose);
  void Lowercase();
  template <typename F>
  void Filter(F keep);
  template <typename F>
  void Map(F f);
  void LRStrip(bool left, bool right);
  void Prepend(std::string_view s);
  void ReplaceRanges(const std::vector<Offsets>& matches, std::string_view content);
};

template <typename F>
void NormalizedString::Filter(F keep) {
  std::vector<std::pair<char32_t, int>> out;
  out.reserve(norm.size());
  int removed = 0;
  size_t removed_start = 0;
  bool have_last = false;
  char32_t last = 0;
  for (size_t i = 0; i < norm.size();) {
    size_t len;
    char32_t c = DecodeAt(norm, i, &len);
    i += len;
    if (keep(c)) {
      if (have_last) {
        out.emplace_back(last, -removed);
      } else {
        removed_start = static_cast<size_t>(removed);
      }
      last = c;
      have_last = true;
      removed = 0;
    } else {
      ++removed;
    }
  }
  if (have_last) out.emplace_back(last, -removed);
  bool none_removed = have_last && removed_start == 0;
  for (size_t k = 0; none_removed && k < out.size(); ++k) none_removed = out[k].second == 0;
  if (none_removed || norm.empty()) return;
  Transform(out, have_last ? removed_start : static_cast<size_t>(removed));
}

template <typename F>
void NormalizedString::Map(F f) {
  bool changed = false;
  std::vector<std::pair<char32_t, int>> out;
  out.reserve(norm.size());
  for (size_t i = 0; i < norm.size();) {
    size_t len;
    char32_t c = DecodeAt(norm, i, &len);
    i += len;
    char32_t m = f(c);
    changed |= m != c;
    out.emplace_back(m, 0);
  }
  if (changed) Transform(out, 0);
}

// Pattern matches covering the whole string: (range, is_match), as HF find_matches.
using Matches = std::vector<std::pair<Offsets, bool>>;
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
Matches MatchesFromRanges(const std::vector<Offsets>& ranges, size_t len);
template <typename F>
Matches MatchChars(std::string_view s, F pred) {
  Matches m;
  if (s.empty()) {
    m.push_back({{0, 0}, false});
    return m;
  }
  uint32_t last_offset = 0, last_seen = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t c = DecodeAt(s, i, &len);
    last_seen = static_cast<uint32_t>(i + len);
    if (pred(c)) {
      if (last_offset < i) m.push_back({{last_offset, static_cast<uint32_t>(i)}, false});
      m.push_back({{static_cast<uint32_t>(i), static_cast<uint32_t>(i + len)}, true});
      last_offset = static_cast<uint32_t>(i + len);
    }
    i += len;
  }
  if (last_seen > last_offset) m.push_back({{last_offset, last_seen}, false});
  return m;
}
std::vector<NormalizedString> SplitNormalized(const NormalizedString& ns, Matches matches,
                                              SplitBehavior behavior);

std::optional<std::string_view> JStr(JsonValue j, const char* key);
// Pattern {"String": s} or {"Regex": r}: byte ranges of all matches in `s`.
class PatternMatcher {
 public:
  static StatusOr<PatternMatcher> FromJson(JsonValue j) {
    PatternMatcher p;
    if (auto s = JStr(j, "String")) {
      p.literal_ = std::string(*s);
    } else if (auto r = JStr(j, "Regex")) {
      ASSIGN_OR_RETURN(p.regex_, Regex::Compile(*r));
    } else {
      return InvalidArgument("pattern must have String or Regex");
    }
    return p;
  }
  std::vector<Offsets> Find(std::string_view s) const {
    if (regex_) return regex_->FindAll(s);
    std::vector<Offsets> out;
    if (literal_.empty()) return out;
    for (size_t pos = s.find(literal_); pos != std::string_view::npos;
         pos = s.find(literal_, pos + literal_.size())) {
      out.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + literal_.size()));
    }
    return out;
  }

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

// ---- Pipeline pieces ----
struct Token {
  int32_t id;
  std::string value;
  Offsets offsets;  // in the split's normalized bytes
};

struct Split {
  NormalizedString ns;
  std::optional<std::vector<Token>> tokens;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual Status Normalize(NormalizedString* ns) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual Status PreTokenize(std::vector<Split>* splits) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual Status Tokenize(std::string_view s, std::vector<Token>* out) const = 0;
  virtual std::optional<int32_t> TokenToId(std::string_view t) const = 0;
  virtual std::optional<std::string> IdToToken(int32_t id) const = 0;
  virtual size_t VocabSize() const = 0;
  // The model's continuing_subword_prefix ("##" for WordPiece), empty when it has none.
  virtual std::string ContinuingSubwordPrefix() const { return ""; }
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual size_t AddedTokens(bool pair) const = 0;
  // encs has 1 or 2 encodings; may return 1 merged encoding or several.
  virtual Status Process(std::vector<Encoding>* encs, bool add_special_tokens) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status DecodeChain(std::vector<std::string>* tokens) const = 0;
  // A byte-level (GPT-2) decoder: every token decodes to its own bytes, whatever surrounds it.
  virtual bool IsByteLevel() const { return false; }
};

StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(JsonValue j);
StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(JsonValue j);
StatusOr<std::unique_ptr<Model>> MakeModel(JsonValue j);
StatusOr<std::unique_ptr<PostProcessor>> MakePostProcessor(
    JsonValue j, const std::unordered_map<std::string, int32_t>& token_ids);
StatusOr<std::unique_ptr<Decoder>> MakeDecoder(JsonValue j);

// Builders used for vocab.txt-only BERT directories.
std::unique_ptr<Normalizer> MakeBertNormalizer(bool clean_text, bool chinese,
                                               std::optional<bool> strip_accents, bool lowercase);
std::unique_ptr<PreTokenizer> MakeBertPreTokenizer();
std::unique_ptr<Model> MakeWordPiece(std::unordered_map<std::string, int32_t> vocab,
                                     std::string unk, std::string prefix, size_t max_chars);
std::unique_ptr<PostProcessor> MakeBertTemplate(int32_t cls, int32_t sep);
std::unique_ptr<Decoder> MakeWordPieceDecoder(std::string prefix, bool cleanup);
void EncodingFromSplits(const std::vector<Split>& splits, int32_t type_id, int8_t seq_id,
                        Encoding* enc);
void MergeEncodings(std::vector<Encoding>* encs, Encoding* out);
void TrimByteLevelOffsets(Encoding* enc, bool add_prefix_space);

// JSON helpers.
std::optional<std::string_view> JStr(JsonValue j, const char* key);
std::optional<bool> JBool(JsonValue j, const char* key);
std::optional<int64_t> JInt(JsonValue j, const char* key);
std::string JType(JsonValue j);

// ---- Added vocabulary (added_vocab.cc) ----
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

class AddedVocabulary {
 public:
  void Build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  // Splits on added tokens (non-normalized first, then normalizes and splits on normalized ones).
  Status ExtractAndNormalize(std::string_view text, const Normalizer* normalizer,
                             std::vector<Split>* out) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  std::optional<int32_t> TokenToId(std::string_view t) const;
  const AddedToken* ById(int32_t id) const;
  bool IsSpecial(std::string_view content) const;

 private:
  struct MatchSet {
    std::vector<std::string> patterns;
    std::vector<size_t> token_index;
    std::unordered_map<unsigned char, std::vector<size_t>> by_first;  // sorted longest first
  };
  std::vector<std::pair<size_t, Offsets>> FindMatches(std::string_view s,
                                                      const MatchSet& set) const;
  void SplitWith(NormalizedString ns, const MatchSet& set, std::vector<Split>* out) const;
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, size_t> by_content_;
  std::unordered_map<int32_t, size_t> by_id_;
  MatchSet plain_, normalized_;
};

}  // namespace sluice::tok
