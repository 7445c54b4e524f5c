#include "engine/graph_buckets.h"

#include <algorithm>

namespace sluice {

std::vector<int64_t> GraphBuckets(int64_t max_tokens) {
  std::vector<int64_t> out;
  if (max_tokens < 1) return out;
  auto add = [&](int64_t b) {
    if (b > max_tokens) {
      if (out.empty() || out.back() < max_tokens) out.push_back(max_tokens);
      return false;
    }
    out.push_back(b);
    return true;
  };
  for (int64_t b : {16, 32, 48, 64}) {
    if (!add(b)) return out;
  }
  for (int64_t p = 64;; p *= 2) {
    for (int64_t k = 1; k <= 4; ++k) {
      if (!add(p + k * p / 4)) return out;
    }
  }
}

int64_t GraphBucketFor(const std::vector<int64_t>& buckets, int64_t tokens) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), tokens);
  return it == buckets.end() ? 0 : *it;
}

}  // namespace sluice
