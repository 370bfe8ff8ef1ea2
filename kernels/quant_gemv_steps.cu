// quant_gemv's steps kernel (quant_gemv.h): the bf16 gemv's shape (gemv.cu, gemv_plan.h) over
// FP8 and INT4 codes, for M = 1-16 (one 8-row column tile of x, or two: each dequantized fragment
// then feeds two mmas). A block of 8 warps owns 32 rows of w (two 16-row mma tiles a
// warp) and its warps take the K steps of the block's slice in turn, so at any moment the block
// streams one contiguous run of each of its rows (the bf16 gemv reaches 0.94 of the copy this
// way across llama2-7b's decode products; the stream kernel, where a warp walks its own rows
// alone, 0.48-0.69 on FP8). Per step a lane issues kVecs x 4 streaming 16-byte loads of codes
// (ld.global.nc.L1::no_allocate.L2::256B; kVecs 2, or INT4's 1 on products of many row blocks),
// kInFlight steps before their use, the first ones before the PDL wait; x is read straight from
// global memory (cached: every warp of the grid reads the same
// few KB) and permuted in registers into the order the dequantized fragments come in, so there is
// no shared-memory staging and no barrier before the stream starts.
// Step layout: lane (g, q) loads, in a step at kb, vector v (< kVecs) of rows g and g + 8 of each
// tile at K = kb + v * 4 * kVecK + q * kVecK (kVecK = 16 FP8 or 32 INT4 values in 16 bytes), so a
// quad reads 64 contiguous bytes of a row per vector. Word j of a vector feeds mmas over K values
// 4j..4j+3 (FP8: fp8x4_to_bf16's pairs (0, 2) and (1, 3) as fragment slots (2q, 2q+1) and
// (2q+8, 2q+9)) or 8j..8j+7 (INT4: nibble pairs (e, e + 4), two mmas); x's 16-byte vectors are
// byte-permuted into the same pairs. INT4's quad vector is 128 values: one group (groups are a
// power of two from 128: the group index is a shift, its scales and zeros at one 32-bit index),
// whose scale multiplies that vector's fp32 partial sums; FP8's per-channel or
// per-tensor scale multiplies the row's total. Sums in a fixed order (gemv_reduce.cuh): a row's
// bits do not depend on M. With QuantGemvArgs::silu_ffn the block owns 16 gate and 16 up rows and
// writes silu(gate) · up (the cuda backend's quantized gate|up at decode, as gemv.cu fuses bf16's).
#include <cuda_bf16.h>

#include <cstdlib>
#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv_plan.h"
#include "kernels/gemv_reduce.cuh"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/quant_gemv_rows.cuh"

namespace servelab::kernels {
namespace quant_gemv_steps_detail {  // named: the kernels library may be compiled as unity batches

using quant_gemv_frag::fp8x4_to_bf16;
using quant_gemv_frag::int4_pair;
using quant_gemv_frag::mma_bf16;
using quant_gemv_frag::store_out;
constexpr int kWarps = gemv::kWarps, kThreads = gemv::kThreads, kBlockRows = gemv::kBlockRows;

template <bool kInt4>
constexpr int kVecK = kInt4 ? 32 : 16;  // K values in one 16-byte vector of codes
template <bool kInt4, int kVecs = 2>
constexpr int kStepK = kVecs * 4 * kVecK<kInt4>;  // K values a warp step covers: kVecs vectors x 4 lanes

/// One step's codes in flight: [tile][row g / g + 8][vector], and INT4's group scale and zero.
struct StepCodes {
  uint4 w[2][2][2];
  float scale[2][2][2];
  float zero[2][2][2];
};

__device__ __forceinline__ uint4 ld_codes(const uint8_t* p) { return load_stream_256(p); }

__device__ __forceinline__ uint32_t word(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

/// Loads the codes (and INT4's group scales and zeros) of the step at kb. kCheck: vectors at or
/// past K read as zeros (K is a multiple of the vector, so a vector is wholly in or out). INT4's
/// group is kv >> log2(group_size) (a lane's 32 values never cross a group: groups are a power of
/// two times 128), its scales and zeros at one 32-bit index a row: group · N + row.
template <bool kInt4, bool kCheck, int kVecs>
__device__ __forceinline__ void load_codes(StepCodes& r, const uint8_t* const (&rows)[2][2], const int (&row_idx)[2][2],
                                           int kb, int lane_k, const QuantGemvArgs& a, int group_bits) {
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int kv = kb + v * 4 * kVecK<kInt4>;
    const bool in = !kCheck || kv + lane_k < a.k;
    const uint32_t group_row = kInt4 ? uint32_t(kv >> group_bits) * uint32_t(a.n) : 0u;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        r.w[t][h][v] = in ? ld_codes(rows[t][h] + (kInt4 ? kv / 2 : kv)) : make_uint4(0, 0, 0, 0);
        if constexpr (kInt4) {
          const uint32_t gi = group_row + uint32_t(row_idx[t][h]);
          r.scale[t][h][v] = in ? __ldg(a.scales + gi) : 0.0f;
          r.zero[t][h][v] = in ? __ldg(a.zeros + gi) : 0.0f;
        }
      }
  }
}

/// 16 bytes of x, zeros where kCheck and the vector lies past K (its codes are zeros too, and x
/// may end there).
template <bool kCheck>
__device__ __forceinline__ uint4 ld_x(const __nv_bfloat16* p, bool in) {
  return !kCheck || in ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

/// Adds the step's products into acc[column tile][tile][4]; xr[c]: x's row for this lane's column
/// of column tile c (rows g and g + 8 of x) at this lane's first K value of the step, lane_kb (=
/// kb + lane_k). Each dequantized A fragment feeds kCols mmas. (INT4's zeros folded out of the
/// per-weight work, 128 + q into the mma and (128 + zero) · Σx off each group's sum with Σx from
/// one more mma, measured 1% faster on an H200, with 10x the rounding error: not kept.)
template <bool kInt4, bool kCheck, int kCols, int kVecs>
__device__ __forceinline__ void mma_codes(float (&acc)[kCols][2][4], const StepCodes& r,
                                          const __nv_bfloat16* const (&xr)[kCols], int lane_kb, int k) {
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const bool in = lane_kb + v * 4 * kVecK<kInt4> < k;
    if constexpr (!kInt4) {
      uint4 x0[kCols], x1[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        x0[c] = ld_x<kCheck>(xr[c] + v * 4 * kVecK<kInt4>, in);
        x1[c] = ld_x<kCheck>(xr[c] + v * 4 * kVecK<kInt4> + 8, in);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // K values 4j .. 4j + 3: B pairs (x0, x2), (x1, x3)
        uint32_t b0[kCols], b1[kCols];
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          const uint32_t xa = j < 2 ? word(x0[c], 2 * j) : word(x1[c], 2 * j - 4);
          const uint32_t xb = j < 2 ? word(x0[c], 2 * j + 1) : word(x1[c], 2 * j - 3);
          b0[c] = __byte_perm(xa, xb, 0x5410);
          b1[c] = __byte_perm(xa, xb, 0x7632);
        }
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          uint32_t lo0, hi0, lo1, hi1;  // rows g and g + 8
          fp8x4_to_bf16(word(r.w[t][0][v], j), lo0, hi0);
          fp8x4_to_bf16(word(r.w[t][1][v], j), lo1, hi1);
#pragma unroll
          for (int c = 0; c < kCols; ++c) mma_bf16(acc[c][t], lo0, lo1, hi0, hi1, b0[c], b1[c]);
        }
      }
    } else {
      float part[kCols][2][4] = {};  // this vector's group, scaled once below
      __nv_bfloat162 z128[2][2];
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) z128[t][h] = __float2bfloat162_rn(128.0f + r.zero[t][h][v]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // K values 8j .. 8j + 7: B pairs (x0, x4) (x1, x5) (x2, x6) (x3, x7)
        uint32_t p[kCols][4];
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          const uint4 xw = ld_x<kCheck>(xr[c] + v * 4 * kVecK<kInt4> + 8 * j, in);
          p[c][0] = __byte_perm(xw.x, xw.z, 0x5410);
          p[c][1] = __byte_perm(xw.x, xw.z, 0x7632);
          p[c][2] = __byte_perm(xw.y, xw.w, 0x5410);
          p[c][3] = __byte_perm(xw.y, xw.w, 0x7632);
        }
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const uint32_t w0 = word(r.w[t][0][v], j), w1 = word(r.w[t][1][v], j);
          const uint32_t a00 = int4_pair<0>(w0, z128[t][0]), a10 = int4_pair<0>(w1, z128[t][1]);
          const uint32_t a01 = int4_pair<1>(w0, z128[t][0]), a11 = int4_pair<1>(w1, z128[t][1]);
          const uint32_t a02 = int4_pair<2>(w0, z128[t][0]), a12 = int4_pair<2>(w1, z128[t][1]);
          const uint32_t a03 = int4_pair<3>(w0, z128[t][0]), a13 = int4_pair<3>(w1, z128[t][1]);
#pragma unroll
          for (int c = 0; c < kCols; ++c) {
            mma_bf16(part[c][t], a00, a10, a01, a11, p[c][0], p[c][1]);
            mma_bf16(part[c][t], a02, a12, a03, a13, p[c][2], p[c][3]);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kCols; ++c)
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[c][t][i] = fmaf(r.scale[t][i / 2][v], part[c][t][i], acc[c][t][i]);
    }
  }
}

/// This lane's rows of row block rb (tile t, row g or g + 8; past N clamped to N - 1, dropped).
/// Fused SiLU·mul (a.silu_ffn > 0, w = [gate; up]): tile 0 takes gate rows 16 rb .. 16 rb + 15 and
/// tile 1 the up rows ffn + 16 rb .., so a block owns both halves of 16 outputs (as gemv.cu);
/// with a.rope (q|k|v) the pairs' layout of gemv_rope_kv.cuh.
template <bool kInt4>
__device__ __forceinline__ void block_rows(const QuantGemvArgs& a, int rb, int g, int lane_k,
                                           const uint8_t* (&rows)[2][2], int (&row_idx)[2][2]) {
  const int ffn = a.silu_ffn;
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_idx[t][h] = ffn > 0               ? t * ffn + min(rb * 16 + 8 * h + g, ffn - 1)
                      : a.rope.head_dim > 0 ? min(gemv::rope_kv_row(a.rope, rb, t, 8 * h + g), a.n - 1)
                                            : min(rb * kBlockRows + 16 * t + 8 * h + g, a.n - 1);
      rows[t][h] = a.w + int64_t(row_idx[t][h]) * (kInt4 ? a.k / 2 : a.k) + (kInt4 ? lane_k / 2 : lane_k);
    }
}

/// kInFlight: steps a warp loads before computing them. FP8 2 (two blocks an SM at 125 registers;
/// 1 and three blocks an SM was 8% slower over llama2-7b's decode products on an H200). INT4 1:
/// its step holds twice FP8's registers (scales and zeros beside the codes), so at 2 it runs one
/// block an SM (186 registers) and at 1 two (128), the same bytes in flight, 17% faster (1.70 vs
/// 2.06 ms at M1): INT4's dequantization wants the warps. kVecs (INT4): 16-byte vectors a lane a
/// step, 2 (a 256-value warp step) or 1 (128 values: half the registers, three blocks an SM at 80
/// registers without spills). A block per (row block, K
/// slice): a persistent grid whose blocks walk several row blocks, loading the next one's first
/// steps before reducing the last, measured slower on an H200 (FP8 decode-step products 2.32
/// against 2.04 ms at M1): short blocks that the hardware replaces as they finish keep the
/// stream fuller.
template <bool kInt4, int kInFlight, int kVecs, int kCols>
constexpr int kMinBlocks = !kInt4 ? (kInFlight == 2 ? 2 : kCols == 1 ? 3 : 2)
                           : kInFlight * kVecs == 1 ? (kCols == 1 ? 3 : 2)
                           : kInFlight * kVecs == 2 ? 2
                                                    : 1;

/// kCols: column tiles of 8 rows of x (1 for M <= 8, 2 for 9-16: each dequantized fragment feeds
/// two mmas, so 16 rows cost little more than 8 where the dequantization is the work).
template <bool kInt4, int kInFlight, int kVecs, int kCols, typename OutT>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<kInt4, kInFlight, kVecs, kCols>))
    quant_gemv_steps_kernel(const QuantGemvArgs a, const gemv::Plan plan) {
  __shared__ gemv::ReduceSmem sm;
  constexpr int kStep = kStepK<kInt4, kVecs>, kAhead = (kInFlight - 1) * kWarps;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y, lane_k = q * kVecK<kInt4>;
  const int group_bits = kInt4 ? __ffs(a.group_size) - 1 : 0;  // a power of two (quant_gemv_kernel_for)
  const uint8_t* rows[2][2];
  int row_idx[2][2];
  block_rows<kInt4>(a, rb, g, lane_k, rows, row_idx);
  const __nv_bfloat16* xr[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    xr[c] = static_cast<const __nv_bfloat16*>(a.x) + int64_t(min(g + 8 * c, a.m - 1)) * a.x_stride + lane_k;

  float acc[kCols][2][4] = {};
  const int end = plan.split_begin(split + 1), full = a.k / kStep;  // steps < full need no K check
  int s = plan.split_begin(split) + warp;
  {  // the first steps: codes before waiting for the kernel that writes x (PDL), x after
    StepCodes r[kInFlight];
    const bool first = s + kAhead < min(end, full);
    if (first) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        load_codes<kInt4, false, kVecs>(r[u], rows, row_idx, (s + u * kWarps) * kStep, lane_k, a, group_bits);
    }
    pdl_wait();
    pdl_launch_dependents();
    if (first) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const __nv_bfloat16* xs[kCols];
#pragma unroll
        for (int c = 0; c < kCols; ++c) xs[c] = xr[c] + int64_t(s + u * kWarps) * kStep;
        mma_codes<kInt4, false, kCols, kVecs>(acc, r[u], xs, 0, 0);
      }
      s += kInFlight * kWarps;
    }
  }
  for (; s + kAhead < min(end, full); s += kInFlight * kWarps) {  // kInFlight full steps: s, s + kWarps, ...
    StepCodes r[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      load_codes<kInt4, false, kVecs>(r[u], rows, row_idx, (s + u * kWarps) * kStep, lane_k, a, group_bits);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const __nv_bfloat16* xs[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) xs[c] = xr[c] + int64_t(s + u * kWarps) * kStep;
      mma_codes<kInt4, false, kCols, kVecs>(acc, r[u], xs, 0, 0);
    }
  }
  for (; s < end; s += kWarps) {  // the rest, one step at a time (the partial last step included)
    StepCodes r;
    load_codes<kInt4, true, kVecs>(r, rows, row_idx, s * kStep, lane_k, a, group_bits);
    const __nv_bfloat16* xs[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) xs[c] = xr[c] + int64_t(s) * kStep;
    mma_codes<kInt4, true, kCols, kVecs>(acc, r, xs, s * kStep + lane_k, a.k);
  }

  quant_gemv_rows::finish<kInt4, OutT>(sm, acc[0], a, plan, rb, split, 0);
  if constexpr (kCols == 2) {
    __syncthreads();  // every warp is done with sm before the second tile's sums
    quant_gemv_rows::finish<kInt4, OutT>(sm, acc[1], a, plan, rb, split, 1);
  }
}

template <bool kInt4, int kInFlight, int kVecs, int kCols>
void launch_steps(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  if (a.out_bf16)
    launch_pdl(quant_gemv_steps_kernel<kInt4, kInFlight, kVecs, kCols, __nv_bfloat16>, grid, kThreads, 0, stream, a, plan);
  else
    launch_pdl(quant_gemv_steps_kernel<kInt4, kInFlight, kVecs, kCols, float>, grid, kThreads, 0, stream, a, plan);
}

template <bool kInt4, int kVecs, int kCols>
void launch_steps(const QuantGemvArgs& a, const gemv::Plan& plan, int in_flight, cudaStream_t stream) {
  in_flight == 1 ? launch_steps<kInt4, 1, kVecs, kCols>(a, plan, stream)
                 : launch_steps<kInt4, 2, kVecs, kCols>(a, plan, stream);
}

template <int kCols>
void launch_steps(const QuantGemvArgs& a, const gemv::Plan& plan, int in_flight, int vecs, cudaStream_t stream) {
  if (a.kind != QuantWeightKind::int4) launch_steps<false, 2, kCols>(a, plan, in_flight, stream);
  else if (vecs == 1) launch_steps<true, 1, kCols>(a, plan, in_flight, stream);
  else launch_steps<true, 2, kCols>(a, plan, in_flight, stream);
}

}  // namespace quant_gemv_steps_detail

namespace {
int steps_vectors(const QuantGemvArgs& a, int n_sms) {  // INT4's 16-byte vectors a lane a step (FP8: 2)
  if (a.kind != QuantWeightKind::int4) return 2;
  return a.steps_vectors > 0 ? a.steps_vectors : quant_gemv_steps_vectors(a.n, n_sms);
}
}  // namespace

gemv::Plan quant_gemv_steps_plan(const QuantGemvArgs& a, int n_sms) {
  const bool int4 = a.kind == QuantWeightKind::int4;
  const int vecs = steps_vectors(a, n_sms);
  const int step_k = vecs * 4 * (int4 ? quant_gemv_steps_detail::kVecK<true> : quant_gemv_steps_detail::kVecK<false>);
  const int target = a.stream_blocks_per_sm > 0 ? a.stream_blocks_per_sm : 1;  // split while under a block an SM
  // Half the workspace a column tile (M 9-16 takes two), whatever M is: the plan, and so a row's
  // bits, do not depend on M.
  gemv::Plan p = gemv::make_plan_steps(a.n, (a.k + step_k - 1) / step_k, n_sms, target,
                                       a.partials ? a.counter_capacity / 2 : 0, a.partials ? a.partial_capacity / 2 : 0, 1);
  p.variant = vecs;  // the launch takes the step the plan was cut for
  return p;
}

// H200, kernel_bench --quant-only at 0327c2b (results/gpu/quant/h200-2026-11-29-0327c2b-steps16/),
// llama2-7b's decode products, µs at M1 / M16, one vector a step against two: QKV 8.8 / 11.2 and
// 18.5 / 20.2, gate|up 16.3 / 16.9 and 27.0 / 30.9, LM head 21.9 / 22.9 and 36.4 / 41.5; O 6.3 /
// 4.6 and 9.3 / 7.7, down 12.6 / 10.4 and 15.8 / 17.0 (QKV's 384 blocks of 32 rows fill 396 slots
// at three blocks an SM, O's and down's 128 (split in 2) two thirds of them). Steps in flight:
// FP8 at M16 1 took 2.52 ms over the products against 2 in flight's 2.62 (M1-8: 2 in flight
// 2.05-2.12 against 2.20).
int quant_gemv_steps_in_flight(QuantWeightKind kind, int m) {
  return kind == QuantWeightKind::int4 || m > gemv::kMaxRows ? 1 : 2;
}

int quant_gemv_steps_vectors(int n, int n_sms) {
  static const int env = [] {  // SERVELAB_QUANT_STEPS_VECTORS=1|2: a run's default (engine_bench compares them)
    const char* s = std::getenv("SERVELAB_QUANT_STEPS_VECTORS");
    return s && (s[0] == '1' || s[0] == '2') && !s[1] ? s[0] - '0' : 0;
  }();
  const int64_t row_blocks = (int64_t(n) + gemv::kBlockRows - 1) / gemv::kBlockRows;
  return env > 0 ? env : row_blocks > 2 * int64_t(n_sms) ? 1 : 2;
}

void quant_gemv_steps(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_steps_detail;
  if (a.m > kQuantGemvStepsMaxRows) throw std::invalid_argument("quant_gemv steps kernel: m must be <= 16");
  const bool int4 = a.kind == QuantWeightKind::int4;
  if (int4 && (a.group_size % 128 != 0 || (a.group_size & (a.group_size - 1))))
    throw std::invalid_argument("quant_gemv steps kernel: INT4 groups must be a power of two from 128");
  const int in_flight = a.steps_in_flight > 0 ? a.steps_in_flight : quant_gemv_steps_in_flight(a.kind, a.m);
  const int vecs = plan.variant == 1 ? 1 : 2;  // quant_gemv_steps_plan's vectors a lane a step
  if (a.m > gemv::kMaxRows) launch_steps<2>(a, plan, in_flight, vecs, stream);
  else launch_steps<1>(a, plan, in_flight, vecs, stream);
}

}  // namespace servelab::kernels
