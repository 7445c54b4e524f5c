// Normalizers: BertNormalizer, NFC/NFD/NFKC/NFKD, Lowercase, StripAccents, Strip, Replace,
// Prepend, Precompiled (sentencepiece charsmap), Nmt, Sequence.
#include <cstring>

#include "tokenizer/internal.h"

namespace sluice::tok {

std::optional<std::string_view> JStr(JsonValue j, const char* key) {
  std::string_view v;
  if (j.is_object() && j[key].get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}
std::optional<bool> JBool(JsonValue j, const char* key) {
  bool v;
  if (j.is_object() && j[key].get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}
std::optional<int64_t> JInt(JsonValue j, const char* key) {
  int64_t v;
  if (j.is_object() && j[key].get(v) == simdjson::SUCCESS) return v;
  uint64_t u;
  if (j.is_object() && j[key].get(u) == simdjson::SUCCESS) return static_cast<int64_t>(u);
  return std::nullopt;
}
std::string JType(JsonValue j) { return std::string(JStr(j, "type").value_or("")); }

namespace {

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, std::optional<bool> strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip.value_or(lower)), lower_(lower) {}
  Status Normalize(NormalizedString* ns) const override {
    if (clean_) {
      ns->Filter([](char32_t c) { return !IsBertCleanRemoved(c); });
      ns->Map([](char32_t c) {
        return (c == '\t' || c == '\n' || c == '\r' || IsWhitespace(c)) ? U' ' : c;
      });
    }
    if (chinese_) {
      bool any = false;
      for (size_t i = 0; i < ns->norm.size() && !any;) {
        size_t len;
        any = IsChineseChar(DecodeAt(ns->norm, i, &len));
        i += len;
      }
      if (any) {
        std::vector<std::pair<char32_t, int>> out;
        for (size_t i = 0; i < ns->norm.size();) {
          size_t len;
          char32_t c = DecodeAt(ns->norm, i, &len);
          i += len;
          if (IsChineseChar(c)) {
            out.emplace_back(U' ', 0);
            out.emplace_back(c, 1);
            out.emplace_back(U' ', 1);
          } else {
            out.emplace_back(c, 0);
          }
        }
        ns->Transform(out, 0);
      }
    }
    if (strip_) {
      ns->Nfd();
      ns->Filter([](char32_t c) { return !IsMarkNonspacing(c); });
    }
    if (lower_) ns->Lowercase();
    return Status::Ok();
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  UnicodeNormalizer(bool compat, bool compose) : compat_(compat), compose_(compose) {}
  Status Normalize(NormalizedString* ns) const override {
    ns->Normalize(compat_, compose_);
    return Status::Ok();
  }

 private:
  bool compat_, compose_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  Status Normalize(NormalizedString* ns) const override {
    ns->Lowercase();
    return Status::Ok();
  }
};

// HF's StripAccents removes every combining mark (Mn, Mc, Me), unlike BertNormalizer's
// strip_accents which removes only Mn.
class StripAccents : public Normalizer {
 public:
  Status Normalize(NormalizedString* ns) const override {
    ns->Filter([](char32_t c) { return !IsMark(c); });
    return Status::Ok();
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool l, bool r) : l_(l), r_(r) {}
  Status Normalize(NormalizedString* ns) const override {
    ns->LRStrip(l_, r_);
    return Status::Ok();
  }

 private:
  bool l_, r_;
};

class NmtNormalizer : public Normalizer {
 public:
  Status Normalize(NormalizedString* ns) const override {
    ns->Filter([](char32_t c) {
      return !((c >= 1 && c <= 8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F ||
               c == 0x8F || c == 0x9F);
    });
    ns->Map([](char32_t c) -> char32_t {
      if (c == 9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 ||
          (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
          c == 0xFEFF || c == 0xFFFD)
        return U' ';
      return c;
    });
    return Status::Ok();
  }
};

}  // namespace

namespace {

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(PatternMatcher p, std::string content)
      : p_(std::move(p)), content_(std::move(content)) {}
  Status Normalize(NormalizedString* ns) const override {
    ns->ReplaceRanges(p_.Find(ns->norm), content_);
    return Status::Ok();
  }

 private:
  PatternMatcher p_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string s) : s_(std::move(s)) {}
  Status Normalize(NormalizedString* ns) const override {
    ns->Prepend(s_);
    return Status::Ok();
  }

 private:
  std::string s_;
};

bool Base64Decode(std::string_view in, std::string* out) {
  static const std::vector<int> table = [] {
    std::vector<int> t(256, -1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = i;
    return t;
  }();
  uint32_t buf = 0;
  int bits = 0;
  for (char ch : in) {
    if (ch == '=' || ch == '\n' || ch == '\r') continue;
    int v = table[static_cast<unsigned char>(ch)];
    if (v < 0) return false;
    buf = (buf << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((buf >> bits) & 0xFF));
    }
  }
  return true;
}

// sentencepiece precompiled charsmap: u32 trie size, darts double-array, normalized strings.
class Precompiled : public Normalizer {
 public:
  static StatusOr<std::unique_ptr<Precompiled>> Make(std::string_view b64) {
    auto p = std::make_unique<Precompiled>();
    std::string blob;
    if (!Base64Decode(b64, &blob)) return InvalidArgument("bad precompiled_charsmap base64");
    if (blob.empty()) return p;
    if (blob.size() < 4) return InvalidArgument("precompiled_charsmap too short");
    uint32_t trie_size;
    std::memcpy(&trie_size, blob.data(), 4);
    if (trie_size > blob.size() - 4 || trie_size % 4 != 0)
      return InvalidArgument("precompiled_charsmap: bad trie size");
    p->array_.resize(trie_size / 4);
    std::memcpy(p->array_.data(), blob.data() + 4, trie_size);
    p->normalized_ = blob.substr(4 + trie_size);
    return p;
  }
  // First (shortest) prefix match of `chunk`, as HF's Precompiled::transform.
  std::optional<std::string_view> Lookup(std::string_view chunk) const {
    if (array_.empty()) return std::nullopt;
    size_t node = 0;
    uint32_t unit = array_[0];
    node ^= Offset(unit);
    for (char ch : chunk) {
      auto c = static_cast<unsigned char>(ch);
      if (c == 0) break;
      node ^= c;
      if (node >= array_.size()) return std::nullopt;
      unit = array_[node];
      if ((unit & ((1u << 31) | 0xFFu)) != c) return std::nullopt;
      node ^= Offset(unit);
      if (node >= array_.size()) return std::nullopt;
      if ((unit >> 8) & 1u) {
        size_t index = array_[node] & ((1u << 31) - 1);
        if (index >= normalized_.size()) return std::nullopt;
        size_t end = normalized_.find('\0', index);
        if (end == std::string::npos) end = normalized_.size();
        return std::string_view(normalized_).substr(index, end - index);
      }
    }
    return std::nullopt;
  }
  Status Normalize(NormalizedString* ns) const override {
    if (array_.empty()) return Status::Ok();
    std::vector<std::pair<char32_t, int>> tr;
    tr.reserve(ns->norm.size());
    bool modified = false;
    auto replace = [&](std::string_view old_part, std::string_view new_part) {
      auto nc = ToCodePoints(new_part);
      int old_count = static_cast<int>(ToCodePoints(old_part).size());
      int diff = static_cast<int>(nc.size()) - old_count;
      for (char32_t c : nc) tr.emplace_back(c, 0);
      if (diff > 0) {
        for (int k = 0; k < diff && k < static_cast<int>(tr.size()); ++k)
          tr[tr.size() - 1 - k].second = 1;
      } else if (diff < 0 && !tr.empty()) {
        tr.back().second += diff;
      }
    };
    const std::string& s = ns->norm;
    auto bounds = GraphemeBoundaries(s);
    for (size_t g = 0; g + 1 < bounds.size(); ++g) {
      std::string_view grapheme = std::string_view(s).substr(bounds[g], bounds[g + 1] - bounds[g]);
      if (grapheme.size() < 6) {
        if (auto n = Lookup(grapheme)) {
          modified = true;
          replace(grapheme, *n);
          continue;
        }
      }
      for (size_t i = 0; i < grapheme.size();) {
        size_t len;
        char32_t c = DecodeAt(grapheme, i, &len);
        std::string_view part = grapheme.substr(i, len);
        if (auto n = Lookup(part)) {
          modified = true;
          replace(part, *n);
        } else {
          tr.emplace_back(c, 0);
        }
        i += len;
      }
    }
    if (modified) ns->Transform(tr, 0);
    return Status::Ok();
  }

 private:
  static size_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }
  std::vector<uint32_t> array_;
  std::string normalized_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> n) : n_(std::move(n)) {}
  Status Normalize(NormalizedString* ns) const override {
    for (const auto& n : n_) RETURN_IF_ERROR(n->Normalize(ns));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> n_;
};

}  // namespace

std::unique_ptr<Normalizer> MakeBertNormalizer(bool clean_text, bool chinese,
                                               std::optional<bool> strip_accents, bool lowercase) {
  return std::make_unique<BertNormalizer>(clean_text, chinese, strip_accents, lowercase);
}

StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(JsonValue j) {
  std::string type = JType(j);
  if (type == "BertNormalizer") {
    std::optional<bool> strip = JBool(j, "strip_accents");
    return std::unique_ptr<Normalizer>(MakeBertNormalizer(
        JBool(j, "clean_text").value_or(true), JBool(j, "handle_chinese_chars").value_or(true),
        strip, JBool(j, "lowercase").value_or(true)));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(false, true));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(false, false));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(true, true));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(true, false));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccents());
  if (type == "Nmt") return std::unique_ptr<Normalizer>(new NmtNormalizer());
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(new StripNormalizer(JBool(j, "strip_left").value_or(true),
                                                           JBool(j, "strip_right").value_or(true)));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(auto p, PatternMatcher::FromJson(j["pattern"]));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(p), std::string(JStr(j, "content").value_or(""))));
  }
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(
        new PrependNormalizer(std::string(JStr(j, "prepend").value_or(""))));
  }
  if (type == "Precompiled") {
    ASSIGN_OR_RETURN(auto p, Precompiled::Make(JStr(j, "precompiled_charsmap").value_or("")));
    return std::unique_ptr<Normalizer>(std::move(p));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> v;
    simdjson::dom::array arr;
    if (j["normalizers"].get(arr) != simdjson::SUCCESS)
      return InvalidArgument("Sequence normalizer without normalizers");
    for (auto e : arr) {
      if (e.is_null()) continue;
      ASSIGN_OR_RETURN(auto n, MakeNormalizer(e));
      v.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(v)));
  }
  return Unsupported("normalizer type '" + type + "'");
}

}  // namespace sluice::tok
