// Sampling on the host (the CPU backend's Sample, and the reference the CUDA sampler is
// tested against). Per row, in this order (transformers' processors, then its warpers):
//   1. raw logprobs: log_softmax of the logits as given (what is reported);
//   2. adjustments: repetition penalty, then additive terms (penalties, logit_bias, masks);
//   3. forced token / greedy argmax (lowest id among equal maxima), or
//   4. y = logit / temperature; top_k keeps y >= the k-th largest y; e = exp(y - max y);
//      top_p keeps the tokens whose strictly larger tokens hold less than top_p of the
//      mass (ties kept together); min_p keeps e >= min_p (e of the best token is 1);
//   5. draw: u = UniformFloat(seed, counter) (sampling_math.h); the token where the
//      running sum of kept e, in token-id order, first exceeds u * (sum of kept e).
#pragma once

#include "backend/backend.h"

namespace sluice::cpu {

// p.logits in host memory (f32, [num_rows, vocab]); overwritten.
void SampleRows(const SampleParams& p);

}  // namespace sluice::cpu
