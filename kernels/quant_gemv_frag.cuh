#pragma once
// Device pieces the two tensor-core quant_gemv kernels share (quant_gemv_mma.cu: cp.async ring,
// one block a multiprocessor; quant_gemv_stream.cu: register pipeline, many blocks): the mma, the
// bit-trick dequantization of FP8 and INT4 into bf16 A fragments, one chunk's products, x's
// staging in shared memory in the permuted K order the fragments use, each warp's rows and the
// epilogue (scales, split-K reduction, stores). The layout of a chunk and
// the permutation are described at the top of quant_gemv_mma.cu.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_plan.h"

namespace servelab::kernels::quant_gemv_frag {

namespace qp = quant_gemv_plan;
constexpr int kTiles = 2;  // 16-row mma tiles per warp

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t u) { return *reinterpret_cast<__nv_bfloat162*>(&u); }

/// E4M3 bytes (b0..b3) of w -> bf16 pairs lo = (b0, b2), hi = (b1, b3), exact values.
__device__ __forceinline__ void fp8x4_to_bf16(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const __nv_bfloat162 bias = as_bf16x2(0x7B807B80u);  // 2^120 in both halves
  const uint32_t w8 = w << 8;
  const uint32_t h = (w & 0x80008000u) | ((w & 0x7F007F00u) >> 4);
  const uint32_t l = (w8 & 0x80008000u) | ((w8 & 0x7F007F00u) >> 4);
  lo = bf16x2_bits(__hmul2(as_bf16x2(l), bias));
  hi = bf16x2_bits(__hmul2(as_bf16x2(h), bias));
}

/// INT4 nibbles e and e + 4 of w as the bf16 pair 128 + q (the 0x4300 exponent). The mask and the
/// exponent in one lop3 ((a & b) | c, table 0xEA): written as C, the compiler emitted two LOP3s a
/// pair (ncu's SASS, results/gpu/quant/h200-2026-11-29-e7a1d8e-ncu/).
template <int e>
__device__ __forceinline__ __nv_bfloat162 int4_pair_128(uint32_t w) {
  uint32_t v;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(w >> (4 * e)), "r"(0x000F000Fu), "r"(0x43004300u));
  return as_bf16x2(v);
}

/// INT4 nibbles e and e + 4 of w minus zero, as a bf16 pair (exact integers): 128 + q less 128 + zero.
template <int e>
__device__ __forceinline__ uint32_t int4_pair(uint32_t w, __nv_bfloat162 zero128) {
  return bf16x2_bits(__hsub2(int4_pair_128<e>(w), zero128));
}

/// One chunk's operands in flight: a vector per (tile, row half), and INT4's group scale / zero.
struct ChunkRegs {
  uint4 w[kTiles][2];
  float scale[kTiles][2];
  float zero[kTiles][2];
};

/// Adds chunk r's products into acc[tile][column tile][4]; xs_chunk: the chunk's staged x for
/// column tile 0 at this lane's row (column tile 1 is 8 staged rows further, xs_tile1 elements).
template <bool kInt4, int kColTiles>
__device__ __forceinline__ void mma_chunk(float (&acc)[kTiles][2][4], const ChunkRegs& r,
                                          const __nv_bfloat16* xs_chunk, int xs_tile1, int q) {
  if constexpr (!kInt4) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {  // word pair p: words 2p, 2p + 1 of each vector
      uint4 xb[kColTiles];
#pragma unroll
      for (int nt = 0; nt < kColTiles; ++nt)
        xb[nt] = *reinterpret_cast<const uint4*>(xs_chunk + nt * xs_tile1 + (p * 4 + q) * 8);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int word = 2 * p + j;
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          uint32_t lo0, hi0, lo1, hi1;  // rows g and g + 8
          fp8x4_to_bf16(word == 0 ? r.w[t][0].x : word == 1 ? r.w[t][0].y : word == 2 ? r.w[t][0].z : r.w[t][0].w,
                        lo0, hi0);
          fp8x4_to_bf16(word == 0 ? r.w[t][1].x : word == 1 ? r.w[t][1].y : word == 2 ? r.w[t][1].z : r.w[t][1].w,
                        lo1, hi1);
#pragma unroll
          for (int nt = 0; nt < kColTiles; ++nt)
            mma_bf16(acc[t][nt], lo0, lo1, hi0, hi1, j == 0 ? xb[nt].x : xb[nt].z, j == 0 ? xb[nt].y : xb[nt].w);
        }
      }
    }
  } else {
    float part[kTiles][2][4];  // this chunk (one group): scaled once below
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) part[t][nt][i] = 0.0f;
    __nv_bfloat162 z128[kTiles][2];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) z128[t][h] = __float2bfloat162_rn(128.0f + r.zero[t][h]);
#pragma unroll
    for (int word = 0; word < 4; ++word) {
      uint4 xb[kColTiles];
#pragma unroll
      for (int nt = 0; nt < kColTiles; ++nt)
        xb[nt] = *reinterpret_cast<const uint4*>(xs_chunk + nt * xs_tile1 + (word * 4 + q) * 8);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint32_t w0 = word == 0 ? r.w[t][0].x : word == 1 ? r.w[t][0].y : word == 2 ? r.w[t][0].z : r.w[t][0].w;
        const uint32_t w1 = word == 0 ? r.w[t][1].x : word == 1 ? r.w[t][1].y : word == 2 ? r.w[t][1].z : r.w[t][1].w;
        const uint32_t a00 = int4_pair<0>(w0, z128[t][0]), a01 = int4_pair<1>(w0, z128[t][0]);
        const uint32_t a02 = int4_pair<2>(w0, z128[t][0]), a03 = int4_pair<3>(w0, z128[t][0]);
        const uint32_t a10 = int4_pair<0>(w1, z128[t][1]), a11 = int4_pair<1>(w1, z128[t][1]);
        const uint32_t a12 = int4_pair<2>(w1, z128[t][1]), a13 = int4_pair<3>(w1, z128[t][1]);
#pragma unroll
        for (int nt = 0; nt < kColTiles; ++nt) {
          mma_bf16(part[t][nt], a00, a10, a01, a11, xb[nt].x, xb[nt].y);
          mma_bf16(part[t][nt], a02, a12, a03, a13, xb[nt].z, xb[nt].w);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < kColTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[t][nt][i] = fmaf(r.scale[t][i / 2], part[t][nt][i], acc[t][nt][i]);
  }
}

/// Stages x[:, chunks [c0, c1)] into xs in the permuted order above (zeros past K).
template <bool kInt4, int kBlockThreads>
__device__ __forceinline__ void stage_x(__nv_bfloat16* xs, const QuantGemvArgs& a, int c0, int c1, int stride) {
  constexpr int ck = qp::chunk_k(kInt4), units_per_chunk = ck / 8;
  const int per_row = (c1 - c0) * units_per_chunk, total = a.m * per_row;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
#pragma unroll 8
  for (int u = threadIdx.x; u < total; u += kBlockThreads) {  // unrolled: several loads of x in flight
    const int m = u / per_row, rest = u % per_row, c = c0 + rest / units_per_chunk, unit = rest % units_per_chunk;
    const int p = unit / 4, q = unit % 4;  // INT4: k = kb + 32q + 8p; FP8: kb + 16q + 8p
    const int k = c * ck + (kInt4 ? 32 : 16) * q + 8 * p;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (k < a.k) v = __ldg(reinterpret_cast<const uint4*>(x + int64_t(m) * a.x_stride + k));
    uint4 o;
    if constexpr (kInt4) {  // (x0,x4) (x1,x5) (x2,x6) (x3,x7)
      o.x = __byte_perm(v.x, v.z, 0x5410);
      o.y = __byte_perm(v.x, v.z, 0x7632);
      o.z = __byte_perm(v.y, v.w, 0x5410);
      o.w = __byte_perm(v.y, v.w, 0x7632);
    } else {  // (x0,x2) (x1,x3) (x4,x6) (x5,x7)
      o.x = __byte_perm(v.x, v.y, 0x5410);
      o.y = __byte_perm(v.x, v.y, 0x7632);
      o.z = __byte_perm(v.z, v.w, 0x5410);
      o.w = __byte_perm(v.z, v.w, 0x7632);
    }
    *reinterpret_cast<uint4*>(xs + int64_t(m) * stride + (rest / units_per_chunk) * ck + unit * 8) = o;
  }
}

template <typename OutT>
__device__ __forceinline__ void store_out(void* y, int64_t i, float v, bool accumulate) {
  OutT* p = static_cast<OutT*>(y) + i;
  if constexpr (std::is_same_v<OutT, float>) {
    *p = accumulate ? *p + v : v;
  } else {
    *p = __float2bfloat16_rn(accumulate ? __bfloat162float(*p) + v : v);
  }
}


/// A warp's weight rows: tile t, half h is row row0 + 16t + 8h + g (clamped to N - 1: the results
/// of rows past N are dropped), rows[t][h] that row's bytes from this lane's first K column, and
/// row_scale[t][h] its FP8 scale (the channel's, or the tensor's; unused for INT4).
template <bool kInt4>
__device__ __forceinline__ void warp_rows(const QuantGemvArgs& a, int row0, int g, int lane_k,
                                          const uint8_t* (&rows)[kTiles][2], int (&row_idx)[kTiles][2]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_idx[t][h] = min(row0 + 16 * t + 8 * h + g, a.n - 1);
      rows[t][h] = a.w + int64_t(row_idx[t][h]) * (kInt4 ? a.k / 2 : a.k) + (kInt4 ? lane_k / 2 : lane_k);
    }
}

template <bool kInt4>
__device__ __forceinline__ void warp_row_scales(const QuantGemvArgs& a, const int (&row_idx)[kTiles][2],
                                                float (&row_scale)[kTiles][2]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) row_scale[t][h] = kInt4 ? 0.0f : __ldg(a.scales + (a.n_scales == 1 ? 0 : row_idx[t][h]));
}

/// The kernels' epilogue. acc[t][nt][i] holds row row0 + 16t + g + 8(i / 2), column (row of x)
/// 8nt + 2q + i % 2, FP8 rows scaled here by their channel's scale. Unsplit K: written to y.
/// Split K: written to this block's partials; the last of the row block's splits to arrive (its
/// counter) sums them in split order, so the bits do not depend on which split lands last, writes
/// y and resets the counter for the next launch. last_block is the block's shared flag.
template <bool kInt4, int kColTiles, int kMaxRows, int kBlockRows, typename OutT>
__device__ __forceinline__ void finish_tiles(float (&acc)[kTiles][2][4], const float (&row_scale)[kTiles][2],
                                             const QuantGemvArgs& a, int splits, int rb, int split, int row0,
                                             int warp, int g, int q, int& last_block) {
  if constexpr (!kInt4) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < kColTiles; ++nt) {
          acc[t][nt][2 * h] *= row_scale[t][h];
          acc[t][nt][2 * h + 1] *= row_scale[t][h];
        }
  }
  if (splits == 1) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int nt = 0; nt < kColTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = row0 + 16 * t + g + 8 * (i / 2), m = 8 * nt + 2 * q + i % 2;
          if (n < a.n && m < a.m) store_out<OutT>(a.y, int64_t(m) * a.n + n, acc[t][nt][i], a.accumulate);
        }
    return;
  }
  const int tid = threadIdx.x;
  float* part = a.partials + (int64_t(rb) * splits + split) * kMaxRows * kBlockRows;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int nt = 0; nt < kColTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int local = warp * 32 + 16 * t + g + 8 * (i / 2), m = 8 * nt + 2 * q + i % 2;
        if (m < a.m) part[m * kBlockRows + local] = acc[t][nt][i];
      }
  __threadfence();  // this block's partials visible device-wide before it is counted
  __syncthreads();
  if (tid == 0) last_block = atomicAdd(&a.counters[rb], 1) == splits - 1;
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  const float* all = a.partials + int64_t(rb) * splits * kMaxRows * kBlockRows;
  const int n = rb * kBlockRows + tid;  // thread = row of the block
  for (int m = 0; m < a.m; ++m) {
    float sum = 0.0f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) sum += __ldcg(all + (int64_t(s) * kMaxRows + m) * kBlockRows + tid);
    if (n < a.n) store_out<OutT>(a.y, int64_t(m) * a.n + n, sum, a.accumulate);
  }
  if (tid == 0) a.counters[rb] = 0;  // ready for the next launch (stream order)
}

}  // namespace servelab::kernels::quant_gemv_frag
