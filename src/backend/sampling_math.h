// The random numbers of sampling, shared by the CPU and CUDA samplers: a draw is a pure
// function of (seed, counter), so a sequence's k-th sampled token is the same whatever the
// batch around it, after a preemption, and on either backend.
//
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) keyed
// by the 64-bit seed, counter = (counter, 0); the first output word gives a uniform float in
// [0, 1) with 24 random bits.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SLUICE_HD __host__ __device__ __forceinline__
#else
#define SLUICE_HD inline
#endif

namespace sluice {

SLUICE_HD uint32_t MulHiLo32(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

SLUICE_HD uint32_t Philox4x32(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = MulHiLo32(0xD2511F53u, c0, &hi0);
    const uint32_t lo1 = MulHiLo32(0xCD9E8D57u, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

// Uniform in [0, 1): 24 random bits.
SLUICE_HD float UniformFloat(uint64_t seed, uint64_t counter) {
  return static_cast<float>(Philox4x32(seed, counter) >> 8) * (1.0f / 16777216.0f);
}

// The repetition penalty of transformers' RepetitionPenaltyLogitsProcessor.
SLUICE_HD float RepetitionPenalized(float logit, float penalty) {
  return logit < 0.f ? logit * penalty : logit / penalty;
}

}  // namespace sluice
