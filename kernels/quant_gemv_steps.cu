// quant_gemv's steps kernel (quant_gemv.h): the bf16 gemv's shape (gemv.cu, gemv_plan.h) over
// FP8 and INT4 codes, for M = 1–8. A block of 8 warps owns 32 rows of w (two 16-row mma tiles a
// warp) and its warps take the K steps of the block's slice in turn, so at any moment the block
// streams one contiguous run of each of its rows (the bf16 gemv reaches 0.94 of the copy this
// way across llama2-7b's decode products; the stream kernel, where a warp walks its own rows
// alone, 0.48-0.69 on FP8). Per step a lane issues 8 streaming 16-byte loads of codes
// (ld.global.nc.L1::no_allocate.L2::256B), kInFlight steps (FP8 2, INT4 1) before their use, the
// first ones before the PDL wait; x is read straight from global memory (cached: every warp of the grid reads the same
// few KB) and permuted in registers into the order the dequantized fragments come in, so there is
// no shared-memory staging and no barrier before the stream starts.
// Step layout: lane (g, q) loads, in a step at kb, vector v (0, 1) of rows g and g + 8 of each
// tile at K = kb + v * 4 * kVecK + q * kVecK (kVecK = 16 FP8 or 32 INT4 values in 16 bytes), so a
// quad reads 64 contiguous bytes of a row per vector. Word j of a vector feeds mmas over K values
// 4j..4j+3 (FP8: fp8x4_to_bf16's pairs (0, 2) and (1, 3) as fragment slots (2q, 2q+1) and
// (2q+8, 2q+9)) or 8j..8j+7 (INT4: nibble pairs (e, e + 4), two mmas); x's 16-byte vectors are
// byte-permuted into the same pairs. INT4's quad vector is 128 values: one group (groups are a
// multiple of 128), whose scale multiplies that vector's fp32 partial sums; FP8's per-channel or
// per-tensor scale multiplies the row's total. Sums in a fixed order (gemv_reduce.cuh): a row's
// bits do not depend on M. With QuantGemvArgs::silu_ffn the block owns 16 gate and 16 up rows and
// writes silu(gate) · up (the cuda backend's quantized gate|up at decode, as gemv.cu fuses bf16's).
#include <cuda_bf16.h>

#include <stdexcept>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv_plan.h"
#include "kernels/gemv_reduce.cuh"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/quant_gemv_rows.cuh"
#include "kernels/quant_gemv_steps.cuh"

namespace servelab::kernels {
namespace quant_gemv_steps_detail {  // named: the kernels library may be compiled as unity batches

/// kInFlight: steps a warp loads before computing them. FP8 2 (two blocks an SM at 125 registers;
/// 1 and three blocks an SM was 8% slower over llama2-7b's decode products on an H200). INT4 1:
/// its step holds twice FP8's registers (scales and zeros beside the codes), so at 2 it runs one
/// block an SM (186 registers) and at 1 two (128), the same bytes in flight, 17% faster (1.70 vs
/// 2.06 ms at M1): INT4's dequantization wants the warps. A block per (row block, K
/// slice): a persistent grid whose blocks walk several row blocks, loading the next one's first
/// steps before reducing the last, measured slower on an H200 (FP8 decode-step products 2.32
/// against 2.04 ms at M1): short blocks that the hardware replaces as they finish keep the
/// stream fuller.
template <bool kInt4, int kInFlight>
constexpr int kMinBlocks = kInFlight == 2 ? (kInt4 ? 1 : 2) : (kInt4 ? 2 : 3);

template <bool kInt4, int kInFlight, typename OutT>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<kInt4, kInFlight>))
    quant_gemv_steps_kernel(const QuantGemvArgs a, const gemv::Plan plan) {
  __shared__ gemv::ReduceSmem sm;
  constexpr int kStep = kStepK<kInt4>, kAhead = (kInFlight - 1) * kWarps;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y, lane_k = q * kVecK<kInt4>;
  const uint8_t* rows[2][2];
  int row_idx[2][2];
  block_rows<kInt4>(a, rb, g, lane_k, rows, row_idx);
  const __nv_bfloat16* xr = static_cast<const __nv_bfloat16*>(a.x) + int64_t(min(g, a.m - 1)) * a.x_stride + lane_k;

  float acc[2][4] = {};
  const int end = plan.split_begin(split + 1), full = a.k / kStep;  // steps < full need no K check
  int s = plan.split_begin(split) + warp;
  {  // the first steps: codes before waiting for the kernel that writes x (PDL), x after
    StepCodes r[kInFlight];
    const bool first = s + kAhead < min(end, full);
    if (first) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) load_codes<kInt4, false>(r[u], rows, row_idx, (s + u * kWarps) * kStep, lane_k, a);
    }
    pdl_wait();
    pdl_launch_dependents();
    if (first) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) mma_codes<kInt4, false>(acc, r[u], xr + int64_t(s + u * kWarps) * kStep, 0, 0);
      s += kInFlight * kWarps;
    }
  }
  for (; s + kAhead < min(end, full); s += kInFlight * kWarps) {  // kInFlight full steps: s, s + kWarps, ...
    StepCodes r[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) load_codes<kInt4, false>(r[u], rows, row_idx, (s + u * kWarps) * kStep, lane_k, a);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) mma_codes<kInt4, false>(acc, r[u], xr + int64_t(s + u * kWarps) * kStep, 0, 0);
  }
  for (; s < end; s += kWarps) {  // the rest, one step at a time (the partial last step included)
    StepCodes r;
    load_codes<kInt4, true>(r, rows, row_idx, s * kStep, lane_k, a);
    mma_codes<kInt4, true>(acc, r, xr + int64_t(s) * kStep, s * kStep + lane_k, a.k);
  }

  quant_gemv_rows::finish<kInt4, OutT>(sm, acc, a, plan, rb, split);
}

template <bool kInt4, int kInFlight>
void launch_steps(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  if (a.out_bf16) launch_pdl(quant_gemv_steps_kernel<kInt4, kInFlight, __nv_bfloat16>, grid, kThreads, 0, stream, a, plan);
  else launch_pdl(quant_gemv_steps_kernel<kInt4, kInFlight, float>, grid, kThreads, 0, stream, a, plan);
}

}  // namespace quant_gemv_steps_detail

gemv::Plan quant_gemv_steps_plan(const QuantGemvArgs& a, int n_sms) {
  const bool int4 = a.kind == QuantWeightKind::int4;
  const int step_k = int4 ? quant_gemv_steps_detail::kStepK<true> : quant_gemv_steps_detail::kStepK<false>;
  const int target = a.stream_blocks_per_sm > 0 ? a.stream_blocks_per_sm : 1;  // split while under a block an SM
  return gemv::make_plan_steps(a.n, (a.k + step_k - 1) / step_k, n_sms, target, a.partials ? a.counter_capacity : 0,
                               a.partials ? a.partial_capacity : 0, 1);
}

void quant_gemv_steps(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_steps_detail;
  if (a.m > gemv::kMaxRows) throw std::invalid_argument("quant_gemv steps kernel: m must be <= 8");
  const bool int4 = a.kind == QuantWeightKind::int4;
  const int in_flight = a.steps_in_flight > 0 ? a.steps_in_flight : int4 ? 1 : 2;
  if (int4) {
    in_flight == 1 ? launch_steps<true, 1>(a, plan, stream) : launch_steps<true, 2>(a, plan, stream);
  } else {
    in_flight == 1 ? launch_steps<false, 1>(a, plan, stream) : launch_steps<false, 2>(a, plan, stream);
  }
}

}  // namespace servelab::kernels
