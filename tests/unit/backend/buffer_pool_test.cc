#include "backend/cpu/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "backend/cpu/workspace.h"

namespace sluice::cpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class BufferPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { BufferPool::SetCapacityForTesting(BufferPool::kDefaultCapacity); }
  void TearDown() override { BufferPool::SetCapacityForTesting(BufferPool::kDefaultCapacity); }
};

TEST_F(BufferPoolTest, ReleasedLargeBufferIsReused) {
  BufferPool::SetCapacityForTesting(0);  // start empty
  BufferPool::SetCapacityForTesting(64 * kMiB);
  size_t cap = 0;
  void* a = BufferPool::Acquire(3 * kMiB, &cap);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_GE(cap, 3 * kMiB);
  std::memset(a, 1, cap);
  BufferPool::Release(a, cap);
  EXPECT_EQ(BufferPool::GetStats().held, 1);
  const int64_t reused = BufferPool::GetStats().reused;
  size_t cap2 = 0;
  void* b = BufferPool::Acquire(2 * kMiB, &cap2);  // fits, wastes less than half
  EXPECT_EQ(b, a);
  EXPECT_EQ(cap2, cap);
  EXPECT_EQ(BufferPool::GetStats().reused, reused + 1);
  EXPECT_EQ(BufferPool::GetStats().held, 0);
  void* c = BufferPool::Acquire(kMiB, &cap2);  // nothing held: a new buffer
  EXPECT_NE(c, a);
  BufferPool::Release(b, cap);
  void* d = BufferPool::Acquire(kMiB, &cap2);  // held one is over twice the size: not given
  EXPECT_NE(d, a);
  BufferPool::Release(c, kMiB);
  BufferPool::Release(d, kMiB);
}

TEST_F(BufferPoolTest, SmallBuffersAreNotHeld) {
  BufferPool::SetCapacityForTesting(0);
  BufferPool::SetCapacityForTesting(64 * kMiB);
  size_t cap = 0;
  void* a = BufferPool::Acquire(4096, &cap);
  BufferPool::Release(a, cap);
  EXPECT_EQ(BufferPool::GetStats().held, 0);
}

TEST_F(BufferPoolTest, HeldBytesStayWithinTheBound) {
  BufferPool::SetCapacityForTesting(0);
  BufferPool::SetCapacityForTesting(5 * kMiB);
  std::vector<void*> bufs;
  for (int i = 0; i < 4; ++i) bufs.push_back(BufferPool::Acquire(2 * kMiB));
  for (void* p : bufs) BufferPool::Release(p, 2 * kMiB);
  auto s = BufferPool::GetStats();
  EXPECT_EQ(s.held, 2);  // the two newest; the oldest were freed
  EXPECT_LE(s.held_bytes, static_cast<int64_t>(5 * kMiB));
  void* big = BufferPool::Acquire(8 * kMiB);  // larger than the bound: freed on release
  BufferPool::Release(big, 8 * kMiB);
  EXPECT_EQ(BufferPool::GetStats().held, 2);
  BufferPool::SetCapacityForTesting(0);
  EXPECT_EQ(BufferPool::GetStats().held, 0);
  EXPECT_EQ(BufferPool::GetStats().held_bytes, 0);
}

TEST_F(BufferPoolTest, WorkspaceOfANewOwnerReusesAFreedOne) {
  BufferPool::SetCapacityForTesting(0);
  BufferPool::SetCapacityForTesting(64 * kMiB);
  void* first = nullptr;
  {
    Workspace ws;
    first = ws.Get(kMiB);
    static_cast<char*>(first)[0] = 1;
  }  // released to the pool
  Workspace ws2;
  EXPECT_EQ(ws2.Get(kMiB), first);
}

TEST_F(BufferPoolTest, ConcurrentAcquireRelease) {
  BufferPool::SetCapacityForTesting(16 * kMiB);
  auto work = [](int seed) {
    for (int i = 0; i < 2000; ++i) {
      const size_t bytes = (256 + static_cast<size_t>((i * 7 + seed) % 9) * 128) * 1024;
      size_t cap = 0;
      auto* p = static_cast<unsigned char*>(BufferPool::Acquire(bytes, &cap));
      ASSERT_GE(cap, bytes);
      p[0] = static_cast<unsigned char>(seed);
      p[bytes - 1] = static_cast<unsigned char>(seed);
      ASSERT_EQ(p[0], static_cast<unsigned char>(seed));
      ASSERT_EQ(p[bytes - 1], static_cast<unsigned char>(seed));
      BufferPool::Release(p, cap);
    }
  };
  std::thread a(work, 1), b(work, 2);
  a.join();
  b.join();
  EXPECT_LE(BufferPool::GetStats().held_bytes, static_cast<int64_t>(16 * kMiB));
}

}  // namespace
}  // namespace sluice::cpu
