#pragma once
// FP8 E4M3 ("e4m3fn", as torch.float8_e4m3fn and the OCP FP8 spec): 1 sign, 4 exponent bits
// (bias 7), 3 mantissa bits, no infinities, NaN = S.1111.111, largest finite ±448, smallest
// normal 2^-6, subnormals down to 2^-9. Plain bit manipulation so results match PyTorch's cast.
#include <cmath>
#include <cstdint>

#include "engine/model/half.h"

namespace servelab {

constexpr float kFp8E4m3Max = 448.0f;

/// fp32 -> E4M3 bits, round to nearest even, saturating to ±448 (vLLM clamps to the finite range
/// before its cast; torch's own cast would give NaN above 464). NaN stays NaN.
inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;           // NaN
  const float mag = f32_from_bits(a);
  if (mag >= kFp8E4m3Max) return sign | 0x7eu;        // saturate (inf too)
  if (mag < 0.015625f) {                              // below 2^-6: subnormal, steps of 2^-9
    const float m = std::nearbyint(mag * 512.0f);     // round to nearest even; 8 is 2^-6, the first normal
    return sign | static_cast<uint8_t>(m);
  }
  // Normal: rebias the exponent (127 -> 7), keep 3 mantissa bits, round the 20 dropped ones.
  uint32_t h = ((a >> 23) - 120u) << 3 | ((a >> 20) & 0x7u);
  const uint32_t rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  if (h > 0x7eu) h = 0x7eu;
  return sign | static_cast<uint8_t>(h);
}

/// E4M3 bits -> fp32 (exact).
inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  if (exp == 0xf && mant == 0x7) return f32_from_bits(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0.001953125f;  // mant × 2^-9
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 120u) << 23) | (mant << 20));
}

/// Round an fp32 value through E4M3 and back.
inline float round_fp8_e4m3(float f) { return fp8_e4m3_to_f32(f32_to_fp8_e4m3(f)); }

}  // namespace servelab
