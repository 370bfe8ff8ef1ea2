// quant_gemv's tensor-core kernel (quant_gemv.h; work split: quant_gemv_plan.h): the quantized
// weights are the A operand of mma.sync.m16n8k16 (bf16), dequantized in registers, and x's rows
// the n = 8 columns of B (two column tiles for M = 9..16), so every weight load serves all M rows.
//
// Per chunk (quant_gemv_plan.h) a lane (g = lane / 4, q = lane % 4) loads one streaming 16-byte
// vector from each of its four rows (tile t, row g or g + 8): FP8 k = kb + 16q .. + 15, INT4 kb +
// 32q .. + 31. A sum over K may take K in any order as long as A and B agree, so the fragments
// take the values in the order the bit tricks below produce them, and x is staged in shared
// memory already permuted to that order:
// - FP8 E4M3 -> bf16 without conversion instructions: a 32-bit word of bytes b0..b3 gives the
//   pairs (b1, b3) as (w & 0x80008000) | ((w & 0x7f007f00) >> 4) and (b0, b2) the same from w << 8:
//   sign, exponent and mantissa moved into bf16's fields, which reads as the value · 2^-120 (E4M3
//   subnormals land on bf16 subnormals, also exact); one bf16 multiply by 2^120 makes them normal
//   (exact). The per-tensor or per-channel scale multiplies the fp32 sums at the end.
// - INT4 -> bf16 by the exponent trick: (w >> 4e) & 0x000f000f | 0x43004300 is the bf16 pair
//   (128 + nibble e, 128 + nibble e + 4), minus (128 + zero) exactly the integers q - zero. A chunk
//   is one 128-group, so its sums are multiplied by the group's scale in fp32 once per chunk.
// Hence x's shared-memory order: per chunk, 16-byte units (p, q) of 8 values, p the lane's word
// (INT4) or word pair (FP8), holding k = [0,4,1,5,2,6,3,7] (INT4) or [0,2,1,3, 4,6,5,7] (FP8) of
// its 8 consecutive k; one unit is one ld.shared.v4 per lane and column tile, and the four lanes
// of a quad read 64 contiguous bytes (rows padded by 64 bytes: no bank conflicts).
// The weights reach registers through shared memory: each thread copies its own four vectors
// (and INT4's scales and zeros) of a chunk with cp.async into its slots of a ring of kStages
// chunks and reads them back itself, so the ring needs no barrier, only cp.async.wait_group; the
// registers no longer bound the bytes in flight (kStages - 1 chunks a thread: 7 x 64 bytes of
// FP8, 5 of INT4; one block of 8 warps a multiprocessor). The first kStages - 1 chunks are
// issued before the PDL wait, so the weight stream starts while the kernel that writes x drains.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_plan.h"

namespace servelab::kernels {
namespace quant_gemv_mma_detail {  // named: the kernels library may be compiled as unity batches

namespace qp = quant_gemv_plan;
constexpr int kTiles = 2;      // 16-row mma tiles per warp
constexpr int kPadElems = 32;  // 64 bytes of padding per staged row of x
/// Chunks in the cp.async ring: the shared memory left beside the largest x slice (16 rows x 2080
/// x 2 B) with one block a multiprocessor.
template <bool kInt4>
constexpr int kStages = kInt4 ? 6 : 8;
constexpr int kVectors = kTiles * 2;  // 16-byte vectors a thread copies per chunk
/// Ring bytes per chunk: vectors [kVectors][kThreads] x 16 B, then INT4's scale and zero per
/// vector [2 * kVectors][kThreads] x 4 B (thread-major rows: a warp's accesses are contiguous).
template <bool kInt4>
constexpr int kStageBytes = qp::kThreads * (kVectors * 16 + (kInt4 ? 2 * kVectors * 4 : 0));
template <bool kInt4>
constexpr int kRingBytes = kStages<kInt4> * kStageBytes<kInt4>;

struct Params {
  QuantGemvArgs a;
  qp::Plan plan;
  int slice_stride;  // elements between staged rows of x
};

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

/// INT4 nibbles e and e + 4 of w minus zero, as a bf16 pair (exact integers).
template <int e>
__device__ __forceinline__ uint32_t int4_pair(uint32_t w, __nv_bfloat162 zero128) {
  const uint32_t v = ((w >> (4 * e)) & 0x000F000Fu) | 0x43004300u;
  return bf16x2_bits(__hsub2(as_bf16x2(v), zero128));
}

/// One chunk's operands in flight: a vector per (tile, row half), and INT4's group scale / zero.
struct ChunkRegs {
  uint4 w[kTiles][2];
  float scale[kTiles][2];
  float zero[kTiles][2];
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Streams 16 bytes into shared memory (zeros when !in; the L2 fetches the 256-byte block, the
/// row's next chunks included).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool in) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(in ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

/// Issues chunk c of this thread's rows (row pointers at the lane's first byte of each row) into
/// ring stage `stage`.
template <bool kInt4>
__device__ __forceinline__ void issue_chunk(unsigned char* ring, int stage, const uint8_t* const (&rows)[kTiles][2],
                                            const int (&row_idx)[kTiles][2], int c, int lane_k,
                                            const QuantGemvArgs& a) {
  constexpr int ck = qp::chunk_k(kInt4);
  const int kb = c * ck, tid = threadIdx.x;
  const bool in = kb + lane_k < a.k;  // FP8's last chunk may be partial (K is a multiple of 16)
  unsigned char* base = ring + stage * kStageBytes<kInt4>;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = 2 * t + h;
      const uint8_t* src = rows[t][h] + (in ? (kInt4 ? kb / 2 : kb) : 0);
      cp_async16(smem_addr(base + (v * qp::kThreads + tid) * 16), src, in);
      if constexpr (kInt4) {
        const int64_t gi = int64_t(kb / a.group_size) * a.n + row_idx[t][h];
        float* sz = reinterpret_cast<float*>(base + kVectors * qp::kThreads * 16);
        cp_async4(smem_addr(sz + (2 * v) * qp::kThreads + tid), a.scales + gi);
        cp_async4(smem_addr(sz + (2 * v + 1) * qp::kThreads + tid), a.zeros + gi);
      }
    }
}

/// Reads back what this thread copied into ring stage `stage`.
template <bool kInt4>
__device__ __forceinline__ void read_chunk(ChunkRegs& r, const unsigned char* ring, int stage) {
  const int tid = threadIdx.x;
  const unsigned char* base = ring + stage * kStageBytes<kInt4>;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = 2 * t + h;
      r.w[t][h] = *reinterpret_cast<const uint4*>(base + (v * qp::kThreads + tid) * 16);
      if constexpr (kInt4) {
        const float* sz = reinterpret_cast<const float*>(base + kVectors * qp::kThreads * 16);
        r.scale[t][h] = sz[(2 * v) * qp::kThreads + tid];
        r.zero[t][h] = sz[(2 * v + 1) * qp::kThreads + tid];
      }
    }
}

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
template <bool kInt4>
__device__ __forceinline__ void stage_x(__nv_bfloat16* xs, const QuantGemvArgs& a, int c0, int c1, int stride) {
  constexpr int ck = qp::chunk_k(kInt4), units_per_chunk = ck / 8;
  const int per_row = (c1 - c0) * units_per_chunk, total = a.m * per_row;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
#pragma unroll 8
  for (int u = threadIdx.x; u < total; u += qp::kThreads) {  // unrolled: several loads of x in flight
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

template <bool kInt4, int kColTiles, typename OutT>
__global__ void __launch_bounds__(qp::kThreads, qp::kBlocksPerSm) quant_gemv_mma_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int last_block;
  unsigned char* ring = smem_raw;
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_raw + kRingBytes<kInt4>);
  constexpr int kS = kStages<kInt4>;
  const QuantGemvArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y;
  const int c0 = p.plan.chunk_begin(split), c1 = p.plan.chunk_begin(split + 1);
  const int lane_k = (kInt4 ? 32 : 16) * q;
  const int row0 = rb * qp::kBlockRows + warp * 32;
  const uint8_t* rows[kTiles][2];
  int row_idx[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_idx[t][h] = min(row0 + 16 * t + 8 * h + g, a.n - 1);  // rows past N: results dropped
      rows[t][h] = a.w + int64_t(row_idx[t][h]) * (kInt4 ? a.k / 2 : a.k) + (kInt4 ? lane_k / 2 : lane_k);
    }

  float row_scale[kTiles][2];  // FP8: the channel's (or tensor's) scale, fetched with the weights
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) row_scale[t][h] = kInt4 ? 0.0f : __ldg(a.scales + (a.n_scales == 1 ? 0 : row_idx[t][h]));
#pragma unroll
  for (int u = 0; u < kS - 1; ++u) {  // weights before x exists (PDL); one group per chunk, even empty
    if (c0 + u < c1) issue_chunk<kInt4>(ring, u, rows, row_idx, c0 + u, lane_k, a);
    cp_async_commit();
  }
  pdl_wait();
  pdl_launch_dependents();
  stage_x<kInt4>(xs, a, c0, c1, p.slice_stride);
  __syncthreads();

  float acc[kTiles][2][4] = {};
  constexpr int ck = qp::chunk_k(kInt4);
  const __nv_bfloat16* xs_lane = xs + int64_t(min(g, a.m - 1)) * p.slice_stride;  // columns >= M dropped
  const int xs_tile1 = (min(8 + g, a.m - 1) - min(g, a.m - 1)) * p.slice_stride;
  int stage = 0;
  for (int c = c0; c < c1; ++c) {
    cp_async_wait<kS - 2>();  // chunk c's group (this thread's own copies) has landed
    ChunkRegs r;
    read_chunk<kInt4>(r, ring, stage);
    const int next = stage == 0 ? kS - 1 : stage - 1;  // the stage read last iteration
    if (c + kS - 1 < c1) issue_chunk<kInt4>(ring, next, rows, row_idx, c + kS - 1, lane_k, a);
    cp_async_commit();
    mma_chunk<kInt4, kColTiles>(acc, r, xs_lane + (c - c0) * ck, xs_tile1, q);
    stage = stage == kS - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();

  if constexpr (!kInt4) {  // the channel's (or tensor's) scale
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float s = row_scale[t][h];
#pragma unroll
        for (int nt = 0; nt < kColTiles; ++nt) {
          acc[t][nt][2 * h] *= s;
          acc[t][nt][2 * h + 1] *= s;
        }
      }
  }

  // acc[t][nt][i]: row row0 + 16t + g + 8(i / 2), column (row of x) 8nt + 2q + i % 2.
  const int splits = p.plan.splits;
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
  float* part = a.partials + (int64_t(rb) * splits + split) * qp::kMaxRows * qp::kBlockRows;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int nt = 0; nt < kColTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int local = warp * 32 + 16 * t + g + 8 * (i / 2), m = 8 * nt + 2 * q + i % 2;
        if (m < a.m) part[m * qp::kBlockRows + local] = acc[t][nt][i];
      }
  __threadfence();  // this block's partials visible device-wide before it is counted
  __syncthreads();
  if (tid == 0) last_block = atomicAdd(&a.counters[rb], 1) == splits - 1;
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  const float* all = a.partials + int64_t(rb) * splits * qp::kMaxRows * qp::kBlockRows;
  const int n = rb * qp::kBlockRows + tid;  // thread = row of the block
  for (int m = 0; m < a.m; ++m) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += __ldcg(all + (int64_t(s) * qp::kMaxRows + m) * qp::kBlockRows + tid);
    if (n < a.n) store_out<OutT>(a.y, int64_t(m) * a.n + n, sum, a.accumulate);
  }
  if (tid == 0) a.counters[rb] = 0;  // ready for the next launch (stream order)
}

template <bool kInt4, int kColTiles, typename OutT>
void launch_one(const Params& p, size_t smem, cudaStream_t stream) {
  auto* kernel = quant_gemv_mma_kernel<kInt4, kColTiles, OutT>;
  static const bool configured = [&] {  // once per instantiation: the ring and the largest x slice
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kRingBytes<kInt4> + qp::kMaxRows * (qp::kMaxSliceK + kPadElems) * 2));
    return true;
  }();
  (void)configured;
  launch_pdl(kernel, dim3(p.plan.row_blocks, p.plan.splits), dim3(qp::kThreads), smem, stream, p);
}

template <bool kInt4>
void launch_format(const Params& p, size_t smem, cudaStream_t stream) {
  const bool two = p.a.m > 8;
  if (p.a.out_bf16) two ? launch_one<kInt4, 2, __nv_bfloat16>(p, smem, stream)
                        : launch_one<kInt4, 1, __nv_bfloat16>(p, smem, stream);
  else two ? launch_one<kInt4, 2, float>(p, smem, stream) : launch_one<kInt4, 1, float>(p, smem, stream);
}

}  // namespace quant_gemv_mma_detail

/// Shared memory of the tensor-core kernel for a and its plan (quant_gemv.cu decides to use it).
size_t quant_gemv_mma_smem(const QuantGemvArgs& a, const quant_gemv_plan::Plan& plan) {
  const bool int4 = a.kind == QuantWeightKind::int4;
  using namespace quant_gemv_mma_detail;
  const int stride = quant_gemv_plan::max_slice_k(int4, plan) + kPadElems;
  return size_t(int4 ? kRingBytes<true> : kRingBytes<false>) + size_t(a.m) * stride * 2;
}

void quant_gemv_mma(const QuantGemvArgs& a, const quant_gemv_plan::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_mma_detail;
  const bool int4 = a.kind == QuantWeightKind::int4;
  Params p{a, plan, quant_gemv_plan::max_slice_k(int4, plan) + kPadElems};
  const size_t smem = quant_gemv_mma_smem(a, plan);
  int4 ? launch_format<true>(p, smem, stream) : launch_format<false>(p, smem, stream);
}

}  // namespace servelab::kernels
