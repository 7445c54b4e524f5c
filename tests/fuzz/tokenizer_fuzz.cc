// libFuzzer target over the tokenizer: arbitrary bytes through every committed fixture
// tokenizer (tests/fixtures/tokenizers/*), Encode / EncodePair / truncation / Decode /
// DecodeStream, checking the documented invariants.
//
// Input layout: byte 0 picks the tokenizer, byte 1 holds flags (special tokens, skip
// special, truncation strategy), byte 2 the max_length, byte 3 the pair split point
// (as a fraction of the rest); the rest is the text.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

#ifndef SLUICE_FIXTURES_DIR
#error "SLUICE_FIXTURES_DIR must name tests/fixtures"
#endif

namespace {

using sluice::Encoding;
using sluice::Tokenizer;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tokenizer_fuzz invariant violated: %s\n", what);
  std::abort();
}
#define CHECK_INV(cond)       \
  do {                        \
    if (!(cond)) Fail(#cond); \
  } while (0)

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

struct Loaded {
  std::vector<std::unique_ptr<Tokenizer>> toks;
};

const Loaded& Tokenizers() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded;
    std::vector<std::filesystem::path> dirs;
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(SLUICE_FIXTURES_DIR) + "/tokenizers")) {
      if (e.is_directory()) dirs.push_back(e.path());
    }
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      auto t = Tokenizer::FromDirectory(d.string());
      if (!t.ok()) {
        std::fprintf(stderr, "cannot load %s: %s\n", d.c_str(), t.status().ToString().c_str());
        std::abort();
      }
      l->toks.push_back(std::move(*t));
    }
    if (l->toks.empty()) {
      std::fprintf(stderr, "no tokenizers under %s/tokenizers\n", SLUICE_FIXTURES_DIR);
      std::abort();
    }
    return l;
  }();
  return *loaded;
}

// Checks one encoding; a/b are the texts (b empty for singles).
void CheckEncoding(const Tokenizer& tok, const Encoding& e, std::string_view a,
                   std::string_view b) {
  const size_t n = e.ids.size();
  CHECK_INV(e.type_ids.size() == n);
  CHECK_INV(e.offsets.size() == n);
  CHECK_INV(e.special_tokens_mask.size() == n);
  CHECK_INV(e.sequence_ids.size() == n);
  CHECK_INV(e.word_ids.size() == n);
  CHECK_INV(e.tokens.size() == n);
  const size_t vocab = tok.vocab_size();
  for (size_t i = 0; i < n; ++i) {
    CHECK_INV(e.ids[i] >= 0);
    CHECK_INV(static_cast<size_t>(e.ids[i]) < vocab);
    const auto [s, t] = e.offsets[i];
    CHECK_INV(s <= t);
    const int8_t seq = e.sequence_ids[i];
    CHECK_INV(seq >= -1 && seq <= 1);
    if (seq == -1) {
      CHECK_INV(s == 0 && t == 0);
    } else {
      const std::string_view text = seq == 0 ? a : b;
      CHECK_INV(t <= text.size());
    }
  }
}

void CheckDecode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  auto d = tok.Decode(ids, skip);
  if (d.ok()) CHECK_INV(ValidUtf8(*d));
  sluice::DecodeStream stream(&tok, skip);
  for (int32_t id : ids) {
    auto r = stream.Step(id);
    if (!r.ok()) break;
    if (*r) CHECK_INV(ValidUtf8(**r));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const auto& toks = Tokenizers().toks;
  const Tokenizer& tok = *toks[data[0] % toks.size()];
  const uint8_t flags = data[1];
  const size_t max_length = data[2];
  const std::string_view text(reinterpret_cast<const char*>(data + 4), size - 4);
  const size_t split = text.size() * data[3] / 256;
  const std::string_view a = text.substr(0, split), b = text.substr(split);
  const bool special = flags & 1;
  const bool skip = flags & 2;

  // Single text, full.
  auto single = tok.Encode(text, special);
  if (single.ok()) {
    CheckEncoding(tok, *single, text, {});
    CheckDecode(tok, single->ids, skip);
  }
  // Pair, full.
  auto pair = tok.EncodePair(a, b, special);
  if (pair.ok()) {
    CheckEncoding(tok, *pair, a, b);
    CheckDecode(tok, pair->ids, skip);
  }
  // Truncation variants.
  sluice::TruncationParams tp;
  tp.max_length = max_length;
  static constexpr sluice::TruncationStrategy kStrategies[] = {
      sluice::TruncationStrategy::kLongestFirst, sluice::TruncationStrategy::kOnlyFirst,
      sluice::TruncationStrategy::kOnlySecond};
  tp.strategy = kStrategies[(flags >> 2) % 3];
  auto ts = tok.Encode(text, special, &tp);
  if (ts.ok()) {
    CheckEncoding(tok, *ts, text, {});
    CHECK_INV(ts->size() <= max_length);
  }
  auto tpair = tok.EncodePair(a, b, special, &tp);
  if (tpair.ok()) {
    CheckEncoding(tok, *tpair, a, b);
    CHECK_INV(tpair->size() <= max_length);
  }
  // Arbitrary ids (the text's bytes as little-endian 16-bit values, mod vocab size): decoders
  // must cope with byte tokens in any order.
  const size_t vocab = tok.vocab_size();
  if (vocab > 0) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < text.size() && ids.size() < 512; i += 2) {
      const uint32_t v = static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8);
      ids.push_back(static_cast<int32_t>(v % vocab));
    }
    CheckDecode(tok, ids, skip);
  }
  // Out-of-range ids must be an error or ignored, never a crash.
  if (flags & 0x80) {
    std::vector<int32_t> bad = {-1, static_cast<int32_t>(vocab), INT32_MAX};
    (void)tok.Decode(bad, skip);
    sluice::DecodeStream stream(&tok, skip);
    for (int32_t id : bad) (void)stream.Step(id);
  }
  return 0;
}
