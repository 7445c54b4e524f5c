#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace sluice {
namespace {

// Every index of [0, n) is visited exactly once per call, over many back-to-back calls of
// varying sizes (more and fewer chunks than threads), with and without spinning.
TEST(ThreadPool, EveryIndexOnceAcrossManyCalls) {
  for (int spin : {0, 20}) {
    for (int threads : {1, 2, 3, 8}) {
      ThreadPool pool(threads, spin);
      std::vector<std::atomic<int>> hits(300);
      for (int call = 0; call < 3000; ++call) {
        const size_t n = static_cast<size_t>(call % 300) + 1;
        pool.ParallelFor(n, [&](size_t b, size_t e) {
          ASSERT_LE(b, e);
          ASSERT_LE(e, n);
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        });
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].exchange(0), 1)
              << "threads " << threads << " spin " << spin << " call " << call << " index " << i;
        }
      }
    }
  }
}

TEST(ThreadPool, GrainLimitsChunksAndNestedCallsRunInline) {
  ThreadPool pool(4);
  std::atomic<int> chunks{0};
  pool.ParallelFor(
      10, [&](size_t, size_t) { chunks.fetch_add(1); }, /*grain=*/5);
  EXPECT_EQ(chunks.load(), 2);
  std::atomic<int> inner{0};
  pool.ParallelFor(4, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      int calls = 0;
      pool.ParallelFor(8, [&](size_t ib, size_t ie) {
        ++calls;
        inner.fetch_add(static_cast<int>(ie - ib));
      });
      EXPECT_EQ(calls, 1);  // inline on this thread
    }
  });
  EXPECT_EQ(inner.load(), 32);
}

// Callers on several threads are serialised; each sees its own call complete.
TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(3, 10);
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int k = 0; k < 500; ++k) {
        std::atomic<long> mine{0};
        pool.ParallelFor(64, [&](size_t b, size_t e) { mine.fetch_add(static_cast<long>(e - b)); });
        EXPECT_EQ(mine.load(), 64);
        total.fetch_add(mine.load());
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4L * 500 * 64);
}

// A pool made and destroyed at once, or destroyed right after a call, shuts down cleanly
// (a worker that had not yet started still takes part in the first call).
TEST(ThreadPool, CallRightAfterConstructionAndDestruction) {
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(4, i % 2 ? 5 : 0);
    std::atomic<int> n{0};
    pool.ParallelFor(4, [&](size_t b, size_t e) { n.fetch_add(static_cast<int>(e - b)); });
    EXPECT_EQ(n.load(), 4);
  }
  for (int i = 0; i < 50; ++i) ThreadPool idle(3);
}

}  // namespace
}  // namespace sluice
