// Skinny GEMM for decode: y[M, N] = x[M, K] · w[N, K]ᵀ (+ y), M ≤ 16, bf16 in, fp32 accumulate,
// on mma.sync.m16n8k16 with x as the n = 8 operand (layout and decomposition: gemv_plan.h): one
// 8-row column tile of x, or two for M 9-16 (each weight fragment then feeds two mmas, the weight
// stream unchanged; the second tile's split-K partials and counters after the first's, so a row's
// sums take the same order whatever M is).
// A block owns 32 rows of w (two 16-row tiles per warp); its 8 warps take the K steps of its slice
// in turn, so at any moment the block streams a contiguous run of each row. Per step a lane issues
// 8 streaming 16-byte loads (ld.global.nc.L1::no_allocate) of w and 2 cached loads of x, two
// steps before the first use. The warps' fp32 accumulators are summed in shared memory in warp
// order; with K split over blocks, each slice writes its 256 partial sums and the block that
// finishes its row block last (a self-resetting counter per row block) adds them in slice order.
// Every sum has a fixed order, so the result is deterministic and does not depend on M.
// Launched with programmatic dependent launch (launch_pdl, common.cuh): each warp loads its first
// two steps of weights, then waits for the kernel that writes x, so the weight stream starts while
// the previous kernel (a norm, the attention reduce, silu_mul) drains.
// Fused SiLU·mul (silu_ffn > 0): w is the merged [gate; up] projection of 2 * ffn rows; block b
// takes gate rows 16b .. 16b + 15 as its first tile and the up rows ffn + 16b .. as its second, so
// it owns both halves of 16 outputs and writes silu(gate) * up, each half rounded to T first as
// the stored gate_up would be: the same bits as the product followed by silu_mul.
// Fused RoPE and K/V write (rope.head_dim > 0, run_gemv_rope_kv): the q|k|v product with
// rope_kv_write's work in its epilogue, row blocks laid out as gemv_rope_kv.cuh describes.
// A LoRA delta in the epilogue (lora.delta.xa, every entry point; gemv_lora.cuh): the grid's first
// blocks run the product's grouped shrink, and each output gets its row's
// Σ_k xa[row, seg · r + k] · B[slot, col, k] added to its fp32 sum before it is rounded, SiLU'd or
// rotated, once the shrink blocks are done: no LoRA launch, the PDL overlap with the kernel
// before kept.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/gemm.h"
#include "kernels/gemv_plan.h"
#include "kernels/gemv_reduce.cuh"
#include "kernels/gemv_rope_kv.cuh"
#include "kernels/lamport_push.h"
#include "kernels/gemv_lora.cuh"
#include "kernels/silu.cuh"

namespace servelab::kernels {
namespace {

using gemv::kBlockRows;
using gemv::kStepK;
using gemv::kThreads;
using gemv::kUnroll;
using gemv::kWarps;

template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

/// One warp step's operands: w vectors [tile][row g / g + 8][v] and x vectors [column tile][v].
template <int kCols>
struct StepRegs {
  Vec8 w[2][2][2];
  Vec8 x[kCols][2];
};

/// Loads the weights of the step starting at K index kb. kCheck: vectors at or past k read as
/// zeros (the last, partial step; k is a multiple of 8, so a vector is wholly in or out).
/// Streaming 16-byte load of weights; kHint: with the L2::256B prefetch-size hint (the L2 fetches
/// the whole 256-byte block, the next warp's step included).
template <bool kHint>
__device__ __forceinline__ Vec8 load_weights(const void* p) {
  if constexpr (!kHint) return load_stream(p);
  else return load_stream_256(p);
}

template <bool kCheck, bool kHint = false, typename T, int kCols>
__device__ __forceinline__ void load_w(StepRegs<kCols>& r, const T* const (&wr)[2][2], int kb, int lane_k, int k) {
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const int kv = kb + gemv::k_offset(0, v);  // wr already holds this lane's k_offset(q, 0)
    const bool in = !kCheck || kv + lane_k < k;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) r.w[t][h][v] = in ? load_weights<kHint>(wr[t][h] + kv) : make_uint4(0, 0, 0, 0);
  }
}

/// Loads the x vectors of the step starting at kb (as load_w).
template <bool kCheck, typename T, int kCols>
__device__ __forceinline__ void load_x(StepRegs<kCols>& r, const T* const (&xr)[kCols], int kb, int lane_k, int k) {
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const int kv = kb + gemv::k_offset(0, v);
    const bool in = !kCheck || kv + lane_k < k;
#pragma unroll
    for (int c = 0; c < kCols; ++c) r.x[c][v] = in ? __ldg(reinterpret_cast<const Vec8*>(xr[c] + kv)) : make_uint4(0, 0, 0, 0);
  }
}

template <bool kCheck, bool kHint = false, typename T, int kCols>
__device__ __forceinline__ void load_step(StepRegs<kCols>& r, const T* const (&wr)[2][2], const T* const (&xr)[kCols],
                                          int kb, int lane_k, int k) {
  load_w<kCheck, kHint>(r, wr, kb, lane_k, k);
  load_x<kCheck>(r, xr, kb, lane_k, k);
}

template <typename T, int kCols>
__device__ __forceinline__ void mma_step(float (&acc)[kCols][2][4], const StepRegs<kCols>& r) {
#pragma unroll
  for (int v = 0; v < 2; ++v)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t b[kCols][2];
#pragma unroll
      for (int c = 0; c < kCols; ++c) gemv::frag_b(r.x[c][v], h, b[c]);
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        uint32_t a[4];
        gemv::frag_a(r.w[t][0][v], r.w[t][1][v], h, a);
#pragma unroll
        for (int c = 0; c < kCols; ++c) mma16816<T>(acc[c][t], a, b[c]);
      }
    }
}

template <typename T>
__device__ __forceinline__ float out_to_float(T v) { return to_float<T>(v); }
template <>
__device__ __forceinline__ float out_to_float<float>(float v) { return v; }
template <typename T>
__device__ __forceinline__ T out_from_float(float v) { return from_float<T>(v); }
template <>
__device__ __forceinline__ float out_from_float<float>(float v) { return v; }

struct Params {
  const void* x;
  const void* w;
  void* y;
  int m, n, k;
  bool accumulate;
  gemv::Plan plan;
  float* partials;     ///< [column tiles, row_blocks, splits, kPartialFloats] when splits > 1
  int32_t* counters;   ///< [column tiles, row_blocks], zero between launches
  int silu_ffn;        ///< > 0: fused SiLU·mul, w = [gate; up] (n = 2 * silu_ffn), y [m, silu_ffn]
  LamportPush push;    ///< active: y's values also go into the peers' lamport buffers (lamport_push.h)
  gemv::RopeKv rope;   ///< head_dim > 0: y is q|k|v, RoPE and the K/V write in the epilogue
  LoraInGemv lora;     ///< delta.xa set: the shrink in the first blocks, each output's delta in the epilogue
};

/// The row of w (the column of y, before any pairing) whose sum thread r (0..31) of block b holds
/// after block_row_sums, or -1 past the product's rows.
__device__ __forceinline__ int gemv_out_row(const Params& p, int b, int r) {
  if (p.silu_ffn > 0) {
    const int c = b * 16 + r % 16;
    return c < p.silu_ffn ? (r / 16) * p.silu_ffn + c : -1;
  }
  const int row = p.rope.head_dim > 0 ? gemv::rope_kv_row(p.rope, b, r / 16, r % 16) : b * kBlockRows + r;
  return row < p.n ? row : -1;
}

/// The epilogue of column tile ctile (rows of x 8 ctile .. 8 ctile + 7): the block's sums of its
/// accumulators (with K split, the last slice's), the LoRA delta, then the store, SiLU·mul or
/// RoPE + K/V write. Column tile 1 keeps its split-K partials and counters after tile 0's.
template <typename T, typename OutT, bool kLora>
__device__ __forceinline__ void finish_tile(const Params& p, gemv::ReduceSmem& sm, const float (&acc)[2][4], int bx,
                                            int split, int ctile) {
  const int tid = threadIdx.x, mm = tid / kBlockRows + 8 * ctile, n0 = bx * kBlockRows;
  gemv::LoraEpilogue le;  // kLora: B's first ranks in flight while the block sums its warps
  if constexpr (kLora) le = gemv::lora_prefetch<T>(p.lora.delta, p.m, mm, gemv_out_row(p, bx, tid % kBlockRows));
  float sum;
  if (!gemv::tile_row_sums(sm, acc, p.plan, bx, split, p.partials, p.counters, ctile, sum)) return;
  if constexpr (kLora) {
    gemv::lora_wait_shrink(p.lora.shrink);
    sum = gemv::lora_add_delta<T>(p.lora.delta, le, mm, sum);
  }
  const int ffn = p.silu_ffn;
  if (ffn > 0) {  // thread (mm, r < 16) pairs gate row 16b + r with its up row (thread + 16)
    __syncthreads();  // every warp is done reading red
    sm.red[0][tid] = sum;
    __syncthreads();
    const int r = tid % kBlockRows, col = bx * 16 + r;
    if (r < 16 && mm < p.m && col < ffn) {
      const float gate = to_float<T>(from_float<T>(sum)), up = to_float<T>(from_float<T>(sm.red[0][tid + 16]));
      static_cast<OutT*>(p.y)[int64_t(mm) * ffn + col] = out_from_float<OutT>(silu_mul_f(gate, up));
    }
    return;
  }
  if constexpr (!std::is_same_v<OutT, float>) {
    if (p.rope.head_dim > 0) {
      gemv::rope_kv_epilogue<T>(p.rope, sm, sum, static_cast<T*>(p.y), p.m, p.n, bx, 8 * ctile);
      return;
    }
  }
  const int nn = n0 + tid % kBlockRows;
  if (mm < p.m && nn < p.n) {
    OutT* y = static_cast<OutT*>(p.y) + int64_t(mm) * p.n + nn;
    const OutT v = out_from_float<OutT>(p.accumulate ? sum + out_to_float<OutT>(*y) : sum);
    *y = v;
    if constexpr (std::is_same_v<OutT, __nv_bfloat16>)
      if (p.push.active()) lamport_push_value(p.push, int64_t(mm) * p.n + nn, v);
  }
}

/// kVariant (gemv::Plan::variant): bit 0 = rolling two-step pipeline (a step's loads are issued
/// right after the previous use of its registers, so a warp always has one or two steps in
/// flight, instead of loading two, using two); bit 1 = the L2::256B hint on the weight loads.
/// The steps are summed in the same order in every variant (same bits). kCols: column tiles of 8
/// rows of x (1 for M <= 8, 2 for 9-16). Two blocks an SM either way: two column tiles take 128
/// registers with 20-56 bytes spilled (outside the loop); at one block an SM (148 registers) the
/// 16-row products were slower and a LoRA gemv's shrink blocks took a whole wave
/// (results/gpu/lora/2026-12-01-h200-gemv16/).
template <typename T, typename OutT, int kVariant, bool kLora, int kCols>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p) {
  constexpr bool kRolling = kVariant & 1, kHint = (kVariant & 2) != 0;
  __shared__ gemv::ReduceSmem sm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  int bx = blockIdx.x, split = blockIdx.y;  // the row block and K slice (LoRA: after the shrink's blocks)
  if constexpr (kLora) {
    const int b = int(blockIdx.x) - p.lora.shrink.blocks;
    if (b < 0) {
      gemv::lora_shrink_block<T>(p.lora.shrink, p.lora.delta.total, static_cast<const T*>(p.x), blockIdx.x);
      return;
    }
    bx = b % p.plan.row_blocks;
    split = b / p.plan.row_blocks;
  }
  const int n0 = bx * kBlockRows;
  const int k = p.k, lane_k = gemv::k_offset(q, 0);
  const T* w = static_cast<const T*>(p.w);
  const int ffn = p.silu_ffn;
  const T* wr[2][2];  // this lane's rows (tile t, row g or g + 8); past n clamped to n - 1 (results dropped)
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = ffn > 0 ? t * ffn + min(bx * 16 + h * 8 + g, ffn - 1)  // gate, then up
                      : p.rope.head_dim > 0 ? min(gemv::rope_kv_row(p.rope, bx, t, h * 8 + g), p.n - 1)
                                            : min(n0 + t * 16 + h * 8 + g, p.n - 1);
      wr[t][h] = w + int64_t(row) * k + lane_k;
    }
  const T* xr[kCols];  // column tile c's row g of x; columns >= m dropped
#pragma unroll
  for (int c = 0; c < kCols; ++c) xr[c] = static_cast<const T*>(p.x) + int64_t(min(8 * c + g, p.m - 1)) * k + lane_k;

  float acc[kCols][2][4] = {};
  const int end = p.plan.split_begin(split + 1), full = k / kStepK;  // steps < full need no K check
  int s = p.plan.split_begin(split) + warp;
  if constexpr (kRolling) {
    const int lim = min(end, full);  // steps s, s + kWarps, ... below lim need no K check
    StepRegs<kCols> a, b;            // step s, step s + kWarps
    bool have_a = s < lim, have_b = s + kWarps < lim;
    if (have_a) load_w<false, kHint>(a, wr, s * kStepK, lane_k, k);  // weights before the PDL wait
    if (have_b) load_w<false, kHint>(b, wr, (s + kWarps) * kStepK, lane_k, k);
    pdl_wait();
    pdl_launch_dependents();
    if (have_a) load_x<false>(a, xr, s * kStepK, lane_k, k);
    if (have_b) load_x<false>(b, xr, (s + kWarps) * kStepK, lane_k, k);
    while (have_a) {
      mma_step<T>(acc, a);
      const bool next_a = s + 2 * kWarps < lim;
      if (next_a) load_step<false, kHint>(a, wr, xr, (s + 2 * kWarps) * kStepK, lane_k, k);
      if (!have_b) {
        s += kWarps;
        break;
      }
      mma_step<T>(acc, b);
      const bool next_b = s + 3 * kWarps < lim;
      if (next_b) load_step<false, kHint>(b, wr, xr, (s + 3 * kWarps) * kStepK, lane_k, k);
      s += 2 * kWarps;
      have_a = next_a;
      have_b = next_b;
    }
  } else {  // the first two steps: weights before waiting for the kernel that writes x (PDL), x after
    StepRegs<kCols> r[kUnroll];
    const bool first = s + kWarps < min(end, full);
    if (first) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_w<false, kHint>(r[u], wr, (s + u * kWarps) * kStepK, lane_k, k);
    }
    pdl_wait();
    pdl_launch_dependents();
    if (first) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_x<false>(r[u], xr, (s + u * kWarps) * kStepK, lane_k, k);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mma_step<T>(acc, r[u]);
      s += kUnroll * kWarps;
    }
  }
  for (; s + kWarps < min(end, full); s += kUnroll * kWarps) {  // two full steps: s and s + kWarps
    StepRegs<kCols> r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_step<false, kHint>(r[u], wr, xr, (s + u * kWarps) * kStepK, lane_k, k);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) mma_step<T>(acc, r[u]);
  }
  for (; s < end; s += kWarps) {  // the rest, one step at a time (the partial last step included)
    StepRegs<kCols> r;
    load_step<true>(r, wr, xr, s * kStepK, lane_k, k);
    mma_step<T>(acc, r);
  }

  finish_tile<T, OutT, kLora>(p, sm, acc[0], bx, split, 0);
  if constexpr (kCols == 2) {
    __syncthreads();  // every warp is done with sm before the second tile's sums
    finish_tile<T, OutT, kLora>(p, sm, acc[1], bx, split, 1);
  }
}

template <typename T, int kVariant, int kCols>
void launch_cols(const Params& p, bool out_fp32, cudaStream_t stream) {
  const dim3 grid(p.plan.row_blocks, p.plan.splits);
  if (p.lora.delta.xa) {  // 16-bit output only (the entry points check); a 1-D grid, the shrink's blocks first
    const dim3 lora_grid(p.lora.shrink.blocks + p.plan.row_blocks * p.plan.splits);
    launch_pdl(gemv_kernel<T, T, kVariant, true, kCols>, lora_grid, kThreads, 0, stream, p);
    return;
  }
  if (out_fp32) launch_pdl(gemv_kernel<T, float, kVariant, false, kCols>, grid, kThreads, 0, stream, p);
  else launch_pdl(gemv_kernel<T, T, kVariant, false, kCols>, grid, kThreads, 0, stream, p);
}

template <typename T, int kVariant>
void launch_variant(const Params& p, bool out_fp32, cudaStream_t stream) {
  if (p.m > gemv::kMaxRows) launch_cols<T, kVariant, 2>(p, out_fp32, stream);
  else launch_cols<T, kVariant, 1>(p, out_fp32, stream);
}

template <typename T>
void launch(const Params& p, bool out_fp32, cudaStream_t stream) {
  switch (p.plan.variant & 3) {
    case 0: return launch_variant<T, 0>(p, out_fp32, stream);
    case 1: return launch_variant<T, 1>(p, out_fp32, stream);
    case 2: return launch_variant<T, 2>(p, out_fp32, stream);
    default: return launch_variant<T, 3>(p, out_fp32, stream);
  }
}

void check_plan(const gemv::Plan& plan, int n, int k, const float* partials, const int32_t* counters) {
  if (plan.row_blocks != (n + kBlockRows - 1) / kBlockRows || plan.k_steps != (k + kStepK - 1) / kStepK ||
      plan.splits < 1 || (plan.splits > 1 && (!partials || !counters)))
    throw std::invalid_argument("run_gemv: plan does not match N=" + std::to_string(n) + " K=" + std::to_string(k) +
                                " or lacks its workspace");
}

}  // namespace

bool gemv_supported(ScalarType t, const void* x, const void* w, int m, int n, int k) {
#if !defined(SERVELAB_KERNELS_FP16)
  if (t != ScalarType::bf16) return false;
#endif
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return m >= 1 && m <= gemv::kMaxM && n >= 1 && k >= 0 && k % 8 == 0 && aligned(x) && aligned(w);
}

int gemv_blocks_per_sm() {
  static const int blocks = [] {
    int b = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_kernel<__nv_bfloat16, float, 0, false, 1>, kThreads, 0));
    return b;
  }();
  return blocks;
}

namespace {

/// The LoRA epilogue's arguments, checked against the product: none (delta.xa null) passes.
LoraInGemv checked_lora(const LoraInGemv* lora, int m, int n, int k, bool out_fp32, const char* who) {
  if (!lora || !lora->delta.xa) return {};
  const LoraXaDelta& d = lora->delta;
  const LoraGemvShrink& s = lora->shrink;
  if (!d.row_slot || !d.b || d.n_out != n || d.max_rank < 1 || d.max_rank > kLoraMaxRank || d.total < d.max_rank ||
      out_fp32)
    throw std::invalid_argument(std::string(who) + ": a LoRA epilogue needs row slots, B over the product's " +
                                std::to_string(n) + " columns (got " + std::to_string(d.n_out) +
                                "), a rank and a 16-bit output");
  if (s.blocks < 1 || s.n_in != k || s.n_rows != m || s.xa_rows != d.xa || !s.n_tiles || !s.tiles || !s.perm || !s.a ||
      !s.scale || !s.partial || !s.tile_done || !s.done || (s.row_items && !s.perm_slot) || s.n_chunks < 1 || s.chunk_len < 1)
    throw std::invalid_argument(std::string(who) + ": the LoRA shrink (lora_gemv_shrink) does not match the product's " +
                                std::to_string(m) + " x " + std::to_string(k) + " input");
  return *lora;
}

}  // namespace

void run_gemv(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32, bool accumulate,
              const gemv::Plan& plan, float* partials, int32_t* counters, cudaStream_t stream, const LamportPush& push,
              const LoraInGemv* lora) {
  if (!gemv_supported(t, x, w, m, n, k))
    throw std::invalid_argument("run_gemv: unsupported product M=" + std::to_string(m) + " N=" + std::to_string(n) +
                                " K=" + std::to_string(k) + " (needs 1 <= M <= 16, N >= 1, K a multiple of 8, "
                                "16-byte aligned x and w)");
  check_plan(plan, n, k, partials, counters);
  if (push.active() && (t != ScalarType::bf16 || out_fp32 || !push.counter || push.n > LamportPush::kMaxRanks ||
                        int64_t(m) * n > push.slot_elems))
    throw std::invalid_argument("run_gemv: a lamport push needs bf16 output that fits a slot");
  Params p{x, w, y, m, n, k, accumulate, plan, partials, counters, 0, push, {}, checked_lora(lora, m, n, k, out_fp32, "run_gemv")};
  if (p.lora.delta.xa && push.active()) throw std::invalid_argument("run_gemv: a LoRA epilogue with a lamport push");
  SERVELAB_DISPATCH_16(t, launch<__nv_bfloat16>(p, out_fp32, stream), launch<__half>(p, out_fp32, stream));
}

void run_gemv_silu_mul(ScalarType t, const void* x, const void* w, void* act, int m, int ffn, int k,
                       const gemv::Plan& plan, float* partials, int32_t* counters, cudaStream_t stream,
                       const LoraInGemv* lora) {
  if (ffn < 1 || !gemv_supported(t, x, w, m, 2 * ffn, k))
    throw std::invalid_argument("run_gemv_silu_mul: unsupported product M=" + std::to_string(m) + " FFN=" +
                                std::to_string(ffn) + " K=" + std::to_string(k) +
                                " (needs 1 <= M <= 16, FFN >= 1, K a multiple of 8, 16-byte aligned x and w)");
  check_plan(plan, 2 * ffn, k, partials, counters);
  Params p{x,        w,   act, m, 2 * ffn, k, false, plan, partials, counters, ffn, LamportPush{}, {},
           checked_lora(lora, m, 2 * ffn, k, false, "run_gemv_silu_mul")};
  SERVELAB_DISPATCH_16(t, launch<__nv_bfloat16>(p, false, stream), launch<__half>(p, false, stream));
}

gemv::RopeKv gemv_rope_kv_params(const QkvArgs& a) {
  gemv::RopeKv r;
  r.positions = a.positions;
  r.inv_freq = a.inv_freq;
  r.slot_mapping = a.slot_mapping;
  r.k_cache = a.k_cache;
  r.v_cache = a.v_cache;
  r.bias = a.bias;
  r.n_heads = a.n_heads;
  r.n_kv_heads = a.n_kv_heads;
  r.head_dim = a.head_dim;
  return r;
}

bool gemv_rope_kv_supported(const QkvArgs& a, const void* x, const void* w, int k) {
  const int n = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  return a.head_dim > 0 && a.head_dim % 32 == 0 && a.qkv_row_stride == n && a.positions && a.inv_freq &&
         a.k_cache && a.v_cache && !a.delta && !a.lora.xa && gemv_supported(a.dtype, x, w, a.n_tokens, n, k);
}

void run_gemv_rope_kv(const QkvArgs& a, const void* x, const void* w, int k, const gemv::Plan& plan, float* partials,
                      int32_t* counters, cudaStream_t stream, const LoraInGemv* lora) {
  if (!gemv_rope_kv_supported(a, x, w, k))
    throw std::invalid_argument("run_gemv_rope_kv: unsupported product M=" + std::to_string(a.n_tokens) +
                                " head_dim=" + std::to_string(a.head_dim) + " K=" + std::to_string(k) +
                                " (needs 1 <= M <= 16, head_dim a multiple of 32, q|k|v rows of exactly the "
                                "q|k|v width, positions, inv_freq, both caches, no LoRA delta, K a multiple of 8, "
                                "16-byte aligned x and w)");
  const int n = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  check_plan(plan, n, k, partials, counters);
  Params p{x,        w, a.qkv, a.n_tokens, n, k, false, plan, partials, counters, 0, LamportPush{}, gemv_rope_kv_params(a),
           checked_lora(lora, a.n_tokens, n, k, false, "run_gemv_rope_kv")};
  SERVELAB_DISPATCH_16(a.dtype, launch<__nv_bfloat16>(p, false, stream), launch<__half>(p, false, stream));
}

}  // namespace servelab::kernels
