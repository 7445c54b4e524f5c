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
//
// products == kBF16 (a bf16 model's f32 activations): on CPUs with AMX-BF16, Q K^T and P V run
// on AMX tiles with q, k, v and the probabilities rounded to bf16 (attention_amx.cc: scores,
// softmax and sums stay f32; batch invariant the same way) unless the KV cache is paged
// (generation); elsewhere the f32 kernel runs.
//
// bf16 q/k/v/out (Backend::InnerActivationDType): the AMX driver (where it runs; any
// `products`) or the f32 kernel read the bf16 rows as they are (widened exactly) and round
// each output once: bit for bit the f32 result on the widened inputs, rounded.
#pragma once

#include <string>

#include "backend/backend.h"

namespace sluice::cpu {

void AttentionKernel(const AttentionParams& p);

// True where bf16 products (AttentionParams::products) run on AMX tiles (AMX-BF16 and
// AVX512-BF16 after the ISA cap, and Linux's permission) and SLUICE_CPU_ATTENTION is not
// f32; elsewhere they run in f32.
bool AmxAttentionAvailable();
// SLUICE_CPU_ATTENTION: "auto" (unset: AMX where usable) or "f32" (every model's attention in
// f32, for comparisons); CreateCpuBackend refuses any other value.
std::string AttentionMode();

// Tests only: bf16 products (AttentionParams::products) run the AMX driver with its tile
// operations emulated in C++ where the CPU has AVX512-BF16 (attention_amx.cc), so the driver
// is tested on machines without AMX.
void SetAttentionAmxEmulationForTesting(bool on);

}  // namespace sluice::cpu
