// Element types and scalar conversions (fp16/bf16 <-> fp32), shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice {

// kI8: int8 weights with per-channel scales (a Linear compute dtype on CPU, `--dtype int8`).
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kI8 };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "f32", "f16", "bf16", "i32", "i64", "int8"
// Parses "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16", "int8"; false if unknown.
bool ParseDType(std::string_view name, DType* out);

inline float BF16ToF32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (same as PyTorch's conversion).
inline uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

}  // namespace sluice
