// Private to the CPU attention kernels (attention.cc, attention_bf16.cc): the unit of
// work and where a sequence's keys are. Not part of the backend's interface.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/backend.h"

namespace sluice::cpu {
// Query rows whose scores are held at once (S is kSubBlock x keys per thread).
constexpr int kSubBlock = 64;
// One unit of work: query rows [q0, q1) of head `head` of sequence `seq`.
struct AttnTask {
  int seq, head, q0, q1;
};
// Allowed key range [lo, hi] of the query at logical position i of a sequence of `len`
// keys (see attention.h); empty (lo > hi) when a key limit (key_lens) ends the keys before
// the query's window starts.
inline void KeyRange(const AttentionParams& p, int i, int len, int* lo, int* hi) {
  *lo = p.window > 0 ? std::max(0, i - p.window + 1) : 0;
  if (p.causal) {
    *hi = std::min(len - 1, i);
  } else {
    *hi = p.window > 0 ? std::min(len - 1, i + p.window - 1) : len - 1;
  }
}
// Where sequence `seq`'s keys are: its queries sit at logical positions pre, pre + 1, ...,
// its keys at 0 .. klen - 1 are rows Row(kl) of k/v (a shared prefix's rows then its own,
// or rows of the paged cache through the block table).
struct SeqKeys {
  int base = 0, len = 0;  // the sequence's own (query) rows in q/out
  int pre = 0, klen = 0;
  int64_t pbase = 0;
  const int32_t* blocks = nullptr;  // paged: this sequence's block table
  int block_size = 16;
  int64_t Row(int kl) const {
    if (blocks != nullptr) {
      return static_cast<int64_t>(blocks[kl / block_size]) * block_size + kl % block_size;
    }
    return kl < pre ? pbase + kl : base + (kl - pre);
  }
};
inline SeqKeys KeysOf(const AttentionParams& p, int seq) {
  SeqKeys k;
  k.base = p.cu_seqlens[seq];
  k.len = p.cu_seqlens[seq + 1] - k.base;
  if (p.paged()) {
    k.pre = p.kv_start[seq];
    k.blocks = p.kv_block_table + static_cast<int64_t>(seq) * p.kv_blocks_per_seq;
    k.block_size = p.kv_block_size;
  } else if (p.prefix_of != nullptr && p.prefix_of[seq] >= 0) {
    const int q = p.prefix_of[seq];
    k.pre = p.cu_seqlens[q + 1] - p.cu_seqlens[q];
    k.pbase = p.cu_seqlens[q];
  }
  k.klen = k.pre + k.len;
  // Keys past the sequence's limit are seen by no query (its queries still run).
  if (p.key_lens != nullptr) k.klen = std::min(k.klen, p.key_lens[seq]);
  return k;
}

// The task without its rows that see no key (a key limit before their window: always the
// task's last rows, as both ends of the range only grow with the row); those rows of `out`
// (this task's head, row stride ldo) get zeros. Empty when no row sees a key.
template <typename E>
inline AttnTask TrimRowsWithoutKeys(const AttentionParams& p, const SeqKeys& sk,
                                    const AttnTask& task, E* out, int64_t ldo) {
  AttnTask t = task;
  for (int lo, hi; t.q1 > t.q0; --t.q1) {
    KeyRange(p, sk.pre + t.q1 - 1, sk.klen, &lo, &hi);
    if (lo <= hi) break;
    std::memset(out + (t.q1 - 1) * ldo, 0, p.head_dim * sizeof(E));
  }
  return t;
}

namespace amx_attention {
// bf16 products on AMX tiles (attention_amx.cc): q, k, v and the probabilities rounded to
// bf16; scores, softmax and sums in f32. Hw: only where amx::Available() and the CPU has
// AMX-BF16 and AVX512-BF16. Emu: the same driver with the tile operations emulated in C++
// (tests; needs AVX512-BF16). Both for p.head_dim <= kMaxHeadDim.
constexpr int kMaxHeadDim = 256;
struct Bf16AttnScratch {
  uint16_t* kp;  // nkp * dp: packed K
  uint16_t* vp;  // nkp * dp: packed V
  float* s;      // kSubBlock * nkp: scores
  uint16_t* pb;  // kSubBlock * nkp: bf16 probabilities
  uint16_t* qb;  // kSubBlock * dp: bf16 queries
};
// dp: head_dim rounded up to 32; nkp: the most keys of one sequence rounded up to 32.
inline int Bf16PaddedDim(int head_dim) { return (head_dim + 31) / 32 * 32; }
inline int64_t Bf16PaddedKeys(int max_keys) {
  return (static_cast<int64_t>(max_keys) + 31) / 32 * 32;
}
void RunTaskHw(const AttentionParams& p, const AttnTask& task, const Bf16AttnScratch& ws);
void RunTaskEmu(const AttentionParams& p, const AttnTask& task, const Bf16AttnScratch& ws);
}  // namespace amx_attention

}  // namespace sluice::cpu
