#pragma once
// 16-bit float conversions: bfloat16 and IEEE binary16, both rounded to nearest even, NaN kept
// as a quiet NaN, subnormals exact. Plain bit manipulation so results match PyTorch's on any CPU.
#include <cstdint>
#include <cstring>

namespace servelab {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// fp32 -> bf16 bits, round to nearest even (as torch's .to(torch.bfloat16)).
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

/// fp32 -> IEEE half bits, round to nearest even; overflow gives ±inf, tiny values subnormals.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;               // >= 65520 rounds to inf (or is inf)
  if (a < 0x38800000u) {                                     // below 2^-14: subnormal half or zero
    if (a < 0x33000000u) return sign;                        // below 2^-25: rounds to zero
    const int exp = static_cast<int>(a >> 23);               // 102..112
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;       // 24 significant bits
    const int shift = 126 - exp;                             // 14..24 bits to drop
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;        // may carry into the normal range: fine
    return sign | static_cast<uint16_t>(h);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t h = ((a >> 13) - ((127u - 15u) << 10));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);
  // Subnormal: value = mant * 2^-24, exact in fp32.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

/// Round an fp32 value through a 16-bit format and back (identity for f32).
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }
inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

}  // namespace servelab
