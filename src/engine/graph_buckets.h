// Token-count buckets of CUDA-graph forwards (EngineOptions::cuda_graphs).
//
// A recorded forward replays fixed shapes, so a batch runs in the smallest bucket that holds
// its tokens, padded to the bucket's token count (padding rows belong to no sequence and
// are never read back). Buckets are multiples of 16: 16, 32, 48, 64, then four per
// doubling (80, 96, 112, 128, 160, 192, ..., 3584, 4096, ...). Padding is then under 20%
// of a bucket above 64 tokens, where the forward's time grows with its tokens, and up to
// 4096 tokens takes 28 graphs.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

// The buckets up to `max_tokens` in ascending order; `max_tokens` itself ends the list
// when it is not on the ladder (a budget of 100 gives 16, 32, 48, 64, 80, 96, 100). Empty
// when max_tokens < 1.
std::vector<int64_t> GraphBuckets(int64_t max_tokens);

// The smallest bucket of `buckets` (ascending) holding `tokens`, or 0 if none does.
int64_t GraphBucketFor(const std::vector<int64_t>& buckets, int64_t tokens);

}  // namespace sluice
