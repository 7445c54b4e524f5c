// BlockPool and GenScheduler on their own: block accounting never leaks, the hash chain
// finds only the same tokens after the same parents, eviction is least-recently-used,
// preemption takes the newest sequence and resume recomputes from the cache.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/gen_scheduler.h"

namespace sluice {
namespace {

std::vector<int32_t> Tokens(int n, int base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), base);
  return t;
}

TEST(BlockPool, AllocateReleaseAccounting) {
  BlockPool pool(4, true);
  EXPECT_EQ(pool.available(), 4);
  auto a = pool.Allocate(), b = pool.Allocate();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(pool.in_use(), 2);
  pool.Retain(*a);
  pool.Release(*a);
  EXPECT_EQ(pool.in_use(), 2);  // still referenced once
  pool.Release(*a);
  pool.Release(*b);
  EXPECT_EQ(pool.available(), 4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Allocate());
  EXPECT_FALSE(pool.Allocate());  // nothing left
}

TEST(BlockPool, HashChainFindsOnlyTheSamePrefix) {
  BlockPool pool(8, true);
  const auto t1 = Tokens(kKvBlockSize, 100), t2 = Tokens(kKvBlockSize, 200);
  const int b1 = *pool.Allocate(), b2 = *pool.Allocate();
  pool.Publish(b1, 0, t1);
  pool.Publish(b2, BlockHash(0, t1), t2);
  EXPECT_EQ(pool.cached(), 2);
  // The same tokens after the same parent: found (and referenced again).
  EXPECT_EQ(pool.Lookup(0, t1), std::optional<int>(b1));
  EXPECT_EQ(pool.refs(b1), 2);
  EXPECT_EQ(pool.Lookup(BlockHash(0, t1), t2), std::optional<int>(b2));
  // The same tokens after another parent, or as a first block: not found.
  EXPECT_FALSE(pool.Lookup(0, t2));
  EXPECT_FALSE(pool.Lookup(BlockHash(0, t2), t2));
  // Partial blocks are never cached.
  EXPECT_FALSE(pool.Lookup(0, std::span<const int32_t>(t1.data(), 8)));
  // Without prefix caching nothing is published.
  BlockPool off(2, false);
  const int b = *off.Allocate();
  off.Publish(b, 0, t1);
  EXPECT_EQ(off.cached(), 0);
  EXPECT_FALSE(off.Lookup(0, t1));
}

TEST(BlockPool, UnreferencedCachedBlocksAreEvictedLeastRecentlyUsedFirst) {
  BlockPool pool(3, true);
  std::vector<std::vector<int32_t>> t;
  std::vector<int> blocks;
  for (int i = 0; i < 3; ++i) {
    t.push_back(Tokens(kKvBlockSize, 1000 * (i + 1)));
    blocks.push_back(*pool.Allocate());
    pool.Publish(blocks[i], 0, t[i]);
  }
  // Released in the order 1, 0, 2: block 1 is the least recently used.
  pool.Release(blocks[1]);
  pool.Release(blocks[0]);
  pool.Release(blocks[2]);
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.cached(), 3);
  // A hit takes block 0 off the LRU list; the next allocation evicts block 1.
  EXPECT_EQ(pool.Lookup(0, t[0]), std::optional<int>(blocks[0]));
  EXPECT_EQ(pool.Allocate(), std::optional<int>(blocks[1]));
  EXPECT_FALSE(pool.Lookup(0, t[1]));  // evicted
  EXPECT_EQ(pool.Allocate(), std::optional<int>(blocks[2]));
  EXPECT_FALSE(pool.Allocate());
  EXPECT_EQ(pool.stats().evictions, 2);
}

GenSequence Seq(int prompt_len, int base) {
  GenSequence s;
  s.tokens = Tokens(prompt_len, base);
  s.prompt_len = prompt_len;
  return s;
}

// Runs scheduler steps, appending one token to each sampling sequence, until every
// sequence has `total` tokens computed.
void RunToLength(GenScheduler& sched, std::vector<GenSequence*> seqs, int total,
                 int64_t* preempted = nullptr) {
  std::vector<StepItem> items;
  std::vector<GenSequence*> pre;
  for (int step = 0; step < 10000; ++step) {
    bool all = true;
    for (GenSequence* s : seqs) all &= s->num_computed >= total;
    if (all) return;
    sched.Schedule(&items, &pre);
    ASSERT_FALSE(items.empty());
    sched.Commit(items);
    for (const StepItem& it : items) {
      if (it.sample && static_cast<int>(it.seq->tokens.size()) < total + 1) {
        it.seq->tokens.push_back(7);
      }
    }
  }
  if (preempted) *preempted = sched.preemptions();
  FAIL() << "no progress";
}

TEST(GenScheduler, ChunkedPrefillUnderTheTokenBudget) {
  BlockPool pool(64, true);
  GenScheduler sched(&pool, {10, 8});
  GenSequence a = Seq(25, 0), b = Seq(3, 100);
  sched.Add(&a);
  sched.Add(&b);
  std::vector<StepItem> items;
  std::vector<GenSequence*> pre;
  sched.Schedule(&items, &pre);
  ASSERT_EQ(items.size(), 1u);  // a's first chunk takes the whole budget
  EXPECT_EQ(items[0].len, 10);
  EXPECT_FALSE(items[0].sample);
  sched.Commit(items);
  sched.Schedule(&items, &pre);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].start, 10);
  sched.Commit(items);
  sched.Schedule(&items, &pre);  // a's last 5 tokens, then b's 3
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].len, 5);
  EXPECT_TRUE(items[0].sample);
  EXPECT_EQ(items[1].seq, &b);
  EXPECT_TRUE(items[1].sample);
  sched.Commit(items);
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(a.num_published, 1);  // the first full block is in the prefix cache
  sched.Remove(&a);
  sched.Remove(&b);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(GenScheduler, NewSequencesTakeCachedPrefixBlocks) {
  BlockPool pool(64, true);
  GenScheduler sched(&pool, {256, 8});
  GenSequence a = Seq(40, 0);
  sched.Add(&a);
  RunToLength(sched, {&a}, 40);
  GenSequence b = Seq(40, 0);  // the same 40 tokens: two full blocks cached, the rest runs
  b.tokens[39] = 999;
  sched.Add(&b);
  std::vector<StepItem> items;
  std::vector<GenSequence*> pre;
  sched.Schedule(&items, &pre);
  const StepItem* bi = nullptr;
  for (const auto& it : items) {
    if (it.seq == &b) bi = &it;
  }
  ASSERT_NE(bi, nullptr);
  EXPECT_EQ(bi->start, 32);
  EXPECT_EQ(bi->len, 8);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(pool.stats().hits, 32);
  sched.Commit(items);
  sched.Remove(&a);
  sched.Remove(&b);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(GenScheduler, PreemptsTheNewestAndResumes) {
  // 6 blocks for 3 sequences that each grow to 40 tokens (3 blocks): someone must wait.
  BlockPool pool(6, false);
  GenScheduler sched(&pool, {256, 8});
  GenSequence a = Seq(10, 0), b = Seq(10, 100), c = Seq(10, 200);
  sched.Add(&a);
  sched.Add(&b);
  sched.Add(&c);
  std::vector<StepItem> items;
  std::vector<GenSequence*> pre;
  int64_t preemptions = 0;
  bool c_preempted_first = false;
  for (int step = 0; step < 1000; ++step) {
    if (a.tokens.size() > 40 && b.tokens.size() > 40 && c.tokens.size() > 40) break;
    pre.clear();
    sched.Schedule(&items, &pre);
    if (!pre.empty() && preemptions == 0) c_preempted_first = pre[0] == &c;
    preemptions += static_cast<int64_t>(pre.size());
    sched.Commit(items);
    for (const StepItem& it : items) {
      if (it.sample && it.seq->tokens.size() <= 40) it.seq->tokens.push_back(7);
      if (it.seq->tokens.size() > 40 && it.sample) sched.Remove(it.seq);
    }
    EXPECT_LE(pool.in_use(), 6);
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_TRUE(c_preempted_first);  // the newest goes first
  EXPECT_GT(a.tokens.size(), 40u);
  EXPECT_GT(b.tokens.size(), 40u);
  EXPECT_GT(c.tokens.size(), 40u);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(GenScheduler, ForkSharesFullBlocksAndCopiesThePartialOne) {
  BlockPool pool(16, true);
  GenScheduler sched(&pool, {256, 8});
  GenSequence p = Seq(20, 0);
  sched.Add(&p);
  std::vector<StepItem> items;
  std::vector<GenSequence*> pre;
  sched.Schedule(&items, &pre);
  sched.Commit(items);
  GenSequence child;
  child.tokens = p.tokens;
  child.prompt_len = 20;
  int src = -1, dst = -1;
  ASSERT_TRUE(sched.Fork(&p, &child, &src, &dst));
  EXPECT_EQ(child.blocks[0], p.blocks[0]);  // shared
  EXPECT_EQ(pool.refs(p.blocks[0]), 2);
  EXPECT_EQ(src, p.blocks[1]);
  EXPECT_EQ(dst, child.blocks[1]);
  EXPECT_NE(dst, src);
  EXPECT_EQ(child.num_computed, 20);
  sched.Remove(&p);
  EXPECT_EQ(pool.refs(child.blocks[0]), 1);
  sched.Remove(&child);
  EXPECT_EQ(pool.in_use(), 0);
}

}  // namespace
}  // namespace sluice
