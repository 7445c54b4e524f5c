// Varlen multi-head attention on packed sequences (see AttentionParams in backend.h).
//
// Mask, for a query at position i of a sequence of length L (0-based, in-sequence):
//   causal, window == 0:          keys j with 0 <= j <= i
//   causal, window  > 0:          keys j with i - window < j <= i
//   bidirectional, window == 0:   all keys 0 <= j < L
//   bidirectional, window  > 0:   keys j with |i - j| < window
// (ModernBERT's local_attention = w attends |i - j| <= w / 2, i.e. window = w / 2 + 1.)
// With key_lens, keys j >= key_lens[s] are left out of every range; a query whose range is
// then empty gets zeros.
//
// Exact softmax in f32 (max subtracted) over the whole allowed key range of each query
// row. Every query row is computed by the same sequence of operations whatever the batch,
// the blocking or the thread count: results are batch invariant and deterministic.
// q/k/v may be strided column views of one fused QKV matrix; out must not alias them.
#pragma once

#include "backend/backend.h"

namespace sluice::cpu {

void AttentionKernel(const AttentionParams& p);

}  // namespace sluice::cpu
