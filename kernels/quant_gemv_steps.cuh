#pragma once
// The device pieces of quant_gemv's steps-shaped kernels (quant_gemv_steps.cu: steps;
// quant_gemv_pipe.cu: pipe): a step's codes in flight, their loads, the dequantization and mmas of
// a step, and a lane's rows. The layout of a step is described at the top of quant_gemv_steps.cu.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/gemv_plan.h"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"

namespace servelab::kernels::quant_gemv_steps_detail {

using quant_gemv_frag::fp8x4_to_bf16;
using quant_gemv_frag::int4_pair;
using quant_gemv_frag::mma_bf16;
using quant_gemv_frag::store_out;
constexpr int kWarps = gemv::kWarps, kThreads = gemv::kThreads, kBlockRows = gemv::kBlockRows;

template <bool kInt4>
constexpr int kVecK = kInt4 ? 32 : 16;  // K values in one 16-byte vector of codes
template <bool kInt4>
constexpr int kStepK = 8 * kVecK<kInt4>;  // K values a warp step covers: 2 vectors x 4 lanes

/// One step's codes in flight: [tile][row g / g + 8][vector], and INT4's group scale and zero.
struct StepCodes {
  uint4 w[2][2][2];
  float scale[2][2][2];
  float zero[2][2][2];
};

/// The pipe kernel's step: the same codes, but INT4's scales and zeros shared by the
/// quad: the 4 lanes of a quad need the same 8 (row, group) pairs, so lane q loads those of its
/// row r = q (tile q / 2, row g + 8 (q % 2)) for the step's two groups, and the others read them
/// by a shuffle: 4 loads and 4 registers a step in place of 16 and 16.
struct StepCodesQuad {
  uint4 w[2][2][2];
  float scale[2];
  float zero[2];
};

__device__ __forceinline__ uint4 ld_codes(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

/// Loads the codes (and INT4's group scales and zeros) of the step at kb. kCheck: vectors at or
/// past K read as zeros (K is a multiple of the vector, so a vector is wholly in or out).
template <bool kInt4, bool kCheck, typename Codes>
__device__ __forceinline__ void load_codes(Codes& r, const uint8_t* const (&rows)[2][2], const int (&row_idx)[2][2],
                                           int kb, int lane_k, const QuantGemvArgs& a) {
  constexpr bool kQuad = std::is_same_v<Codes, StepCodesQuad>;
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const int kv = kb + v * 4 * kVecK<kInt4>;
    const bool in = !kCheck || kv + lane_k < a.k;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        r.w[t][h][v] = in ? ld_codes(rows[t][h] + (kInt4 ? kv / 2 : kv)) : make_uint4(0, 0, 0, 0);
        if constexpr (kInt4 && !kQuad) {
          const int64_t gi = int64_t((kv + lane_k) / a.group_size) * a.n + row_idx[t][h];
          r.scale[t][h][v] = in ? __ldg(a.scales + gi) : 0.0f;
          r.zero[t][h][v] = in ? __ldg(a.zeros + gi) : 0.0f;
        }
      }
    if constexpr (kInt4 && kQuad) {  // this lane's row of the quad's four: tile q / 2, half q % 2
      const int q = (threadIdx.x & 3), row = q == 0 ? row_idx[0][0] : q == 1 ? row_idx[0][1] : q == 2 ? row_idx[1][0] : row_idx[1][1];
      const int64_t gi = int64_t((kv + lane_k) / a.group_size) * a.n + row;
      r.scale[v] = in ? __ldg(a.scales + gi) : 0.0f;
      r.zero[v] = in ? __ldg(a.zeros + gi) : 0.0f;
    }
  }
}

/// INT4's scale and zero of (tile t, half h, vector v): held in the step, or by lane 2t + h of
/// the quad.
template <int t, int h>
__device__ __forceinline__ void group_scale_zero(const StepCodes& r, int v, float& scale, float& zero) {
  scale = r.scale[t][h][v];
  zero = r.zero[t][h][v];
}
template <int t, int h>
__device__ __forceinline__ void group_scale_zero(const StepCodesQuad& r, int v, float& scale, float& zero) {
  const int src = (threadIdx.x & 28) | (2 * t + h);
  scale = __shfl_sync(0xffffffffu, r.scale[v], src);
  zero = __shfl_sync(0xffffffffu, r.zero[v], src);
}

/// 16 bytes of x, zeros where kCheck and the vector lies past K (its codes are zeros too, and x
/// may end there).
template <bool kCheck>
__device__ __forceinline__ uint4 ld_x(const __nv_bfloat16* p, bool in) {
  return !kCheck || in ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

/// Adds the step's products into acc[tile][4]; xr: x's row for this lane's column at this lane's
/// first K value of the step, lane_kb (= kb + lane_k). (INT4's zeros folded out of the per-weight
/// work, 128 + q into the mma and (128 + zero) · Σx off each group's sum with Σx from one more
/// mma, measured 1% faster on an H200, with 10x the rounding error: not kept.)
template <bool kInt4, bool kCheck, typename Codes>
__device__ __forceinline__ void mma_codes(float (&acc)[2][4], const Codes& r, const __nv_bfloat16* xr, int lane_kb,
                                          int k) {
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const __nv_bfloat16* xv = xr + v * 4 * kVecK<kInt4>;
    const bool in = lane_kb + v * 4 * kVecK<kInt4> < k;
    if constexpr (!kInt4) {
      const uint4 x0 = ld_x<kCheck>(xv, in), x1 = ld_x<kCheck>(xv + 8, in);
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // K values 4j .. 4j + 3: B pairs (x0, x2), (x1, x3)
        const uint32_t xa = j < 2 ? word(x0, 2 * j) : word(x1, 2 * j - 4);
        const uint32_t xb = j < 2 ? word(x0, 2 * j + 1) : word(x1, 2 * j - 3);
        const uint32_t b0 = __byte_perm(xa, xb, 0x5410), b1 = __byte_perm(xa, xb, 0x7632);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          uint32_t lo0, hi0, lo1, hi1;  // rows g and g + 8
          fp8x4_to_bf16(word(r.w[t][0][v], j), lo0, hi0);
          fp8x4_to_bf16(word(r.w[t][1][v], j), lo1, hi1);
          mma_bf16(acc[t], lo0, lo1, hi0, hi1, b0, b1);
        }
      }
    } else {
      float part[2][4] = {};  // this vector's group, scaled once below
      __nv_bfloat162 z128[2][2];
      float scale[2][2], zero[2][2];
      group_scale_zero<0, 0>(r, v, scale[0][0], zero[0][0]);
      group_scale_zero<0, 1>(r, v, scale[0][1], zero[0][1]);
      group_scale_zero<1, 0>(r, v, scale[1][0], zero[1][0]);
      group_scale_zero<1, 1>(r, v, scale[1][1], zero[1][1]);
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) z128[t][h] = __float2bfloat162_rn(128.0f + zero[t][h]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // K values 8j .. 8j + 7: B pairs (x0, x4) (x1, x5) (x2, x6) (x3, x7)
        const uint4 xw = ld_x<kCheck>(xv + 8 * j, in);
        const uint32_t p0 = __byte_perm(xw.x, xw.z, 0x5410), p1 = __byte_perm(xw.x, xw.z, 0x7632);
        const uint32_t p2 = __byte_perm(xw.y, xw.w, 0x5410), p3 = __byte_perm(xw.y, xw.w, 0x7632);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const uint32_t w0 = word(r.w[t][0][v], j), w1 = word(r.w[t][1][v], j);
          mma_bf16(part[t], int4_pair<0>(w0, z128[t][0]), int4_pair<0>(w1, z128[t][1]), int4_pair<1>(w0, z128[t][0]),
                   int4_pair<1>(w1, z128[t][1]), p0, p1);
          mma_bf16(part[t], int4_pair<2>(w0, z128[t][0]), int4_pair<2>(w1, z128[t][1]), int4_pair<3>(w0, z128[t][0]),
                   int4_pair<3>(w1, z128[t][1]), p2, p3);
        }
      }
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][i] = fmaf(scale[t][i / 2], part[t][i], acc[t][i]);
    }
  }
}

/// This lane's rows of row block rb (tile t, row g or g + 8; past N clamped to N - 1, dropped).
/// Fused SiLU·mul (a.silu_ffn > 0, w = [gate; up]): tile 0 takes gate rows 16 rb .. 16 rb + 15 and
/// tile 1 the up rows ffn + 16 rb .., so a block owns both halves of 16 outputs (as gemv.cu).
template <bool kInt4>
__device__ __forceinline__ void block_rows(const QuantGemvArgs& a, int rb, int g, int lane_k,
                                           const uint8_t* (&rows)[2][2], int (&row_idx)[2][2]) {
  const int ffn = a.silu_ffn;
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_idx[t][h] = ffn > 0 ? t * ffn + min(rb * 16 + 8 * h + g, ffn - 1)
                              : min(rb * kBlockRows + 16 * t + 8 * h + g, a.n - 1);
      rows[t][h] = a.w + int64_t(row_idx[t][h]) * (kInt4 ? a.k / 2 : a.k) + (kInt4 ? lane_k / 2 : lane_k);
    }
}

}  // namespace servelab::kernels::quant_gemv_steps_detail
