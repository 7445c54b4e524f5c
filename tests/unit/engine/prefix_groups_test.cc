// Shared-prefix grouping: which consecutive sequences share a prefix worth computing once,
// chosen to save the most tokens; checked on edge cases and against brute force.
#include "engine/prefix_groups.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace sluice {
namespace {

struct Packed {
  std::vector<int32_t> ids;
  std::vector<int32_t> cu = {0};
  void Add(const std::vector<int32_t>& s) {
    ids.insert(ids.end(), s.begin(), s.end());
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  int num_seqs() const { return static_cast<int>(cu.size()) - 1; }
};

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> Range(int first, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

std::vector<PrefixGroup> Groups(const Packed& p, int min_prefix = 4) {
  return FindPrefixGroups(p.ids.data(), p.cu.data(), p.num_seqs(), min_prefix);
}

void ExpectGroup(const PrefixGroup& g, int first, int count, int prefix) {
  EXPECT_EQ(g.first, first);
  EXPECT_EQ(g.count, count);
  EXPECT_EQ(g.prefix, prefix);
}

TEST(PrefixGroups, NoSharingNoGroups) {
  Packed p;
  for (int s = 0; s < 6; ++s) p.Add(Range(100 * s, 10));
  EXPECT_TRUE(Groups(p).empty());
  Packed one;
  one.Add(Range(0, 10));
  EXPECT_TRUE(Groups(one).empty());
  EXPECT_TRUE(FindPrefixGroups(nullptr, nullptr, 0, 4).empty());
}

TEST(PrefixGroups, AllShareOnePrefix) {
  Packed p;
  const auto pre = Range(1, 6);
  for (int s = 0; s < 5; ++s) p.Add(Cat(pre, Range(1000 + 10 * s, 1 + s)));
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 0, 5, 6);
  EXPECT_EQ(PrefixTokensSaved(g), 4 * 6);
}

TEST(PrefixGroups, ShortPrefixesAreNotWorthIt) {
  Packed p;
  for (int s = 0; s < 4; ++s) p.Add(Cat(Range(1, 3), Range(100 + s, 5)));
  EXPECT_TRUE(Groups(p).empty());  // 3 shared tokens < 4
  const auto g = Groups(p, 3);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 0, 4, 3);
}

// A template shared by all, then per-query groups: the per-query groups win when they save
// more (long query, many documents each) ...
TEST(PrefixGroups, PerQueryGroupsBeatTheTemplateWhenTheySaveMore) {
  const auto tmpl = Range(1, 5);
  Packed p;
  for (int q = 0; q < 2; ++q) {
    for (int d = 0; d < 3; ++d) p.Add(Cat(Cat(tmpl, Range(100 * (q + 1), 4)), Range(900 + d, 3)));
  }
  // Whole batch: 5 x 5 = 25 tokens; per query: 2 x (2 x 9) = 36.
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 2u);
  ExpectGroup(g[0], 0, 3, 9);
  ExpectGroup(g[1], 3, 3, 9);
  EXPECT_EQ(PrefixTokensSaved(g), 36);
}

// ... and the template shared by the whole batch wins when queries repeat little.
TEST(PrefixGroups, TemplateBeatsSmallQueryGroups) {
  const auto tmpl = Range(1, 20);
  Packed p;
  for (int q = 0; q < 3; ++q) {
    for (int d = 0; d < 2; ++d) p.Add(Cat(Cat(tmpl, Range(100 * (q + 1), 4)), Range(900 + d, 3)));
  }
  // Whole batch: 5 x 20 = 100; per query: 3 x 24 = 72.
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 0, 6, 20);
}

// Mixed: a run that shares the template only, then a query repeated many times.
TEST(PrefixGroups, MixedRunsAndUngroupedSequences) {
  const auto tmpl = Range(1, 6);
  Packed p;
  p.Add(Range(500, 9));             // 0: alone
  p.Add(Cat(tmpl, Range(200, 5)));  // 1: template only
  p.Add(Cat(tmpl, Range(300, 5)));  // 2: template only
  for (int d = 0; d < 5; ++d) p.Add(Cat(Cat(tmpl, Range(400, 6)), Range(900 + d, 2)));  // 3..7
  p.Add(Range(600, 9));                                                                 // 8: alone
  // Best: [1, 2] on the template (6) + [3..7] on template + query (12): 6 + 48 = 54,
  // against [1..7] on the template: 36.
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 2u);
  ExpectGroup(g[0], 1, 2, 6);
  ExpectGroup(g[1], 3, 5, 12);
  EXPECT_EQ(PrefixTokensSaved(g), 54);
}

// Duplicates share all but their last token.
TEST(PrefixGroups, DuplicatesKeepTheirLastToken) {
  Packed p;
  const auto s = Range(7, 8);
  for (int i = 0; i < 3; ++i) p.Add(s);
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 0, 3, 7);
}

// Every member keeps at least one token of its own: a sequence that is exactly the shared
// prefix caps the group's prefix at its length - 1.
TEST(PrefixGroups, EveryMemberKeepsOneOwnToken) {
  Packed p;
  p.Add(Range(1, 5));            // exactly 5 tokens
  p.Add(Cat(Range(1, 5), {9}));  // the same 5 and one more
  p.Add(Cat(Range(1, 5), {8, 8}));
  auto g = Groups(p);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 0, 3, 4);
  Packed q;  // a 4-token sequence would leave a 3-token prefix: not worth it
  q.Add(Range(1, 4));
  q.Add(Cat(Range(1, 4), {9}));
  EXPECT_TRUE(Groups(q).empty());
}

// A length-1 sequence cannot share anything: it splits runs.
TEST(PrefixGroups, LengthOneSequencesSplitRuns) {
  Packed p;
  const auto pre = Range(1, 6);
  p.Add(Cat(pre, {50}));
  p.Add({1});
  p.Add(Cat(pre, {51}));
  p.Add(Cat(pre, {52}));
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 2, 2, 6);
}

// Only consecutive sequences group: A, B, A has no group.
TEST(PrefixGroups, OnlyConsecutiveSequencesGroup) {
  Packed p;
  p.Add(Cat(Range(1, 6), {50}));
  p.Add(Cat(Range(100, 6), {50}));
  p.Add(Cat(Range(1, 6), {51}));
  EXPECT_TRUE(Groups(p).empty());
}

// Equal savings: the fewest groups (fewer extra prefix sequences).
TEST(PrefixGroups, TiesGoToFewerGroups) {
  Packed p;
  // All four share 4 tokens (whole batch: 3 x 4 = 12), pairs share 6 (2 x 6 = 12).
  p.Add(Cat(Range(1, 4), {10, 11, 0}));
  p.Add(Cat(Range(1, 4), {10, 11, 1}));
  p.Add(Cat(Range(1, 4), {20, 21, 0}));
  p.Add(Cat(Range(1, 4), {20, 21, 1}));
  const auto g = Groups(p);
  ASSERT_EQ(g.size(), 1u);
  ExpectGroup(g[0], 0, 4, 4);
}

// Random batches over a tiny alphabet: the saving equals the best over every partition
// into consecutive runs (brute force), groups are valid, and each prefix is shared.
TEST(PrefixGroups, OptimalAgainstBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int S = 1 + static_cast<int>(rng() % 9);
    Packed p;
    std::vector<std::vector<int32_t>> seqs;
    for (int s = 0; s < S; ++s) {
      // Sequences copy a random earlier one's first tokens often, so that runs share.
      std::vector<int32_t> x;
      if (s > 0 && rng() % 3 != 0) {
        const auto& src = seqs[rng() % seqs.size()];
        x.assign(src.begin(), src.begin() + static_cast<int64_t>(rng() % (src.size() + 1)));
      }
      const int extra = static_cast<int>(rng() % 8);
      for (int i = 0; i < extra || x.empty(); ++i) x.push_back(static_cast<int32_t>(rng() % 2));
      seqs.push_back(x);
      p.Add(x);
    }
    auto lcp = [&](int a, int b) {  // shared by runs [a, b], capped for the own token
      int n = static_cast<int>(seqs[a].size()) - 1;
      for (int s = a; s <= b; ++s) n = std::min(n, static_cast<int>(seqs[s].size()) - 1);
      for (int s = a + 1; s <= b; ++s) {
        int k = 0;
        while (k < n && seqs[s][k] == seqs[a][k]) ++k;
        n = k;
      }
      return n;
    };
    // Brute force over the S - 1 cut points.
    int64_t want = 0;
    for (uint32_t cuts = 0; cuts < (1u << (S - 1)); ++cuts) {
      int64_t saved = 0;
      for (int a = 0; a < S;) {
        int b = a;
        while (b + 1 < S && !(cuts >> b & 1u)) ++b;
        const int shared = lcp(a, b);
        if (b > a && shared >= 4) saved += static_cast<int64_t>(b - a) * shared;
        a = b + 1;
      }
      want = std::max(want, saved);
    }
    const auto g = Groups(p);
    EXPECT_EQ(PrefixTokensSaved(g), want) << "trial " << trial;
    int next = 0;
    for (const PrefixGroup& x : g) {
      EXPECT_GE(x.first, next);
      EXPECT_GE(x.count, 2);
      EXPECT_GE(x.prefix, 4);
      EXPECT_EQ(x.prefix, lcp(x.first, x.first + x.count - 1)) << "trial " << trial;
      next = x.first + x.count;
    }
    EXPECT_LE(next, S);
  }
}

}  // namespace
}  // namespace sluice
