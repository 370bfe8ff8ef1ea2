#pragma once
// exp2 on the FMA pipe (FlashAttention-4's trick, used by the prefill kernels' fa7 variants for a
// fixed share of each row's exponentials): a Cody-Waite split 2^x = 2^floor(x) · 2^frac(x), 2^frac
// by a degree-3 minimax polynomial in Horner FFMAs, the integer part added into the exponent bits.
// This header holds the coefficients (the CUDA code reads them from here) and the plain C++
// reference, which computes the device's bits: the same float operations in the same order.
#include <cstdint>

namespace servelab::kernels::exp2_poly {

/// 2^f ≈ c0 + f·(c1 + f·(c2 + f·c3)) on f in [0, 1): FlashAttention-4's degree-3 minimax fit
/// (flash_attn/cute, poly_ex2_deg3), c0 exactly 1 so 2^0 is exactly 1 (a row's maximum gives
/// P = 1, as the MUFU's ex2 does). Max relative error 8.8e-5 (2^-13.5) on [0, 1), measured by
/// tests/kernels/exp2_poly_test.cpp: far below bf16's 2^-8 and f16's 2^-11 that P is rounded to.
constexpr float kC0 = 1.0f;
constexpr float kC1 = 0.695146143436431884765625f;
constexpr float kC2 = 0.227564394474029541015625f;
constexpr float kC3 = 0.077119089663028717041015625f;
/// Inputs are clamped to >= kMin first: -inf (a masked score) gives f = 0, p = 1 and exponent
/// bits 127 - 127 = 0, i.e. exactly +0, as ex2.approx.ftz(-inf) does.
constexpr float kMin = -127.0f;
/// 1.5 · 2^23: x + kRound rounded toward -inf holds floor(x) in its low mantissa bits, and
/// (bits << 23) is floor(x) << 23 modulo 2^32 (kRound's own bits shift out).
constexpr float kRound = 12582912.0f;

/// The device's exp2 (fa7's ex2_poly in kernels/attention_prefill_wgmma.cuh), bit for bit, for
/// x <= 1 (the kernel's x = s · scale_log2 − max · scale_log2 is <= 0 up to one rounding):
/// relative error below 8.8e-5 where 2^x >= 2^-126; below that (x < -126) a value under 2^-126
/// (what ex2.approx.ftz flushes to 0); exactly 0 for x = -inf, exactly 1 for x = 0. NaN gives 0.
float exp2_poly3(float x);

/// Max relative error |p(f) / 2^f − 1| over n evenly spaced f in [0, 1) (f = i / n), with p in
/// float as the device computes it, against std::exp2 in double.
double max_rel_error_frac(int n);

}  // namespace servelab::kernels::exp2_poly
