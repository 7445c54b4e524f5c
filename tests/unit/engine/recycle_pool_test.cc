#include "core/recycle_pool.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

// The smallest kept buffer that holds the request comes back (its memory, not a copy); small
// buffers and those over the budget are not kept.
TEST(RecyclePool, SmallestFitWithinTheBudget) {
  RecyclePool<std::vector<float>> pool(/*max_bytes=*/40 << 10, /*min_bytes=*/4 << 10);
  std::vector<float> out;
  EXPECT_FALSE(pool.Take(1, &out));
  std::vector<float> a, b, c;
  a.reserve(4096);  // 16 KiB
  b.reserve(2048);  // 8 KiB
  c.reserve(512);   // 2 KiB: under min_bytes
  const float* pa = a.data();
  const float* pb = b.data();
  pool.Keep(std::move(a));
  pool.Keep(std::move(b));
  pool.Keep(std::move(c));
  EXPECT_EQ(pool.bytes(), size_t{24} << 10);
  std::vector<float> big;
  big.reserve(8192);  // 32 KiB: over the budget left
  pool.Keep(std::move(big));
  EXPECT_EQ(pool.bytes(), size_t{24} << 10);
  ASSERT_TRUE(pool.Take(6 << 10, &out));  // 6 KiB: the 8 KiB one fits best
  EXPECT_EQ(out.data(), pb);
  EXPECT_EQ(pool.bytes(), size_t{16} << 10);
  ASSERT_TRUE(pool.Take(9 << 10, &out));
  EXPECT_EQ(out.data(), pa);
  EXPECT_FALSE(pool.Take(1, &out));
  EXPECT_EQ(pool.bytes(), 0u);
}

}  // namespace
}  // namespace sluice
