// Scheduler policy: packing under the token budget and sequence cap, keeping requests
// together, splitting large ones, dropping cancelled and expired work.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

std::shared_ptr<EngineRequest> Req(std::vector<int> lengths) {
  auto r = std::make_shared<EngineRequest>();
  for (int n : lengths) r->inputs.push_back(TokenSequence{std::vector<int32_t>(n, 1), {}});
  return r;
}

struct Step {
  std::vector<BatchItem> batch;
  std::vector<std::shared_ptr<EngineRequest>> finished;
};

Step Next(Scheduler& s) {
  Step r;
  s.NextBatch(SteadyClock::now(), &r.batch, &r.finished);
  return r;
}

// Marks a batch delivered, as the engine loop does.
void Deliver(const Step& run) {
  for (const auto& it : run.batch) --it.request->unfinished;
}

TEST(Scheduler, PacksWholeRequestsFifo) {
  Scheduler s({100, 10});
  auto a = Req({10, 20}), b = Req({30}), c = Req({5, 5, 5});
  s.Add(a);
  s.Add(b);
  s.Add(c);
  Step r = Next(s);
  ASSERT_EQ(r.batch.size(), 6u);
  EXPECT_EQ(r.batch[0].request, a);
  EXPECT_EQ(r.batch[2].request, b);
  EXPECT_EQ(r.batch[5].request, c);
  EXPECT_EQ(r.batch[5].seq, 2u);
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(r.finished.empty());
}

TEST(Scheduler, KeepsRequestTogetherWhenBatchIsHalfFull) {
  Scheduler s({100, 10});
  auto a = Req({60}), b = Req({30, 30});
  s.Add(a);
  s.Add(b);
  Step r1 = Next(s);
  ASSERT_EQ(r1.batch.size(), 1u);  // b does not fit the remaining 40 tokens: next batch
  Step r2 = Next(s);
  ASSERT_EQ(r2.batch.size(), 2u);
  EXPECT_EQ(r2.batch[0].request, b);
}

TEST(Scheduler, KeepsRequestTogetherWhenItFitsAFreshBatch) {
  Scheduler s({100, 10});
  s.Add(Req({20}));
  auto b = Req({50, 40});
  s.Add(b);
  EXPECT_EQ(Next(s).batch.size(), 1u);
  EXPECT_EQ(Next(s).batch.size(), 2u);
}

TEST(Scheduler, SplitsLargeRequestsAcrossBatches) {
  Scheduler s({100, 4});
  auto a = Req({10, 10, 10, 10, 10, 10, 10, 10, 10, 10});  // 10 seqs, cap 4
  auto b = Req({10});
  s.Add(a);
  s.Add(b);
  std::vector<size_t> sizes;
  std::vector<uint32_t> order;
  while (!s.empty()) {
    Step r = Next(s);
    sizes.push_back(r.batch.size());
    for (auto& it : r.batch) {
      if (it.request == a) order.push_back(it.seq);
    }
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 4, 3}));  // b rides with the tail of a
  for (uint32_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(order.size(), 10u);
}

TEST(Scheduler, SplitsByTokensAndRunsOversizeSequenceAlone) {
  Scheduler s({100, 64});
  auto a = Req({150, 40, 40, 40});
  s.Add(a);
  EXPECT_EQ(Next(s).batch.size(), 1u);  // 150 > budget: alone
  EXPECT_EQ(Next(s).batch.size(), 2u);  // 80
  EXPECT_EQ(Next(s).batch.size(), 1u);
  EXPECT_TRUE(s.empty());
}

TEST(Scheduler, DropsCancelledAndExpiredBeforeTheyRun) {
  Scheduler s({100, 10});
  auto a = Req({10}), b = Req({10}), c = Req({10});
  a->cancelled = true;
  b->deadline = SteadyClock::now() - std::chrono::seconds(1);
  s.Add(a);
  s.Add(b);
  s.Add(c);
  Step r = Next(s);
  ASSERT_EQ(r.batch.size(), 1u);
  EXPECT_EQ(r.batch[0].request, c);
  ASSERT_EQ(r.finished.size(), 2u);
  EXPECT_EQ(r.finished[0]->failure.code(), StatusCode::kUnavailable);
  EXPECT_NE(r.finished[1]->failure.message().find("deadline"), std::string::npos);
}

TEST(Scheduler, CancelAfterPartialRunFinishesWhenInFlightWorkReturns) {
  Scheduler s({20, 64});
  auto a = Req({10, 10, 10, 10});
  s.Add(a);
  Step r1 = Next(s);
  ASSERT_EQ(r1.batch.size(), 2u);
  a->cancelled = true;
  Step r2 = Next(s);
  EXPECT_TRUE(r2.batch.empty());
  EXPECT_TRUE(r2.finished.empty());  // two sequences still in flight
  EXPECT_EQ(a->unfinished, 2u);
  EXPECT_TRUE(a->failed);
  Deliver(r1);
  EXPECT_EQ(a->unfinished, 0u);
}

// The queued work the engine loop's batch coalescing looks at: tokens and sequences not
// yet scheduled, through whole requests, splits, drops and DropAll.
TEST(Scheduler, CountsQueuedWork) {
  Scheduler s({100, 4});
  auto a = Req({10, 20, 30, 40, 50}), b = Req({5}), c = Req({7, 7});
  s.Add(a);
  s.Add(b);
  EXPECT_EQ(s.queued_tokens(), 155);
  EXPECT_EQ(s.queued_seqs(), 6);
  EXPECT_TRUE(s.full_batch_queued());  // 155 tokens >= 100
  Step r1 = Next(s);                   // a's first four sequences (100 tokens)
  ASSERT_EQ(r1.batch.size(), 4u);
  EXPECT_EQ(s.queued_tokens(), 55);
  EXPECT_EQ(s.queued_seqs(), 2);
  EXPECT_FALSE(s.full_batch_queued());
  s.Add(c);
  c->cancelled = true;
  Step r2 = Next(s);  // a's last and b; c dropped
  EXPECT_EQ(r2.batch.size(), 2u);
  EXPECT_EQ(s.queued_tokens(), 0);
  EXPECT_EQ(s.queued_seqs(), 0);
  s.Add(Req({1, 1, 1, 1}));
  EXPECT_TRUE(s.full_batch_queued());  // 4 sequences = the cap
  std::vector<std::shared_ptr<EngineRequest>> fin;
  s.DropAll(Status(StatusCode::kUnavailable, "bye"), &fin);
  EXPECT_EQ(s.queued_tokens(), 0);
  EXPECT_EQ(s.queued_seqs(), 0);
}

TEST(Scheduler, DropAll) {
  Scheduler s({100, 10});
  s.Add(Req({10}));
  s.Add(Req({10}));
  std::vector<std::shared_ptr<EngineRequest>> fin;
  s.DropAll(Status(StatusCode::kUnavailable, "bye"), &fin);
  EXPECT_EQ(fin.size(), 2u);
  EXPECT_TRUE(s.empty());
}

}  // namespace
}  // namespace sluice
