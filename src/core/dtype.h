// Storage dtypes of weights and KV, and their conversions to fp32 (compute is fp32 on the CPU).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace skim {

enum class DType : uint8_t { F32, F16, BF16 };

constexpr size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements stored as `t` to fp32.
void to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace skim
