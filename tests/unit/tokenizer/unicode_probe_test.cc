// Every code point through sluice's normalizers and pre-tokenizers, compared with what HF
// tokenizers answered for the same probe strings (tests/fixtures/tokenizers/unicode_probe.json.gz,
// written on the GPU machine by tests/golden/tokenizers/probe_unicode.py). The probe strings are
// built exactly as the generator builds them.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/internal.h"

namespace sluice {
namespace {

constexpr size_t kNumCp = 0x110000;
constexpr size_t kChunk = 1 << 15;

std::string Gunzip(const std::string& path) {
  std::string out, cmd = "gzip -dc '" + path + "'";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

std::string U8(char32_t c) {
  std::string s;
  tok::AppendUtf8(&s, c);
  return s;
}

std::string Hex(char32_t c) {
  char b[16];
  std::snprintf(b, sizeof(b), "U+%04X", static_cast<unsigned>(c));
  return b;
}

const std::vector<char32_t>& AllCps() {
  static const std::vector<char32_t> v = [] {
    std::vector<char32_t> r;
    for (char32_t c = 0; c < kNumCp; ++c)
      if (c < 0xD800 || c > 0xDFFF) r.push_back(c);
    return r;
  }();
  return v;
}

class Probe {
 public:
  static const Probe& Get() {
    static const Probe p;
    return p;
  }
  bool ok() const { return ok_; }
  std::vector<uint8_t> Set(const char* name) const {
    std::vector<uint8_t> s(kNumCp, 0);
    simdjson::dom::array a;
    EXPECT_EQ(root_["sets"][name].get(a), simdjson::SUCCESS) << name;
    for (auto r : a) {
      auto lo = static_cast<char32_t>(r.at(0).get_int64().value());
      auto hi = static_cast<char32_t>(r.at(1).get_int64().value());
      for (char32_t c = lo; c <= hi; ++c) s[c] = 1;
    }
    return s;
  }
  std::unordered_map<char32_t, std::string> Map(const char* name) const {
    std::unordered_map<char32_t, std::string> m;
    simdjson::dom::array a;
    EXPECT_EQ(root_["maps"][name].get(a), simdjson::SUCCESS) << name;
    for (auto r : a)
      m[static_cast<char32_t>(r.at(0).get_int64().value())] =
          std::string(r.at(1).get_string().value());
    return m;
  }
  simdjson::dom::element root() const { return root_; }

 private:
  Probe() {
    json_ = Gunzip(std::string(SLUICE_FIXTURES_DIR) + "/tokenizers/unicode_probe.json.gz");
    ok_ = !json_.empty() && parser_.parse(json_).get(root_) == simdjson::SUCCESS;
  }
  std::string json_;
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
  bool ok_ = false;
};

template <typename T>
std::unique_ptr<T> Make(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element e = parser.parse(json).value();
  if constexpr (std::is_same_v<T, tok::Normalizer>) {
    auto r = tok::MakeNormalizer(e);
    EXPECT_TRUE(r.ok()) << json;
    return r.ok() ? std::move(r).value() : nullptr;
  } else {
    auto r = tok::MakePreTokenizer(e);
    EXPECT_TRUE(r.ok()) << json;
    return r.ok() ? std::move(r).value() : nullptr;
  }
}

// 'r' removed, 'i' isolated, 'm' merged, for every code point c in "sep c sep c ... sep".
std::vector<char> SplitClasses(const tok::PreTokenizer& pre, const std::string& sep) {
  std::vector<char> cls(kNumCp, 0);
  const auto& cps = AllCps();
  for (size_t i = 0; i < cps.size(); i += kChunk) {
    size_t n = std::min(kChunk, cps.size() - i);
    std::string s = sep;
    std::vector<std::pair<uint32_t, uint32_t>> pos;
    for (size_t k = 0; k < n; ++k) {
      uint32_t b = static_cast<uint32_t>(s.size());
      tok::AppendUtf8(&s, cps[i + k]);
      pos.emplace_back(b, static_cast<uint32_t>(s.size()));
      s += sep;
    }
    std::vector<tok::Split> splits;
    splits.push_back({tok::NormalizedString::FromOriginal(s), std::nullopt});
    EXPECT_TRUE(pre.PreTokenize(&splits).ok());
    std::vector<uint8_t> cover(s.size() + 1, 0);
    std::vector<uint32_t> piece_end(s.size() + 1, 0);
    for (const auto& sp : splits) {
      for (uint32_t b = sp.ns.orig_begin; b < sp.ns.orig_end; ++b) cover[b] = 1;
      piece_end[sp.ns.orig_begin] = sp.ns.orig_end;
    }
    for (size_t k = 0; k < n; ++k) {
      auto [b, e] = pos[k];
      cls[cps[i + k]] = piece_end[b] == e ? 'i' : cover[b] ? 'm' : 'r';
    }
  }
  return cls;
}

// Checks cls[c] == want_class exactly for the code points of `set`, and != elsewhere.
void ExpectClass(const std::vector<char>& cls, char want_class, const std::vector<uint8_t>& set,
                 const std::string& what) {
  size_t bad = 0;
  std::string ex;
  for (char32_t c : AllCps()) {
    if ((cls[c] == want_class) != (set[c] != 0)) {
      if (++bad <= 10) ex += Hex(c) + "(" + std::string(1, cls[c]) + ") ";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << ex;
}

// Normalizes "c1 SEP c2 SEP ..." and compares each piece with HF's output (identity unless
// `want` says otherwise).
void ExpectNormalizer(const tok::Normalizer& norm, const std::string& sep,
                      const std::unordered_map<char32_t, std::string>& want,
                      const std::string& what) {
  const auto& all = AllCps();
  size_t bad = 0;
  std::string ex;
  auto check = [&](char32_t c, const std::string& got) {
    auto it = want.find(c);
    const std::string expected = it == want.end() ? U8(c) : it->second;
    if (got != expected && ++bad <= 10)
      ex += Hex(c) + " got '" + got + "' want '" + expected + "' ";
  };
  char32_t sep_cp = tok::ToCodePoints(sep)[0];
  for (size_t i = 0; i < all.size(); i += kChunk) {
    std::vector<char32_t> chunk;
    for (size_t k = i; k < std::min(all.size(), i + kChunk); ++k)
      if (all[k] != sep_cp) chunk.push_back(all[k]);
    std::string s;
    for (size_t k = 0; k < chunk.size(); ++k) {
      if (k) s += sep;
      tok::AppendUtf8(&s, chunk[k]);
    }
    auto ns = tok::NormalizedString::FromOriginal(s);
    ASSERT_TRUE(norm.Normalize(&ns).ok());
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t p = ns.norm.find(sep); p != std::string::npos; p = ns.norm.find(sep, start)) {
      parts.push_back(ns.norm.substr(start, p - start));
      start = p + sep.size();
    }
    parts.push_back(ns.norm.substr(start));
    ASSERT_EQ(parts.size(), chunk.size()) << what << " lost a separator near " << Hex(chunk[0]);
    for (size_t k = 0; k < chunk.size(); ++k) check(chunk[k], parts[k]);
  }
  auto ns = tok::NormalizedString::FromOriginal(sep);
  ASSERT_TRUE(norm.Normalize(&ns).ok());
  check(sep_cp, ns.norm);
  EXPECT_EQ(bad, 0u) << what << ": " << ex;
}

// Normalizes each string (joined with \x01, which every NFx leaves alone and which blocks
// reordering and composition).
std::vector<std::string> NormalizeAll(const tok::Normalizer& norm,
                                      const std::vector<std::string>& in) {
  std::string s;
  for (size_t k = 0; k < in.size(); ++k) {
    if (k) s += '\x01';
    s += in[k];
  }
  auto ns = tok::NormalizedString::FromOriginal(s);
  EXPECT_TRUE(norm.Normalize(&ns).ok());
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t p = ns.norm.find('\x01'); p != std::string::npos; p = ns.norm.find('\x01', start)) {
    parts.push_back(ns.norm.substr(start, p - start));
    start = p + 1;
  }
  parts.push_back(ns.norm.substr(start));
  return parts;
}

class UnicodeProbe : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Probe::Get().ok()) << "unicode_probe.json.gz missing"; }
  const Probe& p() { return Probe::Get(); }
};

TEST_F(UnicodeProbe, BertPreTokenizer) {
  auto cls = SplitClasses(*Make<tok::PreTokenizer>(R"({"type":"BertPreTokenizer"})"), "x");
  ExpectClass(cls, 'r', p().Set("bert_pre_ws"), "whitespace");
  ExpectClass(cls, 'i', p().Set("bert_pre_punct"), "punctuation");
}

TEST_F(UnicodeProbe, PunctuationWhitespaceSplitDigits) {
  ExpectClass(SplitClasses(
                  *Make<tok::PreTokenizer>(R"({"type":"Punctuation","behavior":"Isolated"})"), "x"),
              'i', p().Set("punctuation"), "Punctuation");
  ExpectClass(SplitClasses(*Make<tok::PreTokenizer>(R"({"type":"WhitespaceSplit"})"), "x"), 'r',
              p().Set("whitespace_split"), "WhitespaceSplit");
  ExpectClass(
      SplitClasses(*Make<tok::PreTokenizer>(R"({"type":"Digits","individual_digits":true})"), "x"),
      'i', p().Set("digits"), "Digits");
}

TEST_F(UnicodeProbe, WhitespacePreTokenizer) {
  auto cls = SplitClasses(*Make<tok::PreTokenizer>(R"({"type":"Whitespace"})"), "x");
  ExpectClass(cls, 'm', p().Set("whitespace_pre_word"), "\\w");
  ExpectClass(cls, 'r', p().Set("whitespace_pre_space"), "\\s");
  ExpectClass(cls, 'i', p().Set("whitespace_pre_other"), "[^\\w\\s]");
}

std::string BertJson(bool clean, bool chinese, bool strip, bool lower) {
  auto b = [](bool v) { return v ? "true" : "false"; };
  return std::string(R"({"type":"BertNormalizer","clean_text":)") + b(clean) +
         R"(,"handle_chinese_chars":)" + b(chinese) + R"(,"strip_accents":)" + b(strip) +
         R"(,"lowercase":)" + b(lower) + "}";
}

TEST_F(UnicodeProbe, BertNormalizer) {
  std::unordered_map<char32_t, std::string> clean;
  auto removed = p().Set("clean_removed"), space = p().Set("clean_space");
  for (char32_t c : AllCps()) {
    if (removed[c]) clean[c] = "";
    if (space[c]) clean[c] = " ";
  }
  ExpectNormalizer(*Make<tok::Normalizer>(BertJson(true, false, false, false)), "x", clean,
                   "clean_text");
  std::unordered_map<char32_t, std::string> chinese;
  auto ch = p().Set("chinese");
  for (char32_t c : AllCps())
    if (ch[c]) chinese[c] = " " + U8(c) + " ";
  ExpectNormalizer(*Make<tok::Normalizer>(BertJson(false, true, false, false)), "\x01", chinese,
                   "handle_chinese_chars");
  ExpectNormalizer(*Make<tok::Normalizer>(BertJson(false, false, true, false)), "\x01",
                   p().Map("bert_strip_accents"), "strip_accents");
  ExpectNormalizer(*Make<tok::Normalizer>(BertJson(false, false, false, true)), "\x01",
                   p().Map("bert_lowercase"), "lowercase");
}

TEST_F(UnicodeProbe, LowercaseAndStripAccents) {
  ExpectNormalizer(*Make<tok::Normalizer>(R"({"type":"Lowercase"})"), "\x01", p().Map("lowercase"),
                   "Lowercase");
  std::unordered_map<char32_t, std::string> strip;
  auto removed = p().Set("strip_accents_removed");
  for (char32_t c : AllCps())
    if (removed[c]) strip[c] = "";
  ExpectNormalizer(*Make<tok::Normalizer>(R"({"type":"StripAccents"})"), "\x01", strip,
                   "StripAccents");
}

TEST_F(UnicodeProbe, UnicodeNormalForms) {
  for (const char* nf : {"NFD", "NFKD", "NFC", "NFKC"}) {
    std::string lower = nf;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(ch));
    ExpectNormalizer(*Make<tok::Normalizer>(std::string(R"({"type":")") + nf + "\"}"), "\x01",
                     p().Map(lower.c_str()), nf);
  }
}

TEST_F(UnicodeProbe, CanonicalOrdering) {
  std::map<char32_t, int> rank;
  simdjson::dom::array a;
  ASSERT_EQ(p().root()["ccc_rank"].get(a), simdjson::SUCCESS);
  for (auto r : a)
    rank[static_cast<char32_t>(r.at(0).get_int64().value())] =
        static_cast<int>(r.at(1).get_int64().value());
  auto nfd = Make<tok::Normalizer>(R"({"type":"NFD"})");
  auto dec = p().Map("nfd");
  // Non-starters: c + U+0334 (class 1) or U+0345 (class 240) + c reorders.
  std::vector<char32_t> cand;
  std::vector<std::string> after, before;
  for (char32_t c : AllCps()) {
    if (c == 1 || dec.count(c)) continue;
    cand.push_back(c);
    after.push_back(U8(c) + "\xCC\xB4");
    before.push_back("\xCD\x85" + U8(c));
  }
  auto ra = NormalizeAll(*nfd, after), rb = NormalizeAll(*nfd, before);
  ASSERT_EQ(ra.size(), cand.size());
  ASSERT_EQ(rb.size(), cand.size());
  size_t bad = 0;
  std::string ex;
  for (size_t k = 0; k < cand.size(); ++k) {
    bool ns = ra[k] != after[k] || rb[k] != before[k];
    if (ns != (rank.count(cand[k]) > 0) && ++bad <= 10) ex += Hex(cand[k]) + " ";
  }
  EXPECT_EQ(bad, 0u) << "non-starters: " << ex;
  // Relative order of every pair of non-starters.
  for (const auto& [m, rm] : rank) {
    std::vector<std::string> pairs;
    std::vector<char32_t> ns;
    for (const auto& [n, rn] : rank) {
      ns.push_back(n);
      pairs.push_back(U8(m) + U8(n));
    }
    auto out = NormalizeAll(*nfd, pairs);
    ASSERT_EQ(out.size(), ns.size());
    for (size_t k = 0; k < ns.size(); ++k) {
      bool swapped = out[k] == U8(ns[k]) + U8(m) && ns[k] != m;
      if (swapped != (rm > rank[ns[k]]) && ++bad <= 10)
        ex += Hex(m) + "+" + Hex(ns[k]) + (swapped ? " swapped " : " kept ");
    }
  }
  EXPECT_EQ(bad, 0u) << "pairs: " << ex;
}

TEST_F(UnicodeProbe, NewerDecompositions) {
  // Python's (newer) decompositions through HF: marks and composites HF does not know.
  auto nfd = Make<tok::Normalizer>(R"({"type":"NFD"})");
  auto nfc = Make<tok::Normalizer>(R"({"type":"NFC"})");
  auto nfkc = Make<tok::Normalizer>(R"({"type":"NFKC"})");
  simdjson::dom::array a;
  ASSERT_EQ(p().root()["seq_nfd_nfc"].get(a), simdjson::SUCCESS);
  std::vector<std::string> in, want_d, want_c;
  for (auto r : a) {
    in.emplace_back(r.at(1).get_string().value());
    want_d.emplace_back(r.at(2).get_string().value());
    want_c.emplace_back(r.at(3).get_string().value());
  }
  EXPECT_GT(in.size(), 2000u);
  EXPECT_EQ(NormalizeAll(*nfd, in), want_d);
  EXPECT_EQ(NormalizeAll(*nfc, in), want_c);
  ASSERT_EQ(p().root()["seq_nfkc"].get(a), simdjson::SUCCESS);
  in.clear();
  want_c.clear();
  for (auto r : a) {
    in.emplace_back(r.at(1).get_string().value());
    want_c.emplace_back(r.at(2).get_string().value());
  }
  EXPECT_GT(in.size(), 2000u);
  EXPECT_EQ(NormalizeAll(*nfkc, in), want_c);
}

TEST_F(UnicodeProbe, Scripts) {
  auto any = p().Set("script_any");
  size_t bad = 0;
  std::string ex;
  for (char32_t c : AllCps())
    if ((tok::ScriptOf(c) == 0) != (any[c] != 0) && ++bad <= 10) ex += Hex(c) + " ";
  EXPECT_EQ(bad, 0u) << ex;
  EXPECT_EQ(tok::ScriptOf(' '), 0);
  EXPECT_EQ(tok::ScriptOf('a'), tok::ScriptOf('A'));
  EXPECT_NE(tok::ScriptOf('a'), tok::ScriptOf('0'));
  EXPECT_EQ(tok::ScriptOf('0'), tok::ScriptOf('$'));
  for (char32_t c : {U'\u3044', U'\u30B0', U'\u30FC', U'\u592A'})
    EXPECT_EQ(tok::ScriptOf(c), tok::ScriptOf(U'\u4EAC')) << Hex(c);
  // HF's own unit tests of the pre-tokenizer, and its leading-Any quirk.
  auto pre = Make<tok::PreTokenizer>(R"({"type":"UnicodeScripts"})");
  auto pieces = [&](const std::string& s) {
    std::vector<tok::Split> splits;
    splits.push_back({tok::NormalizedString::FromOriginal(s), std::nullopt});
    EXPECT_TRUE(pre->PreTokenize(&splits).ok());
    std::vector<std::string> out;
    for (const auto& sp : splits) out.push_back(sp.ns.norm);
    return out;
  };
  EXPECT_EQ(pieces("どこで生れ。Yes"), (std::vector<std::string>{"どこで生れ", "。", "Yes"}));
  EXPECT_EQ(pieces("Apples are りんご 林檎"),
            (std::vector<std::string>{"Apples are ", "りんご 林檎"}));
  EXPECT_EQ(pieces("  ab"), (std::vector<std::string>{"ab"}));
  EXPECT_TRUE(pieces("   ").empty());
}

// The Split pre-tokenizer's regexes run on PCRE2, HF's on Oniguruma (newer Unicode tables):
// RewriteRegex adds what Oniguruma adds to the classes that real split patterns use. (\p{C} and
// \p{Cn}, which shrink as code points get assigned, are not rewritten: the probe has onig_C.)
TEST_F(UnicodeProbe, RegexClasses) {
  const std::vector<std::pair<const char*, const char*>> classes = {
      {"L", R"(\\p{L})"},   {"N", R"(\\p{N})"},   {"s", R"(\\s)"},      {"w", R"(\\w)"},
      {"d", R"(\\d)"},      {"M", R"(\\p{M})"},   {"P", R"(\\p{P})"},   {"S", R"(\\p{S})"},
      {"Lu", R"(\\p{Lu})"}, {"Ll", R"(\\p{Ll})"}, {"Lt", R"(\\p{Lt})"}, {"Lm", R"(\\p{Lm})"},
      {"Lo", R"(\\p{Lo})"}, {"Nd", R"(\\p{Nd})"}, {"Z", R"(\\p{Z})"}};
  for (const auto& [name, pat] : classes) {
    std::string json = std::string(R"({"type":"Split","pattern":{"Regex":")") + pat +
                       R"("},"behavior":"Removed"})";
    auto cls = SplitClasses(*Make<tok::PreTokenizer>(json), "\x01");
    ExpectClass(cls, 'r', p().Set(("onig_" + std::string(name)).c_str()), pat);
  }
}

}  // namespace
}  // namespace sluice
