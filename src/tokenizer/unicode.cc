// Unicode and UTF-8 helpers, backed by utf8proc and PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <array>

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

bool IsWhitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

static utf8proc_category_t Cat(char32_t c) {
  if (c > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool IsPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  }
  auto k = Cat(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool IsControlBert(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  auto k = Cat(c);
  // HF uses the unicode_categories crate (Unicode 9 tables, no Cn entries): unassigned code
  // points are not control characters, nor are format characters added after Unicode 9.
  if (c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) || c == 0x0890 || c == 0x0891) return false;
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
         k == UTF8PROC_CATEGORY_CO;
}

bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool IsMarkNonspacing(char32_t c) { return c >= 0x300 && Cat(c) == UTF8PROC_CATEGORY_MN; }

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  auto k = Cat(c);
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

bool IsMark(char32_t c) {
  if (c < 0x300) return false;
  auto k = Cat(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool IsAlphanumeric(char32_t c) {
  auto k = Cat(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

int CombiningClass(char32_t c) {
  if (c < 0x300 || c > 0x10FFFF) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

void ToLowercase(char32_t c, std::vector<char32_t>* out) {
  if (c < 0x80) {
    out->push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (c == 0x130) {
    out->push_back('i');
    out->push_back(0x307);
    return;
  }
  if (c > 0x10FFFF) {
    out->push_back(c);
    return;
  }
  out->push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

void Decompose(char32_t c, bool compat, std::vector<char32_t>* out) {
  if (c < 0xA0) {
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

std::vector<Offsets> Regex::FindAll(std::string_view s) const {
  std::vector<Offsets> out;
  auto* code = static_cast<pcre2_code*>(code_);
  thread_local pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
  // A JIT stack larger than the 32 KiB default, so long inputs never fail to match.
  thread_local pcre2_match_context* mctx = [] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* st = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (c && st) pcre2_jit_stack_assign(c, nullptr, st);
    return c;
  }();
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
