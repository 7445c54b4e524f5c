// Token-count buckets of CUDA-graph forwards (EngineOptions::cuda_graphs).
//
// A recorded forward replays fixed shapes, so a batch runs in the smallest bucket that holds
// its tokens, padded to the bucket's token count (padding rows belong to no sequence and
// are never read back). Buckets are 16 x {1, 2, 3, 4, 6, 8, 12, 16, ...}: powers of two
// and 1.5x them, so padding stays under half a batch (a third above 32 tokens) while a few
// thousand tokens need fewer than twenty graphs.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

// The buckets up to `max_tokens` in ascending order; `max_tokens` itself ends the list
// when it is not on the ladder (a budget of 100 gives 16, 32, 48, 64, 96, 100). Empty
// when max_tokens < 1.
std::vector<int64_t> GraphBuckets(int64_t max_tokens);

// The smallest bucket of `buckets` (ascending) holding `tokens`, or 0 if none does.
int64_t GraphBucketFor(const std::vector<int64_t>& buckets, int64_t tokens);

}  // namespace sluice
