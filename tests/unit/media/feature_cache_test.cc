// media/feature_cache.h: SHA-256 against the FIPS 180-2 test vectors, LRU order and byte bound,
// hit/miss counts, entries keyed by content (not by where it came from).
#include "media/feature_cache.h"

#include <gtest/gtest.h>

namespace sluice::media {
namespace {

TEST(FeatureCache, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(DigestHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestHex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(FeatureCache, LeastRecentlyUsedIsEvicted) {
  FeatureCache c(2 * (sizeof(float) + FeatureCache::kEntryOverhead));  // two 1-float entries
  const Digest a = Sha256("a"), b = Sha256("b"), d = Sha256("d");
  std::vector<float> out;
  EXPECT_FALSE(c.Get(a, &out));
  c.Put(a, {1.f});
  c.Put(b, {2.f});
  ASSERT_TRUE(c.Get(a, &out));  // a is now the most recent
  EXPECT_EQ(out, std::vector<float>{1.f});
  c.Put(d, {3.f});  // evicts b
  EXPECT_EQ(c.size(), 2u);
  EXPECT_FALSE(c.Get(b, &out));
  ASSERT_TRUE(c.Get(d, &out));
  EXPECT_EQ(out, std::vector<float>{3.f});
  c.Put(d, {4.f});  // replaces
  ASSERT_TRUE(c.Get(d, &out));
  EXPECT_EQ(out, std::vector<float>{4.f});
  EXPECT_EQ(c.bytes(), 2 * (sizeof(float) + FeatureCache::kEntryOverhead));
  EXPECT_EQ(c.hits(), 3u);
  EXPECT_EQ(c.misses(), 2u);
}

TEST(FeatureCache, ZeroBytesKeepsNothing) {
  FeatureCache c(0);
  c.Put(Sha256("x"), {1.f});
  std::vector<float> out;
  EXPECT_FALSE(c.Get(Sha256("x"), &out));
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace sluice::media
