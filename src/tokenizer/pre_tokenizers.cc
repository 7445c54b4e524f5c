// Pre-tokenizers: BertPreTokenizer, Whitespace, WhitespaceSplit, Metaspace, ByteLevel, Split,
// Punctuation, Digits, CharDelimiterSplit, UnicodeScripts, Sequence.
#include "tokenizer/internal.h"

namespace sluice::tok {
namespace {

// Applies f(ns) -> pieces to every split not yet tokenized, dropping empty pieces.
template <typename F>
void SplitEach(std::vector<Split>* splits, F f) {
  std::vector<Split> out;
  out.reserve(splits->size());
  for (auto& s : *splits) {
    if (s.tokens) {
      out.push_back(std::move(s));
      continue;
    }
    for (auto& piece : f(s.ns)) {
      if (!piece.empty()) out.push_back(Split{std::move(piece), std::nullopt});
    }
  }
  *splits = std::move(out);
}

StatusOr<SplitBehavior> ParseBehavior(std::string_view b) {
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument("unknown split behavior '" + std::string(b) + "'");
}

class BertPre : public PreTokenizer {
 public:
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [](const NormalizedString& ns) {
      return SplitNormalized(ns, MatchChars(ns.norm, IsWhitespace), SplitBehavior::kRemoved);
    });
    SplitEach(splits, [](const NormalizedString& ns) {
      return SplitNormalized(ns, MatchChars(ns.norm, IsPunctuation), SplitBehavior::kIsolated);
    });
    return Status::Ok();
  }
};

class WhitespaceSplitPre : public PreTokenizer {
 public:
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [](const NormalizedString& ns) {
      return SplitNormalized(ns, MatchChars(ns.norm, IsWhitespace), SplitBehavior::kRemoved);
    });
    return Status::Ok();
  }
};

// HF's Whitespace: the regex crate's \w+|[^\w\s]+, the gaps (whitespace) removed.
class WhitespacePre : public PreTokenizer {
 public:
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [](const NormalizedString& ns) {
      std::vector<Offsets> runs;
      int run_class = 0;  // 0: whitespace (no run), 1: word chars, 2: other
      const std::string& s = ns.norm;
      for (size_t i = 0; i < s.size();) {
        size_t len;
        char32_t c = DecodeAt(s, i, &len);
        int k = IsWordChar(c) ? 1 : IsWhitespace(c) ? 0 : 2;
        if (k != 0 && k == run_class) {
          runs.back().second = static_cast<uint32_t>(i + len);
        } else if (k != 0) {
          runs.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(i + len));
        }
        run_class = k;
        i += len;
      }
      Matches m = MatchesFromRanges(runs, s.size());
      for (auto& x : m) x.second = !x.second;
      return SplitNormalized(ns, std::move(m), SplitBehavior::kRemoved);
    });
    return Status::Ok();
  }
};

// HF's UnicodeScripts: a piece starts at every character whose script (Hiragana and Katakana
// count as Han) differs from the last non-Any script; Any characters (' ', unassigned code
// points) never start a piece. As HF, text before the first piece start (leading Any
// characters) is dropped.
class UnicodeScriptsPre : public PreTokenizer {
 public:
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [](const NormalizedString& ns) {
      std::vector<size_t> cuts;
      int last = -1;
      const std::string& s = ns.norm;
      for (size_t i = 0; i < s.size();) {
        size_t len;
        int sc = ScriptOf(DecodeAt(s, i, &len));
        if (sc != 0 && sc != last) {
          cuts.push_back(i);
          last = sc;
        }
        i += len;
      }
      cuts.push_back(s.size());
      std::vector<NormalizedString> out;
      out.reserve(cuts.size() - 1);
      for (size_t k = 0; k + 1 < cuts.size(); ++k) out.push_back(ns.Slice(cuts[k], cuts[k + 1]));
      return out;
    });
    return Status::Ok();
  }
};

class CharDelimiterPre : public PreTokenizer {
 public:
  explicit CharDelimiterPre(char32_t c) : c_(c) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& ns) {
      return SplitNormalized(ns, MatchChars(ns.norm, [&](char32_t c) { return c == c_; }),
                             SplitBehavior::kRemoved);
    });
    return Status::Ok();
  }

 private:
  char32_t c_;
};

class RegexPre : public PreTokenizer {
 public:
  RegexPre(std::shared_ptr<Regex> re, SplitBehavior b, bool invert)
      : re_(std::move(re)), b_(b), invert_(invert) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& ns) {
      Matches m = MatchesFromRanges(re_->FindAll(ns.norm), ns.norm.size());
      if (invert_) {
        for (auto& x : m) x.second = !x.second;
      }
      return SplitNormalized(ns, std::move(m), b_);
    });
    return Status::Ok();
  }

 private:
  std::shared_ptr<Regex> re_;
  SplitBehavior b_;
  bool invert_;
};

class LiteralSplitPre : public PreTokenizer {
 public:
  LiteralSplitPre(std::string lit, SplitBehavior b, bool invert)
      : lit_(std::move(lit)), b_(b), invert_(invert) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& ns) {
      std::vector<Offsets> r;
      Matches m;
      if (lit_.empty()) {
        m.push_back({{0, static_cast<uint32_t>(ns.norm.size())}, false});
      } else {
        for (size_t p = ns.norm.find(lit_); p != std::string::npos;
             p = ns.norm.find(lit_, p + lit_.size())) {
          r.emplace_back(static_cast<uint32_t>(p), static_cast<uint32_t>(p + lit_.size()));
        }
        m = MatchesFromRanges(r, ns.norm.size());
      }
      if (invert_) {
        for (auto& x : m) x.second = !x.second;
      }
      return SplitNormalized(ns, std::move(m), b_);
    });
    return Status::Ok();
  }

 private:
  std::string lit_;
  SplitBehavior b_;
  bool invert_;
};

class PunctuationPre : public PreTokenizer {
 public:
  explicit PunctuationPre(SplitBehavior b) : b_(b) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& ns) {
      return SplitNormalized(ns, MatchChars(ns.norm, IsPunctuation), b_);
    });
    return Status::Ok();
  }

 private:
  SplitBehavior b_;
};

class DigitsPre : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& ns) {
      return SplitNormalized(ns, MatchChars(ns.norm, IsNumeric),  // Rust char::is_numeric
                             individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
    });
    return Status::Ok();
  }

 private:
  bool individual_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(char32_t rep, PrependScheme scheme, bool split)
      : rep_(rep), scheme_(scheme), split_(split) {
    AppendUtf8(&rep_str_, rep);
  }
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& in) {
      NormalizedString ns = in;
      std::vector<Offsets> spaces;
      for (size_t i = 0; i < ns.norm.size(); ++i) {
        if (ns.norm[i] == ' ') spaces.emplace_back(uint32_t(i), uint32_t(i + 1));
      }
      ns.ReplaceRanges(spaces, rep_str_);
      bool starts = ns.norm.compare(0, rep_str_.size(), rep_str_) == 0;
      if (scheme_ == PrependScheme::kAlways && !starts) ns.Prepend(rep_str_);
      if (scheme_ == PrependScheme::kFirst && !starts && ns.orig_begin == 0) ns.Prepend(rep_str_);
      std::vector<NormalizedString> out;
      if (split_) {
        out = SplitNormalized(ns, MatchChars(ns.norm, [&](char32_t c) { return c == rep_; }),
                              SplitBehavior::kMergedWithNext);
      } else {
        out.push_back(std::move(ns));
      }
      return out;
    });
    return Status::Ok();
  }

 private:
  char32_t rep_;
  std::string rep_str_;
  PrependScheme scheme_;
  bool split_;
};

const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::shared_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    SplitEach(splits, [&](const NormalizedString& in) {
      NormalizedString ns = in;
      if (add_prefix_space_ && (ns.norm.empty() || ns.norm[0] != ' ')) ns.Prepend(" ");
      std::vector<NormalizedString> out;
      if (re_) {
        out = SplitNormalized(ns, MatchesFromRanges(re_->FindAll(ns.norm), ns.norm.size()),
                              SplitBehavior::kIsolated);
      } else {
        out.push_back(std::move(ns));
      }
      return out;
    });
    const auto& table = BytesToChars();
    std::vector<std::pair<char32_t, int>> tr;
    for (auto& s : *splits) {
      if (s.tokens) continue;
      tr.clear();
      const std::string& n = s.ns.norm;
      for (size_t i = 0; i < n.size();) {
        size_t len;
        DecodeAt(n, i, &len);
        for (size_t k = 0; k < len; ++k)
          tr.emplace_back(table[static_cast<unsigned char>(n[i + k])], k > 0 ? 1 : 0);
        i += len;
      }
      s.ns.Transform(tr, 0);
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<Regex> re_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> p) : p_(std::move(p)) {}
  Status PreTokenize(std::vector<Split>* splits) const override {
    for (const auto& p : p_) RETURN_IF_ERROR(p->PreTokenize(splits));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> p_;
};

}  // namespace

// Rewrites an Oniguruma pattern for PCRE2: \s and \S become the White_Space property (what
// Oniguruma and Rust use; PCRE2's UCP \s differs, it lacks U+0085 for instance); \p{X} / \pX
// for the general categories L, Lu, Ll, Lt, Lm, Lo, M, N, Nd, P, S, Z, and \d and \w get the
// code points that Oniguruma's newer Unicode tables add (OnigClassItems); \P{X}, \D, \W
// likewise outside character classes.
std::string RewriteRegex(std::string_view p) {
  static const char* kWs =
      R"(\t-\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWs) : "[" + std::string(kWs) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWs) + "]";
      } else if (n == 'p' || n == 'P' || n == 'd' || n == 'D' || n == 'w' || n == 'W') {
        size_t consumed = 2;
        std::string_view name = n == 'd' || n == 'D' ? "Nd" : "w";
        if (n == 'p' || n == 'P') {
          name = {};
          if (i + 2 < p.size() && p[i + 2] == '{') {
            size_t close = p.find('}', i + 3);
            if (close != std::string_view::npos) {
              name = p.substr(i + 3, close - i - 3);
              consumed = close - i + 1;
            }
          } else if (i + 2 < p.size()) {
            name = p.substr(i + 2, 1);
            consumed = 3;
          }
        }
        bool negated = n == 'P' || n == 'D' || n == 'W';
        const std::string* items = name.empty() ? nullptr : OnigClassItems(name);
        if (items && !in_class) {
          out += (negated ? "[^" : "[") + *items + "]";
        } else if (items && !negated) {
          out += *items;
        } else {
          out += p.substr(i, consumed);
        }
        i += consumed - 2;  // with the ++i below and the loop's: i += consumed
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::unique_ptr<PreTokenizer> MakeBertPreTokenizer() { return std::make_unique<BertPre>(); }

StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(JsonValue j) {
  std::string type = JType(j);
  if (type == "BertPreTokenizer") return MakeBertPreTokenizer();
  if (type == "WhitespaceSplit") return std::unique_ptr<PreTokenizer>(new WhitespaceSplitPre());
  if (type == "Whitespace") return std::unique_ptr<PreTokenizer>(new WhitespacePre());
  if (type == "UnicodeScripts") return std::unique_ptr<PreTokenizer>(new UnicodeScriptsPre());
  if (type == "CharDelimiterSplit") {
    auto d = ToCodePoints(JStr(j, "delimiter").value_or(" "));
    return std::unique_ptr<PreTokenizer>(new CharDelimiterPre(d.empty() ? U' ' : d[0]));
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(auto b, ParseBehavior(JStr(j, "behavior").value_or("Isolated")));
    return std::unique_ptr<PreTokenizer>(new PunctuationPre(b));
  }
  if (type == "Digits") {
    return std::unique_ptr<PreTokenizer>(
        new DigitsPre(JBool(j, "individual_digits").value_or(false)));
  }
  if (type == "Metaspace") {
    auto rep = ToCodePoints(JStr(j, "replacement").value_or("\xE2\x96\x81"));
    PrependScheme scheme = PrependScheme::kAlways;
    if (auto s = JStr(j, "prepend_scheme")) {
      if (*s == "first") scheme = PrependScheme::kFirst;
      if (*s == "never") scheme = PrependScheme::kNever;
    } else if (auto a = JBool(j, "add_prefix_space")) {
      scheme = *a ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    return std::unique_ptr<PreTokenizer>(new MetaspacePre(rep.empty() ? U'\u2581' : rep[0], scheme,
                                                          JBool(j, "split").value_or(true)));
  }
  if (type == "ByteLevel") {
    std::shared_ptr<Regex> re;
    if (JBool(j, "use_regex").value_or(true)) {
      ASSIGN_OR_RETURN(re, Regex::Compile(RewriteRegex(kGpt2Pattern)));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPre(JBool(j, "add_prefix_space").value_or(true), re));
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(auto b, ParseBehavior(JStr(j, "behavior").value_or("Isolated")));
    bool invert = JBool(j, "invert").value_or(false);
    JsonValue pat = j["pattern"];
    if (auto s = JStr(pat, "String")) {
      return std::unique_ptr<PreTokenizer>(new LiteralSplitPre(std::string(*s), b, invert));
    }
    if (auto r = JStr(pat, "Regex")) {
      ASSIGN_OR_RETURN(auto re, Regex::Compile(RewriteRegex(*r)));
      return std::unique_ptr<PreTokenizer>(new RegexPre(re, b, invert));
    }
    return InvalidArgument("Split pre-tokenizer without pattern");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> v;
    simdjson::dom::array arr;
    if (j["pretokenizers"].get(arr) != simdjson::SUCCESS)
      return InvalidArgument("Sequence pre-tokenizer without pretokenizers");
    for (auto e : arr) {
      ASSIGN_OR_RETURN(auto p, MakePreTokenizer(e));
      v.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(v)));
  }
  return Unsupported("pre-tokenizer type '" + type + "'");
}

}  // namespace sluice::tok
