// Helpers shared by the attention kernels (attention.cu, attention_tc.cu): the logical key
// order of shared-prefix reuse and the key range a block of query rows can see.
#pragma once

#include <cstdint>

#include "backend/backend.h"

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

// Where the keys of a batch's sequences are (AttentionParams): their own rows after a
// shared prefix's (prefix_of), or rows of a paged KV cache through block tables.
constexpr int kKvBlock = 16;  // KV cache block size the kernels support
struct KeySource {
  const int32_t* prefix_of = nullptr;
  const int32_t* block_table = nullptr;  // paged: [seqs * blocks_per_seq]
  const int32_t* kv_start = nullptr;     // paged: [seqs] cached tokens before the queries
  int blocks_per_seq = 0;
  const int32_t* key_lens = nullptr;  // [seqs] keys past key_lens[seq] unseen (not paged)
};
inline KeySource KeySourceOf(const AttentionParams& p) {
  KeySource s;
  s.prefix_of = p.prefix_of;
  s.block_table = p.kv_block_table;
  s.kv_start = p.kv_start;
  s.blocks_per_seq = p.kv_blocks_per_seq;
  s.key_lens = p.key_lens;
  return s;
}

// The logical keys a sequence's queries may see: its `klen` keys, cut at its key limit
// (AttentionParams::key_lens: ColBERT expansion tokens no query attends to).
__device__ __forceinline__ int KeyLimit(const KeySource& src, int seq, int klen) {
  return src.key_lens != nullptr ? min(klen, src.key_lens[seq]) : klen;
}

// One sequence's keys in logical order: `pre` keys before its own queries (a shared
// prefix's rows starting at pbase, or cached tokens), then its own rows starting at base;
// with a paged cache every key is a cache row found through the block table.
struct SeqKeys {
  int pre;
  int64_t pbase;
  int base;
  const int32_t* blocks;  // paged: this sequence's block table, else null
  __device__ __forceinline__ int64_t Row(int kl) const {
    if (blocks != nullptr) {
      return static_cast<int64_t>(blocks[kl / kKvBlock]) * kKvBlock + kl % kKvBlock;
    }
    return kl < pre ? pbase + kl : base + (kl - pre);
  }
};
__device__ __forceinline__ SeqKeys KeysOf(const KeySource& src, const int32_t* __restrict__ cu,
                                          int seq) {
  const int base = cu[seq];
  if (src.block_table != nullptr) {
    return SeqKeys{src.kv_start[seq], 0, base,
                   src.block_table + static_cast<int64_t>(seq) * src.blocks_per_seq};
  }
  const PrefixRows pr = PrefixOf(src.prefix_of, cu, seq);
  return SeqKeys{pr.len, pr.base, base, nullptr};
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
