#include "engine/graph_buckets.h"

#include <algorithm>

namespace sluice {

std::vector<int64_t> GraphBuckets(int64_t max_tokens) {
  std::vector<int64_t> out;
  if (max_tokens < 1) return out;
  for (int64_t p = 16;; p *= 2) {
    for (int64_t b : {p, p + p / 2}) {
      if (b == 24) continue;  // 16, 32, 48, ...: steps of 16 below 64
      if (b > max_tokens) {
        if (out.empty() || out.back() < max_tokens) out.push_back(max_tokens);
        return out;
      }
      out.push_back(b);
    }
  }
}

int64_t GraphBucketFor(const std::vector<int64_t>& buckets, int64_t tokens) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), tokens);
  return it == buckets.end() ? 0 : *it;
}

}  // namespace sluice
