// Unicode and UTF-8 helpers. Character properties come from tables probed from HF tokenizers
// (unicode_tables_hf.inc); utf8proc supplies decompositions, compositions and graphemes, PCRE2
// the regexes.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>

#include "tokenizer/internal.h"

namespace sluice::tok {

size_t Utf8Len(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void AppendUtf8(std::string* out, char32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::vector<char32_t> ToCodePoints(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    out.push_back(DecodeAt(s, i, &len));
    i += len;
  }
  return out;
}

namespace {
// Length of the valid UTF-8 sequence at s[i], or the negative length of the maximal invalid
// subpart (at least 1) to replace with U+FFFD.
int ValidSeqLen(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2, hi = 0x9F;
  } else if (c == 0xF0) {
    need = 3, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    unsigned char x = b(i + k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return -k;
  }
  return need + 1;
}
}  // namespace

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int n = ValidSeqLen(s, i);
    if (n < 0) return false;
    i += n;
  }
  return true;
}

std::string LossyUtf8(std::string_view s, std::vector<uint32_t>* byte_map) {
  std::string out;
  out.reserve(s.size() + 8);
  if (byte_map) byte_map->clear();
  for (size_t i = 0; i < s.size();) {
    int n = ValidSeqLen(s, i);
    size_t start_out = out.size();
    if (n > 0) {
      out.append(s.substr(i, n));
    } else {
      out.append("\xEF\xBF\xBD");
      n = -n;
    }
    if (byte_map) byte_map->insert(byte_map->end(), out.size() - start_out, uint32_t(i));
    i += n;
  }
  if (byte_map) byte_map->push_back(static_cast<uint32_t>(s.size()));
  return out;
}

namespace {

struct CpRange {
  char32_t lo, hi;
};
struct CpMap {
  char32_t cp, v;
};
struct CpMulti {
  char32_t cp;
  char32_t v[3];
};
struct ScriptRun {
  char32_t lo;
  uint16_t script;
};

// The HF tables: what HF tokenizers itself answered for every code point (see the header).
#include "tokenizer/unicode_tables_hf.inc"

template <size_t N>
constexpr bool InRanges(const CpRange (&t)[N], char32_t c) {
  const CpRange* r = std::partition_point(t, t + N, [c](const CpRange& x) { return x.hi < c; });
  return r != t + N && r->lo <= c;
}

template <size_t N>
const CpMap* FindCp(const CpMap (&t)[N], char32_t c) {
  const CpMap* r =
      std::lower_bound(t, t + N, c, [](const CpMap& x, char32_t v) { return x.cp < v; });
  return r != t + N && r->cp == c ? r : nullptr;
}

// Latin-1 fast path: one bit per property (built at compile time).
enum : uint8_t {
  kBitWhitespace = 1,
  kBitPunct = 2,
  kBitBertRemoved = 4,
  kBitNumeric = 8,
  kBitWord = 16,
};
constexpr std::array<uint8_t, 256> kLatin1 = [] {
  std::array<uint8_t, 256> t{};
  for (char32_t c = 0; c < 256; ++c) {
    uint8_t b = 0;
    if (InRanges(kHfWhitespace, c)) b |= kBitWhitespace;
    if (InRanges(kHfPunctuation, c)) b |= kBitPunct;
    if (InRanges(kHfBertRemoved, c)) b |= kBitBertRemoved;
    if (InRanges(kHfNumeric, c)) b |= kBitNumeric;
    if (InRanges(kHfWordChar, c)) b |= kBitWord;
    t[c] = b;
  }
  return t;
}();

}  // namespace

bool IsWhitespace(char32_t c) {
  return c < 256 ? (kLatin1[c] & kBitWhitespace) != 0 : InRanges(kHfWhitespace, c);
}

bool IsPunctuation(char32_t c) {
  return c < 256 ? (kLatin1[c] & kBitPunct) != 0 : InRanges(kHfPunctuation, c);
}

bool IsBertCleanRemoved(char32_t c) {
  return c < 256 ? (kLatin1[c] & kBitBertRemoved) != 0 : InRanges(kHfBertRemoved, c);
}

bool IsChineseChar(char32_t c) { return c >= 0x3400 && InRanges(kHfChinese, c); }

// No mark below U+0300 (checked by unicode_probe_test).
bool IsMarkNonspacing(char32_t c) { return c >= 0x300 && InRanges(kHfBertMn, c); }

bool IsNumeric(char32_t c) {
  return c < 256 ? (kLatin1[c] & kBitNumeric) != 0 : InRanges(kHfNumeric, c);
}

bool IsMark(char32_t c) { return c >= 0x300 && InRanges(kHfCombiningMark, c); }

bool IsWordChar(char32_t c) {
  return c < 256 ? (kLatin1[c] & kBitWord) != 0 : InRanges(kHfWordChar, c);
}

int CombiningClass(char32_t c) {
  if (c < 0x300) return 0;
  const CpMap* m = FindCp(kHfCccRank, c);
  return m ? static_cast<int>(m->v) : 0;
}

int ScriptOf(char32_t c) {
  const ScriptRun* r = std::partition_point(std::begin(kHfScripts), std::end(kHfScripts),
                                            [c](const ScriptRun& x) { return x.lo <= c; });
  return r == std::begin(kHfScripts) ? 0 : (r - 1)->script;
}

void ToLowercase(char32_t c, std::vector<char32_t>* out) {
  if (c < 0x80) {
    out->push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (const CpMap* m = FindCp(kHfLower, c)) {
    out->push_back(m->v);
    return;
  }
  for (const CpMulti& m : kHfLowerMulti) {
    if (m.cp == c) {
      for (char32_t x : m.v)
        if (x) out->push_back(x);
      return;
    }
  }
  out->push_back(c);
}

void Decompose(char32_t c, bool compat, std::vector<char32_t>* out) {
  // utf8proc (Unicode 13) decomposes code points HF's tables (Unicode 9) do not know: decompose
  // only those HF decomposes; their decompositions are stable across Unicode versions.
  if (c < 0xA0 ||
      !(compat ? InRanges(kHfCompatDecomposable, c) : InRanges(kHfCanonicalDecomposable, c))) {
    out->push_back(c);
    return;
  }
  utf8proc_int32_t buf[32];
  int last = 0;
  auto opts = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  utf8proc_ssize_t n = c > 0x10FFFF ? -1
                                    : utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf,
                                                              32, opts, &last);
  if (n <= 0 || n > 32) {
    out->push_back(c);
    return;
  }
  for (utf8proc_ssize_t k = 0; k < n; ++k) out->push_back(static_cast<char32_t>(buf[k]));
}

char32_t Compose(char32_t a, char32_t b) {
  // Hangul LV / LVT.
  constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kLCount * kNCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  if (a > 0x10FFFF || b > 0x10FFFF) return 0;
  utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  utf8proc_ssize_t n =
      utf8proc_normalize_utf32(buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE));
  if (n != 1) return 0;
  // utf8proc_normalize_utf32 does not apply composition exclusions (e.g. U+2ADC): check them.
  if (utf8proc_get_property(buf[0])->comp_exclusion) return 0;
  // Composites HF does not know (added after Unicode 9) do not compose.
  if (!InRanges(kHfCanonicalDecomposable, static_cast<char32_t>(buf[0]))) return 0;
  return static_cast<char32_t>(buf[0]);
}

std::vector<size_t> GraphemeBoundaries(std::string_view s) {
  std::vector<size_t> b;
  b.push_back(0);
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t c = DecodeAt(s, i, &len);
    if (!first && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                   static_cast<utf8proc_int32_t>(c), &state)) {
      b.push_back(i);
    }
    first = false;
    prev = c;
    i += len;
  }
  if (!s.empty()) b.push_back(s.size());
  return b;
}

const std::vector<char32_t>& BytesToChars() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256, 0);
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t n = 0;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? char32_t(b) : 256 + n++;
    return t;
  }();
  return table;
}

int CharToByte(char32_t c) {
  static const std::vector<int> rev = [] {
    std::vector<int> r(512, -1);
    const auto& t = BytesToChars();
    for (int b = 0; b < 256; ++b) r[t[b]] = b;
    return r;
  }();
  return c < 512 ? rev[c] : -1;
}

namespace {

struct OnigClass {
  const char* name;  // as in \p{NAME}; "w" for \w
  const char* pcre;  // PCRE2 class items with the same meaning in its own tables
  const CpRange* ranges;
  size_t n;
};
#define SLUICE_ONIG(name, pcre, table) \
  { name, pcre, table, std::size(table) }
constexpr OnigClass kOnigClasses[] = {
    SLUICE_ONIG("L", "\\p{L}", kOnigL),
    SLUICE_ONIG("Lu", "\\p{Lu}", kOnigLu),
    SLUICE_ONIG("Ll", "\\p{Ll}", kOnigLl),
    SLUICE_ONIG("Lt", "\\p{Lt}", kOnigLt),
    SLUICE_ONIG("Lm", "\\p{Lm}", kOnigLm),
    SLUICE_ONIG("Lo", "\\p{Lo}", kOnigLo),
    SLUICE_ONIG("M", "\\p{M}", kOnigM),
    SLUICE_ONIG("N", "\\p{N}", kOnigN),
    SLUICE_ONIG("Nd", "\\p{Nd}", kOnigNd),
    SLUICE_ONIG("P", "\\p{P}", kOnigP),
    SLUICE_ONIG("S", "\\p{S}", kOnigS),
    SLUICE_ONIG("Z", "\\p{Z}", kOnigZ),
    SLUICE_ONIG("w", "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}", kOnigWord),
};
#undef SLUICE_ONIG

void AppendHex(std::string* out, char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(c));
  *out += buf;
}

// PCRE2 class items for one Oniguruma class: PCRE2's own property plus the code points that
// Oniguruma's newer tables put in the class and PCRE2's do not (found by matching every code
// point of the class against PCRE2's property once).
std::string ComputeOnigItems(const OnigClass& k) {
  std::string items = k.pcre;
  std::string all;
  for (size_t r = 0; r < k.n; ++r)
    for (char32_t c = k.ranges[r].lo; c <= k.ranges[r].hi; ++c) AppendUtf8(&all, c);
  auto re = Regex::Compile("[^" + std::string(k.pcre) + "]");
  if (!re.ok()) return items;
  std::vector<char32_t> extra;
  for (const auto& [b, e] : (*re)->FindAll(all)) {
    size_t len;
    extra.push_back(DecodeAt(all, b, &len));
  }
  for (size_t i = 0; i < extra.size();) {
    size_t j = i;
    while (j + 1 < extra.size() && extra[j + 1] == extra[j] + 1) ++j;
    AppendHex(&items, extra[i]);
    if (j > i) {
      items += '-';
      AppendHex(&items, extra[j]);
    }
    i = j + 1;
  }
  return items;
}

}  // namespace

const std::string* OnigClassItems(std::string_view name) {
  static const std::vector<std::string> items = [] {
    std::vector<std::string> v;
    for (const auto& k : kOnigClasses) v.push_back(ComputeOnigItems(k));
    return v;
  }();
  for (size_t i = 0; i < std::size(kOnigClasses); ++i)
    if (name == kOnigClasses[i].name) return &items[i];
  return nullptr;
}

// ---- Regex ----
StatusOr<std::shared_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return InvalidArgument("bad regex '" + std::string(pattern) +
                           "': " + reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto r = std::shared_ptr<Regex>(new Regex());
  r->code_ = code;
  return r;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {

// Each thread's match data and match context, with a JIT stack larger than the 32 KiB
// default so that long inputs never fail to match. Freed when the thread exits: serving
// threads come and go with the models loaded and unloaded, and each JIT stack maps 8 MiB.
struct MatchScratch {
  pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() {
    if (mctx && stack) pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

}  // namespace

std::vector<Offsets> Regex::FindAll(std::string_view s) const {
  std::vector<Offsets> out;
  auto* code = static_cast<pcre2_code*>(code_);
  thread_local MatchScratch scratch;
  pcre2_match_data* md = scratch.md;
  pcre2_match_context* mctx = scratch.mctx;
  size_t pos = 0;
  std::optional<size_t> last_end;
  auto sp = reinterpret_cast<PCRE2_SPTR>(s.data());
  while (pos <= s.size()) {
    int rc = pcre2_match(code, sp, s.size(), pos, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (b == e && last_end && *last_end == e) {
      if (pos >= s.size()) break;
      size_t len;
      DecodeAt(s, pos, &len);
      pos += len;
      continue;
    }
    out.emplace_back(static_cast<uint32_t>(b), static_cast<uint32_t>(e));
    last_end = e;
    if (b == e) {
      if (e >= s.size()) break;
      size_t len;
      DecodeAt(s, e, &len);
      pos = e + len;
    } else {
      pos = e;
    }
  }
  return out;
}

}  // namespace sluice::tok
