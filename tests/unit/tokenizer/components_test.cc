// Unit tests of tokenizer components and robustness (invalid UTF-8, random bytes, threads,
// streaming decode).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/internal.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

const std::string kDir = std::string(SLUICE_FIXTURES_DIR) + "/tokenizers/";

std::unique_ptr<Tokenizer> Load(const std::string& name) {
  auto t = Tokenizer::FromDirectory(kDir + name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(Utf8, LossyMatchesMaximalSubparts) {
  // Python: b"a\xffb\xe2\x82c\xf0\x9f\x98".decode("utf-8", "replace") == "a\ufffdb\ufffdc\ufffd"
  std::vector<uint32_t> map;
  std::string s = tok::LossyUtf8(std::string("a\xff"
                                             "b\xe2\x82"
                                             "c\xf0\x9f\x98",
                                             9),
                                 &map);
  EXPECT_EQ(s,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD");
  EXPECT_EQ(map.front(), 0u);
  EXPECT_EQ(map.back(), 9u);
  EXPECT_FALSE(tok::IsValidUtf8("\xed\xa0\x80"));  // surrogate
  EXPECT_FALSE(tok::IsValidUtf8("\xc0\xaf"));      // overlong
  EXPECT_TRUE(tok::IsValidUtf8("h\xc3\xa9llo \xf0\x9f\x98\x80"));
}

TEST(NormalizedString, TransformKeepsAlignments) {
  auto ns = tok::NormalizedString::FromOriginal("A\xC3\xA9");  // "Aé"
  ns.Nfd();
  EXPECT_EQ(ns.norm, "Ae\xCC\x81");
  ASSERT_EQ(ns.align.size(), 4u);
  EXPECT_EQ(ns.align[1], (tok::Offsets{1, 3}));  // 'e' comes from é
  EXPECT_EQ(ns.align[3], (tok::Offsets{1, 3}));  // the accent too
  ns.Filter([](char32_t c) { return !tok::IsMarkNonspacing(c); });
  ns.Lowercase();
  EXPECT_EQ(ns.norm, "ae");
  EXPECT_EQ(*ns.ConvertOffsets(0, 2), (tok::Offsets{0, 3}));
  ns.Prepend("\xE2\x96\x81");
  EXPECT_EQ(ns.norm,
            "\xE2\x96\x81"
            "ae");
  EXPECT_EQ(*ns.ConvertOffsets(0, 3), (tok::Offsets{0, 1}));
}

TEST(NormalizedString, NfcComposesAndReorders) {
  auto ns = tok::NormalizedString::FromOriginal("e\xCC\x81");  // e + U+0301
  ns.Nfc();
  EXPECT_EQ(ns.norm, "\xC3\xA9");
  // As HF: a composed char takes the alignment of its first component only.
  EXPECT_EQ(*ns.ConvertOffsets(0, 2), (tok::Offsets{0, 1}));
  // U+0362 (ccc 233) before U+0332 (ccc 220) is reordered.
  auto r = tok::NormalizedString::FromOriginal("r\xCD\xA2\xCC\xB2");
  r.Nfc();
  EXPECT_EQ(r.norm, "r\xCC\xB2\xCD\xA2");
}

TEST(Regex, FindAllHandlesEmptyMatches) {
  auto re = tok::Regex::Compile("a*");
  ASSERT_TRUE(re.ok());
  auto m = (*re)->FindAll("baac");
  std::vector<tok::Offsets> want = {{0, 0}, {1, 3}, {4, 4}};
  EXPECT_EQ(m, want);
}

// The address space mapped now (/proc/self/status VmSize), in KiB.
long VmSizeKib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stol(line.substr(7));
  }
  return -1;
}

// Each matching thread's scratch (match data, context, an 8 MiB JIT stack) goes with the
// thread: serving threads come and go as models load and unload. A leaked scratch maps 8 MiB
// per thread (256 MiB over these 32); under the asan preset LeakSanitizer reports it too.
TEST(Regex, ThreadScratchFreedWhenThreadExits) {
  auto re = tok::Regex::Compile(R"( ?\p{L}+| ?\p{N}+|\s+)");
  ASSERT_TRUE(re.ok());
  auto run_threads = [&](int n) {
    for (int i = 0; i < n; ++i) {
      std::thread([&] { EXPECT_EQ((*re)->FindAll("ab 12").size(), 2u); }).join();
    }
  };
  run_threads(32);  // the allocator's per-thread arenas settle
  const long before = VmSizeKib();
  ASSERT_GT(before, 0);
  run_threads(32);
  EXPECT_LT(VmSizeKib() - before, 64 * 1024) << "KiB mapped over 32 short-lived threads";
}

constexpr const char* kTinyBpe = R"({
  "added_tokens": [{"id": 7, "content": "<s>", "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "WhitespaceSplit"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}},
  "decoder": null,
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
            "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5, "bc": 6},
            "merges": ["a b", "ab c"]}
})";

TEST(Bpe, MergesUnkFuseAndTemplate) {
  auto t = Tokenizer::FromJson(kTinyBpe);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto e = (*t)->Encode("abc ab xxc");
  ASSERT_TRUE(e.ok());
  std::vector<int32_t> want = {7, 5, 4, 0, 3};
  EXPECT_EQ(e->ids, want);
  EXPECT_EQ(e->offsets[3], (std::pair<uint32_t, uint32_t>{7, 9}));  // fused "xx"
  EXPECT_EQ(e->special_tokens_mask[0], 1);
  auto p = (*t)->EncodePair("ab", "c", false);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->type_ids, (std::vector<int32_t>{0, 1}));  // template type ids without specials
  EXPECT_EQ((*t)->TokenToId("<s>"), 7);
  EXPECT_EQ((*t)->IdToToken(5), "abc");
  EXPECT_EQ((*t)->vocab_size(), 8u);
  EXPECT_EQ((*t)->NumSpecialTokensToAdd(false), 1u);
}

TEST(Truncation, ErrorsAreStatuses) {
  auto t = Tokenizer::FromJson(kTinyBpe);
  ASSERT_TRUE(t.ok());
  TruncationParams tp;
  tp.max_length = 2;
  tp.strategy = TruncationStrategy::kOnlySecond;
  EXPECT_FALSE((*t)->Encode("a b c", true, &tp).ok());  // no second sequence
  tp.max_length = 0;
  tp.strategy = TruncationStrategy::kLongestFirst;
  EXPECT_FALSE((*t)->Encode("a b c", true, &tp).ok());  // smaller than the special tokens
  tp.max_length = 3;
  auto e = (*t)->Encode("a b c", true, &tp);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 3u);
}

TEST(Loading, BadInputIsAnError) {
  EXPECT_FALSE(Tokenizer::FromJson("{").ok());
  EXPECT_FALSE(Tokenizer::FromJson(R"({"model": {"type": "Nope"}})").ok());
  EXPECT_FALSE(Tokenizer::FromDirectory("/nonexistent").ok());
}

TEST(Robustness, InvalidUtf8OffsetsReferToInputBytes) {
  auto t = Load("qwen2");
  ASSERT_TRUE(t);
  std::string s(
      "ok\xff\xfe"
      "fine",
      8);
  auto e = t->Encode(s);
  ASSERT_TRUE(e.ok());
  for (auto [a, b] : e->offsets) {
    EXPECT_LE(a, b);
    EXPECT_LE(b, s.size());
  }
  auto d = t->Decode(e->ids);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d,
            "ok\xEF\xBF\xBD\xEF\xBF\xBD"
            "fine");  // lossy, as Python's errors="replace"
}

TEST(Robustness, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  std::vector<std::unique_ptr<Tokenizer>> toks;
  for (const char* n : {"bert_uncased", "qwen2", "xlmr", "llama2_bytefallback", "misc_wordpiece",
                        "misc_bpe", "t5_unigram", "roberta"}) {
    toks.push_back(Load(n));
  }
  for (int i = 0; i < 300; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 0x20 + rng() % 0x60);
    for (const auto& t : toks) {
      ASSERT_TRUE(t);
      auto e = t->EncodePair(s, s.substr(s.size() / 2));
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      for (size_t k = 0; k < e->size(); ++k) {
        EXPECT_LE(e->offsets[k].first, e->offsets[k].second);
        EXPECT_LE(e->offsets[k].second, s.size());
      }
      std::vector<int32_t> ids = e->ids;
      ids.push_back(-5);
      ids.push_back(1 << 30);
      EXPECT_TRUE(t->Decode(ids, false).ok());
    }
  }
}

TEST(Concurrency, ThreadsGetIdenticalResults) {
  auto t = Load("bert_uncased");
  ASSERT_TRUE(t);
  std::vector<std::string> texts = {"Hello world", "un café à Zürich", "中文 テキスト",
                                    "a much longer sentence with many words in it"};
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : texts) want.push_back(t->Encode(s)->ids);
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k) {
    th.emplace_back([&] {
      for (int r = 0; r < 200; ++r) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (t->Encode(texts[i])->ids != want[i]) ++bad;
        }
      }
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(DecodeStream, NeverEmitsBrokenUtf8) {
  for (const char* name : {"qwen2", "llama2_bytefallback", "xlmr", "bert_uncased"}) {
    auto t = Load(name);
    ASSERT_TRUE(t);
    std::string text = "Hello 😀 wörld 中文 👨‍👩‍👧 end";
    auto e = t->Encode(text, false);
    ASSERT_TRUE(e.ok());
    DecodeStream ds(t.get());
    std::string streamed;
    for (int32_t id : e->ids) {
      auto chunk = ds.Step(id);
      ASSERT_TRUE(chunk.ok()) << name << ": " << chunk.status().ToString();
      if (*chunk) {
        EXPECT_TRUE(tok::IsValidUtf8(**chunk));
        EXPECT_EQ((*chunk)->find("\xEF\xBF\xBD"), std::string::npos) << name;
        streamed += **chunk;
      }
    }
    EXPECT_EQ(streamed, *t->Decode(e->ids)) << name;
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(Robustness, VeryLongInputs) {
  auto t = Load("qwen2");
  ASSERT_TRUE(t);
  std::string spaces(200000, ' ');
  std::string words;
  for (int i = 0; i < 20000; ++i) words += "word" + std::to_string(i) + (i % 7 ? " " : "\n\n  ");
  for (const std::string& s : {spaces, words, std::string(100000, 'a')}) {
    auto e = t->Encode(s);
    ASSERT_TRUE(e.ok());
    ASSERT_FALSE(e->offsets.empty());
    EXPECT_EQ(e->offsets.back().second, s.size());
    EXPECT_EQ(*t->Decode(e->ids), s);
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(Encoding, WordIdsFollowPreTokenization) {
  auto t = Load("bert_uncased");
  ASSERT_TRUE(t);
  auto e = t->Encode("hello, unbelievable world");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->word_ids.size(), e->size());
  EXPECT_EQ(e->word_ids.front(), -1);  // [CLS]
  EXPECT_EQ(e->word_ids[1], 0);        // hello
  EXPECT_EQ(e->word_ids[2], 1);        // ,
  EXPECT_EQ(e->word_ids.back(), -1);   // [SEP]
  EXPECT_EQ(e->word_ids[e->size() - 2], 3);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(Truncation, LongestFirstComparesWordCappedLengths) {
  auto t = Tokenizer::FromJson(kTinyBpe);
  ASSERT_TRUE(t.ok());
  TruncationParams tp;
  tp.max_length = 3;  // the pair template adds no token
  // Full lengths 5 vs 4, but HF stops both at 3 words: equal, so the first keeps max/2.
  auto e = (*t)->EncodePair("ab ab ab ab ab", "abc abc abc abc", true, &tp);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ids, (std::vector<int32_t>{4, 5, 5}));
  EXPECT_EQ(e->sequence_ids, (std::vector<int8_t>{0, 1, 1}));
}

}  // namespace
}  // namespace sluice
