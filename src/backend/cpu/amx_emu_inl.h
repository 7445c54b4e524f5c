// AMX tile arithmetic in portable C++ after the ISA's pseudo-code, for the emulated tile
// operations that let the AMX drivers (gemm_amx_inl.h's AmxEmuOps, attention_amx.cc's
// EmuTiles) run and be tested on machines without AMX. Include it before any AMX/AVX-512
// target pragma: these inline functions must keep the default target.
#pragma once

#include <cstdint>
#include <cstring>

namespace sluice::cpu::amx {

// A bf16 operand as the tiles read it: a denormal (or zero) input is a signed zero.
inline float EmuBf16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if ((h & 0x7f80) == 0) h &= 0x8000;
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Flush to zero, as the tiles do for every result.
inline float EmuFtz(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// TDPBF16PS on 16 x 64-byte tiles: c[m][n] += sum over the 16 pairs k of a[m][k] . b[k][n],
// per element in order, one f32 rounding per product and per sum (never a fused FMA).
inline void EmuDotBf16(const uint8_t* a, const uint8_t* b, uint8_t* c) {
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float acc;
      std::memcpy(&acc, c + m * 64 + n * 4, 4);
      for (int k = 0; k < 16; ++k) {
        for (int i = 0; i < 2; ++i) {
          volatile float prod =
              EmuBf16(a + m * 64 + k * 4 + 2 * i) * EmuBf16(b + k * 64 + n * 4 + 2 * i);
          acc = EmuFtz(acc + prod);
        }
      }
      std::memcpy(c + m * 64 + n * 4, &acc, 4);
    }
  }
}

}  // namespace sluice::cpu::amx
