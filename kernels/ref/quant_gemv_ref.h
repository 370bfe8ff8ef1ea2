#pragma once
// Plain C++ reference of quant_gemv (kernels/quant_gemv.h): the same layouts, double loops.
#include <cstdint>
#include <vector>

namespace servelab::kernels {

/// E4M3 bits -> float (exact; NaN for S.1111.111).
float fp8_e4m3_value(uint8_t bits);

/// y[m, n] (+)= Σ_k x[m, k] · w(n, k), x given as float (the tests round it through bf16 first);
/// w(n, k) = fp8(codes[n·k_dim + k]) · scales[n_scales == 1 ? 0 : n] for fp8, or
/// (nibble(n, k) − zeros[g, n]) · scales[g, n], g = k / group_size, for int4 (packed two a byte,
/// low nibble first). Accumulates in double.
void quant_gemv_ref(bool int4, const float* x, int64_t x_stride, const uint8_t* w, const float* scales,
                    const float* zeros, int n_scales, int group_size, float* y, int m, int n, int k, bool accumulate);

/// Packs int4 codes [n, k] (one 0..15 value a byte) two a byte, low nibble = even k: [n, k / 2].
std::vector<uint8_t> pack_int4_rows(const std::vector<uint8_t>& codes, int n, int k);

}  // namespace servelab::kernels
