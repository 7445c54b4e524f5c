// Helpers shared by the attention kernels (attention.cu, attention_tc.cu): the logical key
// order of shared-prefix reuse and the key range a block of query rows can see.
#pragma once

#include <cstdint>

namespace sluice::cuda {

// Shared-prefix reuse: the rows of sequence seq's prefix, prefix_of[seq] (none when
// prefix_of is null or the entry is -1): `len` rows starting at row `base`.
struct PrefixRows {
  int len;
  int64_t base;
};
__device__ __forceinline__ PrefixRows PrefixOf(const int32_t* __restrict__ prefix_of,
                                               const int32_t* __restrict__ cu, int seq) {
  const int p = prefix_of != nullptr ? prefix_of[seq] : -1;
  return p < 0 ? PrefixRows{0, 0} : PrefixRows{cu[p + 1] - cu[p], cu[p]};
}

// Keys are in logical order: a sequence with a prefix sees the prefix's rows (starting at
// row pbase) before its own (starting at row base).
__device__ __forceinline__ int64_t KeyRow(int kl, int pre, int64_t pbase, int base) {
  return kl < pre ? pbase + kl : base + (kl - pre);
}

// The logical keys [begin, end) that query rows [q0, q0 + rows) of a sequence (local
// indices, logical positions pre + local) can see; begin is a multiple of `tile`, so tiles
// start at logical position 0 whatever the batch.
struct KeyRange {
  int begin, end;
};
__device__ __forceinline__ KeyRange VisibleKeys(int pre, int len, int q0, int rows, bool causal,
                                                int window, int tile) {
  const int q_last = pre + min(len, q0 + rows) - 1;
  KeyRange r{0, causal ? q_last + 1 : pre + len};
  if (window > 0) {
    r.begin = max(0, pre + q0 - window + 1) / tile * tile;
    r.end = min(r.end, q_last + window);
  }
  return r;
}

}  // namespace sluice::cuda
