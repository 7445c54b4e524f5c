// EngineLoop on a golden fixture model: results through the loop equal Engine::Run
// (bit-for-bit when batches are the same, within 1e-5 when requests are mixed across
// threads), and queue limits, cancellation, deadlines and shutdown behave.
#include "engine/engine_loop.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <simdjson.h>

#include <chrono>
#include <future>
#include <thread>

namespace sluice {
namespace {

const std::string kModel = std::string(SLUICE_FIXTURES_DIR) + "/models/bert_cross_encoder";
const std::string kGolden = std::string(SLUICE_FIXTURES_DIR) + "/golden/bert_cross_encoder.json";

std::vector<TokenSequence> GoldenInputs() {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kGolden);
  std::vector<TokenSequence> v;
  for (auto in : doc["inputs"].get_array()) {
    TokenSequence s;
    for (auto id : in["ids"].get_array()) s.ids.push_back(static_cast<int32_t>(id.get_int64()));
    for (auto t : in["type_ids"].get_array()) {
      s.type_ids.push_back(static_cast<int32_t>(t.get_int64()));
    }
    v.push_back(std::move(s));
  }
  return v;
}

std::unique_ptr<Engine> Load(int64_t max_batch_tokens = 8192, int max_num_seqs = 256) {
  EngineOptions o;
  o.model_dir = kModel;
  o.backend.num_threads = 2;
  o.max_batch_tokens = max_batch_tokens;
  o.max_num_seqs = max_num_seqs;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

struct Result {
  Status status;
  std::vector<PooledOutput> outputs;
  int batches = 0;
};

// Submits a request and returns a future for its completion.
std::future<Result> Submit(EngineLoop& loop, std::vector<TokenSequence> inputs,
                           std::shared_ptr<EngineRequest>* out = nullptr) {
  auto promise = std::make_shared<std::promise<Result>>();
  auto r = std::make_shared<EngineRequest>();
  r->inputs = std::move(inputs);
  r->sink.on_done = [promise](EngineRequest& req, const Status& s) {
    promise->set_value(Result{s, std::move(req.outputs), req.batches});
  };
  if (out) *out = r;
  Status s = loop.Submit(r);
  if (!s.ok()) promise->set_value(Result{s, {}, 0});
  return promise->get_future();
}

EngineLoopOptions Opts(int64_t tokens, int seqs, int depth = 1024) {
  EngineLoopOptions o;
  o.limits.max_batch_tokens = tokens;
  o.limits.max_num_seqs = seqs;
  o.max_queue_depth = depth;
  return o;
}

TEST(EngineLoop, SameBatchesAsEngineRunBitForBit) {
  const auto inputs = GoldenInputs();
  for (auto [tokens, seqs] : {std::pair<int64_t, int>{8192, 256}, {200, 256}, {8192, 7}}) {
    auto offline = Load(tokens, seqs);
    auto want = offline->Run(inputs);
    ASSERT_TRUE(want.ok());
    EngineLoop loop(Load(tokens, seqs), Opts(tokens, seqs));
    Result got = Submit(loop, inputs).get();
    ASSERT_TRUE(got.status.ok()) << got.status.ToString();
    ASSERT_EQ(got.outputs.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_EQ(got.outputs[i].values, (*want)[i].values) << "input " << i << " budget " << tokens;
      EXPECT_EQ(got.outputs[i].raw, (*want)[i].raw);
    }
    if (seqs == 7) {
      EXPECT_EQ(got.batches, 10);  // 64 sequences split over 10 batches
    }
  }
}

TEST(EngineLoop, ConcurrentRequestsMatchOfflineResults) {
  const auto inputs = GoldenInputs();
  auto offline = Load();
  auto want = offline->Run(inputs);
  ASSERT_TRUE(want.ok());
  for (bool coalesce : {true, false}) {
    std::atomic<int> batches{0};
    std::atomic<int64_t> device_ns{0};
    EngineLoopOptions o = Opts(300, 16);
    o.coalesce = coalesce;
    o.on_batch = [&](const BatchStats& b) {
      EXPECT_TRUE(b.ok);
      EXPECT_LE(b.num_seqs, 16);
      EXPECT_GT(b.device_seconds, 0.0);
      EXPECT_LE(b.device_seconds, b.compute_seconds);
      device_ns += static_cast<int64_t>(b.device_seconds * 1e9);
      batches++;
    };
    const auto began = SteadyClock::now();
    EngineLoop loop(Load(), o);
    // 8 threads each submit requests of 1..5 consecutive inputs.
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (size_t start = t; start < inputs.size(); start += 8) {
          const size_t n = 1 + (start % 5);
          std::vector<TokenSequence> req;
          for (size_t k = 0; k < n; ++k) req.push_back(inputs[(start + k) % inputs.size()]);
          Result r = Submit(loop, req).get();
          if (!r.status.ok()) {
            failures++;
            continue;
          }
          for (size_t k = 0; k < n; ++k) {
            const auto& a = r.outputs[k].values;
            const auto& b = (*want)[(start + k) % inputs.size()].values;
            if (a.size() != b.size() || std::abs(a[0] - b[0]) > 1e-5f) failures++;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0) << "coalesce " << coalesce;
    EXPECT_GT(batches.load(), 0);
    // Device time per batch does not overlap: it adds up to at most the wall time.
    EXPECT_LE(
        device_ns.load(),
        std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - began).count());
  }
}

// On CPU the forward runs inside Engine::Submit: a batch's results are delivered before
// the next batch starts (not after its forward), even when the next one is ready first.
TEST(EngineLoop, OnCpuResultsAreDeliveredBeforeTheNextBatchRuns) {
  const auto inputs = GoldenInputs();
  ASSERT_GE(inputs.size(), 8u);
  EngineLoop loop(Load(), Opts(8192, 2));  // two sequences per batch: one request each
  ASSERT_FALSE(loop.engine().pipelined());
  loop.Pause();
  std::vector<std::shared_ptr<EngineRequest>> reqs(4);
  std::vector<std::future<Result>> done;
  for (size_t i = 0; i < reqs.size(); ++i) {
    done.push_back(Submit(loop, {inputs[2 * i], inputs[2 * i + 1]}, &reqs[i]));
  }
  loop.Resume();
  for (auto& f : done) ASSERT_TRUE(f.get().status.ok());
  for (size_t i = 0; i + 1 < reqs.size(); ++i) {
    EXPECT_LE(reqs[i]->finished, reqs[i + 1]->started) << "request " << i;
  }
}

TEST(EngineLoop, HoldPlacementPinsTheThreadsAndLiftsItself) {
  cpu_set_t mine;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU: a hold cannot be told from none";
  const int a = cpus.front(), b = cpus.back();
  EngineLoop loop(Load(), Opts(8192, 256));
  EXPECT_EQ(loop.placement().engine_cpu, -1);  // no batch yet
  ASSERT_TRUE(Submit(loop, GoldenInputs()).get().status.ok());
  const LoopPlacement seen = loop.placement();
  EXPECT_TRUE(CPU_ISSET(seen.scheduler_cpu, &mine)) << seen.scheduler_cpu;
  EXPECT_TRUE(CPU_ISSET(seen.engine_cpu, &mine)) << seen.engine_cpu;
  EXPECT_EQ(loop.HeldForTesting().engine_cpu, -1);

  // One CPU named for both holds only the engine thread.
  loop.HoldPlacement({a, a}, std::chrono::milliseconds(400));
  LoopPlacement held = loop.HeldForTesting();
  EXPECT_EQ(held.engine_cpu, a);
  EXPECT_EQ(held.scheduler_cpu, -1);
  // Held: each thread on its CPU, and the batches run there.
  loop.HoldPlacement({b, a}, std::chrono::milliseconds(400));
  held = loop.HeldForTesting();
  EXPECT_EQ(held.engine_cpu, a);
  EXPECT_EQ(held.scheduler_cpu, b);
  ASSERT_TRUE(Submit(loop, GoldenInputs()).get().status.ok());
  EXPECT_EQ(loop.placement().engine_cpu, a);
  EXPECT_EQ(loop.placement().scheduler_cpu, b);
  // The hold lifts by itself while the loop idles.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (loop.HeldForTesting().engine_cpu != -1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  held = loop.HeldForTesting();
  EXPECT_EQ(held.engine_cpu, -1);
  EXPECT_EQ(held.scheduler_cpu, -1);

  // CPUs outside the process's set and unknown placements hold nothing.
  int outside = -1;
  for (int c = 0; c < CPU_SETSIZE && outside < 0; ++c) {
    if (!CPU_ISSET(c, &mine)) outside = c;
  }
  loop.HoldPlacement({outside, -1}, std::chrono::milliseconds(400));
  held = loop.HeldForTesting();
  EXPECT_EQ(held.engine_cpu, -1);
  EXPECT_EQ(held.scheduler_cpu, -1);
  // A new hold replaces the one in force; work still completes under it and after it.
  loop.HoldPlacement({-1, b}, std::chrono::milliseconds(100));
  loop.HoldPlacement({-1, a}, std::chrono::milliseconds(100));
  EXPECT_EQ(loop.HeldForTesting().engine_cpu, a);
  ASSERT_TRUE(Submit(loop, GoldenInputs()).get().status.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ASSERT_TRUE(Submit(loop, GoldenInputs()).get().status.ok());
  EXPECT_EQ(loop.HeldForTesting().engine_cpu, -1);
  loop.Shutdown();
  loop.HoldPlacement({a, a}, std::chrono::milliseconds(100));  // after shutdown: nothing
}

TEST(EngineLoop, QueueFullIsResourceExhausted) {
  const auto inputs = GoldenInputs();
  EngineLoop loop(Load(), Opts(8192, 256, 2));
  loop.Pause();
  auto a = Submit(loop, {inputs[0]});
  auto b = Submit(loop, {inputs[1]});
  auto c = Submit(loop, {inputs[2]});
  Result rc = c.get();
  EXPECT_EQ(rc.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(loop.in_loop(), 2);
  loop.Resume();
  EXPECT_TRUE(a.get().status.ok());
  EXPECT_TRUE(b.get().status.ok());
}

TEST(EngineLoop, CancelledAndExpiredWorkIsDroppedBeforeItRuns) {
  const auto inputs = GoldenInputs();
  std::atomic<int> seqs_run{0};
  EngineLoopOptions o = Opts(8192, 256);
  o.on_batch = [&](const BatchStats& b) { seqs_run += b.num_seqs; };
  EngineLoop loop(Load(), o);
  loop.Pause();
  std::shared_ptr<EngineRequest> ra, rb;
  auto a = Submit(loop, {inputs[0], inputs[1]}, &ra);
  auto b = Submit(loop, {inputs[2]}, &rb);
  rb->deadline = SteadyClock::now();  // expired by the time the loop looks at it
  auto c = Submit(loop, {inputs[3]});
  loop.Cancel(*ra);
  loop.Resume();
  EXPECT_EQ(a.get().status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(b.get().status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(c.get().status.ok());
  EXPECT_EQ(seqs_run.load(), 1);
  EXPECT_EQ(loop.in_loop(), 0);
}

TEST(EngineLoop, ValidationNamesTheInput) {
  EngineLoop loop(Load(), Opts(8192, 256));
  auto inputs = GoldenInputs();
  inputs[1].ids[0] = 1 << 20;
  Result r = Submit(loop, inputs).get();
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("input 1"), std::string::npos) << r.status.message();
  Result e = Submit(loop, {TokenSequence{}}).get();
  EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument);
  TokenSequence long_input{std::vector<int32_t>(100000, 5), {}};
  EXPECT_EQ(Submit(loop, {long_input}).get().status.code(), StatusCode::kOutOfRange);
}

TEST(EngineLoop, ShutdownFailsQueuedWorkAndRefusesNew) {
  const auto inputs = GoldenInputs();
  EngineLoop loop(Load(), Opts(8192, 256));
  loop.Pause();
  auto a = Submit(loop, {inputs[0]});
  loop.Shutdown();
  EXPECT_EQ(a.get().status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(Submit(loop, {inputs[1]}).get().status.code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice
