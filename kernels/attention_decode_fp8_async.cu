// Decode attention over an FP8 KV arena on tensor cores with the codes staged through shared
// memory (Fp8KvDecode::mma_async): attention_decode_fp8_mma.cu's arithmetic, fragments and
// scaling (see there), fed from a ring of kStages one-step stages a warp filled by cp.async, so
// kStages - 1 steps of each warp's loads stay in flight while it computes the current one (the
// register kernel loads a pass of 2 steps, then computes it: 2 blocks of 4 warps an SM keep too
// few bytes in flight for the copy bandwidth, ncu at 0.67 of DRAM's peak with long-scoreboard
// stalls the largest). Warp w takes steps w, w + 4, ... of the block's split, 16 positions each;
// no block barrier in the loop (a warp reads only what it copied: cp.async.wait_group, then
// __syncwarp). Each warp looks up the slots of the step it will issue next while it computes.
//
// Stage layout (per warp, per step): K rows [16][HD] bytes, V rows [16][HD], then the 16 K scales
// and the 16 V scales (fp32): 4,224 bytes at head_dim 128, 2,176 at 64, no padding; the 16-byte
// chunks of a row are XOR-swizzled so the fragment reads are conflict-free (k_chunk, v_chunk below):
// a K read (lane (g, i) at row g, chunk i + 4v) puts rows 2p and 2p + 1 in opposite bank halves; a
// V read (rows 2i.., chunk g) spreads rows 0, 2, 4, 6 over the 8 bank quarters. The copies: 16-byte
// cp.async.cg chunks, a row's HD/16 chunks by consecutive lanes, the scales by 4-byte cp.async.ca.
//
// kBulk (Fp8KvDecode::mma_bulk, head_dim 128, sm_90): where every step is a whole 16-aligned page,
// lane 0 fills a stage with two bulk copies (cp.async.bulk, counted by the stage's mbarrier): the
// head's K run and V run of the page as they lie (16 rows of codes, then their 16 scales: 2,112
// bytes each), so the stage is unswizzled. K reads stay conflict-free (odd rows read their two
// chunks in the other order); V reads meet 4-way bank conflicts. On an H200 (2026-12-03,
// results/gpu/quant/h200-2026-12-03-fp8kv-bulk/) this read 0.04-0.13 of the copy more than the
// cp.async ring from batch 32, and beat a padded V layout of 11 copies a step (pairs of rows 32
// bytes apart, conflict-free: 0.04 slower to 0.01 faster); at GQA 1 from batch 32 the ring's loads
// alone (no arithmetic) read 0.73-0.84 of the copy, the two bulk copies' 0.83-0.90. Rows past the
// split's end are zeroed in the stage after the copy lands (the page holds other tokens' or stale
// bytes there, NaN codes included).
#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/attention_decode_fp8.cuh"
#include "kernels/attention_decode_mma.cuh"
#include "kernels/bulk_copy.cuh"
#include "kernels/common.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/per_device.h"

namespace servelab::kernels::decode_fp8 {
namespace async_detail {  // named: the kernels library may be compiled as unity batches

using decode::kThreads;
using bf16 = __nv_bfloat16;
constexpr float kTwoPow60 = 1152921504606846976.0f;           // 2^60, exact
constexpr float kTwoPow90 = 1237940039285380274899124224.0f;  // 2^90, exact
constexpr float kTwoPow30 = 1073741824.0f;                    // 2^30
constexpr int kSmemPerSm = 228 * 1024, kSmemPerBlock = 1024;  // sm_90: shared memory an SM, reserved a block

/// A warp's ring: kStages one-step stages, as many as fit kBps blocks an SM (the block's output
/// tile reuses the ring's memory after the loop).
template <int HD, int kBps, bool kBulk = false>
struct Stage {
  static constexpr int kKBytes = 16 * HD, kVBytes = 16 * HD;
  // kBulk: the K run and the V run as they lie in the page (16 rows, then their 16 scales), one
  // bulk copy each.
  static constexpr int kKRun = 16 * (HD + 4), kVAt = kKRun;
  static constexpr int kBytes = kBulk ? 2 * kKRun : kKBytes + kVBytes + 16 * 8;
  static constexpr int kStatic = 4096;  // the static shared memory (sm_m, sm_l, finish_block: 2.5 KB) and slack
  static constexpr int kFit = (kSmemPerSm / kBps - kSmemPerBlock - kStatic) / ((kThreads / 32) * kBytes);
  static constexpr int kStages = kFit > 8 ? 8 : kFit;
  static constexpr int kWarpBytes = kStages * kBytes;
  static constexpr int kBlockBytes = (kThreads / 32) * kWarpBytes;
  static_assert(kBytes % 16 == 0, "16-byte aligned stages");
  static_assert(kStages >= 2, "a ring of at least 2 stages");
  static_assert(kBlockBytes >= (kThreads / 32) * decode::kMmaHeads * (HD + 4) * 4, "the output tile fits the ring");
};

/// Byte offset in a stage's K rows of chunk c (16 bytes) of row r (the header's swizzles).
template <int HD>
__device__ __forceinline__ int k_chunk(int r, int c) {
  if constexpr (HD == 128) return r * 128 + ((c ^ ((r & 1) << 2)) << 4);
  else return r * HD + (c << 4);  // 64-byte rows: rows 2p and 2p + 1 share a 128-byte line already
}
/// Byte offset in a stage's V rows of chunk c of row r.
template <int HD>
__device__ __forceinline__ int v_chunk(int r, int c) {
  if constexpr (HD == 128) return r * 128 + ((c ^ (r & 7)) << 4);
  else return (r >> 1) * 128 + (((((r & 1) << 2) + c) ^ ((r >> 1 & 3) << 1)) << 4);  // two rows a 128-byte line
}

/// A word's codes as one operand pair (kHigh: the other): bytes 0, 1 (2, 3) in f16 by cvt (kF16),
/// else bytes 0, 2 (1, 3) in bf16 by masks and shifts.
template <bool kF16, bool kHigh>
__device__ __forceinline__ uint32_t code_pair(uint32_t w) {
  if constexpr (kF16) return e4m3x2_f16x2<kHigh>(w);
  else return kHigh ? e4m3_hi_pair(w) : e4m3_lo_pair(w);
}

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

// The bulk ring (kBulk, sm_90): one lane's bulk copies a step, counted by the stage's mbarrier
// (kernels/bulk_copy.cuh).
using bulk::bar_expect;
using bulk::bar_init;
using bulk::bar_wait;
using bulk::bulk_g2s;

/// kF16 false: every code to bf16 by masks and shifts (value · 2^-120; Q · 2^60, P · 2^90); true:
/// the codes to f16 by cvt.rn.f16x2.e4m3x2 (exact), Q in f16 times a power of two that puts its
/// largest value in [2^13, 2^14), P in f16 (the softmax weight times the position's V scale over the
/// largest V scale of the warp's first step, at most 65504).
template <typename T, int HD, int kBps, bool kF16, bool kBulk>
__global__ void __launch_bounds__(kThreads, kBps) decode_fp8_async_kernel(const decode::Params p, const Fp8Layout f) {
  using S = Stage<HD, kBps, kBulk>;
  static_assert(!kBulk || HD == 128, "the bulk ring is built for head_dim 128");
  constexpr int kStages = S::kStages;
  constexpr int kWarps = kThreads / 32, kG = decode::kMmaHeads;
  constexpr int kKV = HD / 64, kKS = HD / 16, kMT = HD / 16;
  constexpr int kChunks = HD / 16;  // 16-byte chunks of a row of codes
  constexpr int kLd = HD + 4;
  extern __shared__ __align__(16) unsigned char stage_smem[];
  __shared__ float sm_m[kWarps][kG], sm_l[kWarps][kG];
  __shared__ __align__(8) uint64_t bars[kWarps][kBulk ? kStages : 1];  // kBulk: a stage's copies landed
  float* sm_o = reinterpret_cast<float*>(stage_smem);  // [kWarps * kG][kLd], after the loop

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int t_begin = split * p.split_len;
  const int ctx = p.context_lens[s];
  if (t_begin >= ctx) return;  // uniform over the block
  const int t_end = min(ctx, t_begin + p.split_len);
  const int row = p.query_start ? __ldg(p.query_start + s + 1) - 1 : s;
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  // Q of head g as the A operand: times 2^60 in bf16 (attention_decode_fp8_mma.cu's packing), or
  // (kF16) times q_mul in f16, dims d, d + 1 | d + 2, d + 3 as the cvt's pairs.
  using OT = std::conditional_t<kF16, __half, bf16>;  // the operands' type
  uint32_t qa[kKS][2];
  float q_mul = kTwoPow60;
  {
    const int hq = sub * kG + g;
    float qf[kKV][16];
    const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * p.group + hq) * HD + i * 16;
#pragma unroll
    for (int v = 0; v < kKV; ++v) {
      float q0[8], q1[8];
      if (hq < p.group) {
        unpack8<T>(*reinterpret_cast<const Vec8*>(qp + v * 64), q0);
        unpack8<T>(*reinterpret_cast<const Vec8*>(qp + v * 64 + 8), q1);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) q0[e] = q1[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[v][e] = q0[e], qf[v][8 + e] = q1[e];
    }
    if constexpr (kF16) {  // the same power of two for every warp (each holds the same Q)
      float mx = 0.0f;
#pragma unroll
      for (int v = 0; v < kKV; ++v)
#pragma unroll
        for (int e = 0; e < 16; ++e) mx = fmaxf(mx, fabsf(qf[v][e]));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      int ex = 0;
      frexpf(mx, &ex);  // mx < 2^ex
      q_mul = mx > 0.0f ? ldexpf(1.0f, 14 - ex) : 1.0f;
    }
#pragma unroll
    for (int v = 0; v < kKV; ++v)
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float* q = qf[v] + 4 * w;
        if constexpr (kF16) {
          qa[v * 4 + w][0] = pack2<OT>(q[0] * q_mul, q[1] * q_mul);
          qa[v * 4 + w][1] = pack2<OT>(q[2] * q_mul, q[3] * q_mul);
        } else {
          qa[v * 4 + w][0] = pack2<OT>(q[0] * q_mul, q[2] * q_mul);
          qa[v * 4 + w][1] = pack2<OT>(q[1] * q_mul, q[3] * q_mul);
        }
      }
  }

  // This warp's steps: k-th at positions t_begin + (k·kWarps + warp)·16 + 0..15.
  const int n_steps = (t_end - t_begin + 15) / 16;
  const int my_steps = n_steps > warp ? (n_steps - warp + kWarps - 1) / kWarps : 0;  // uniform over the warp
  auto step_pos = [&](int k) { return t_begin + (k * kWarps + warp) * 16; };
  // Lane l (and l + 16) holds the slot of position l % 16 of the step issued next.
  auto lookup = [&](int k) {
    const int t = step_pos(k) + (lane & 15);
    return k < my_steps && t < t_end ? int(decode::kv_slot(p, s, table_row, t)) : 0;
  };
  // Steps whose 16 positions are 16 consecutive slots (naive layouts; paged blocks a multiple of
  // 16): lane j holds the first slot of step w0 + j for two windows of 32 steps, the second loaded
  // 32 steps before it is used, so no block-table load is waited for in the loop (ncu at d57ee6f9:
  // waits on it, long scoreboard, were the stall of most issue slots lost).
  const bool runs16 = p.kv.kind == KvLayoutKind::naive || p.kv.block_size % 16 == 0;  // uniform
  auto first_of = [&](int k) { return k < my_steps ? int(decode::kv_slot(p, s, table_row, step_pos(k))) : 0; };
  int w0 = 0, win_a = 0, win_b = 0;
  if (runs16) {
    win_a = first_of(lane);
    win_b = first_of(32 + lane);
  }
  // This lane's slot (row lane % 16) of step k, asked for k = 0, 1, 2, ... in order.
  auto slot_for = [&](int k) {
    if (!runs16) return lookup(k);
    if (k >= w0 + 32) {  // into the next window: load the one after it
      win_a = win_b;
      win_b = first_of(w0 + 64 + lane);
      w0 += 32;
    }
    const int first = __shfl_sync(0xffffffffu, win_a, k - w0);
    return k < my_steps && step_pos(k) + (lane & 15) < t_end ? first + (lane & 15) : first;
  };
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  unsigned char* wbase = stage_smem + warp * S::kWarpBytes;
  const uint32_t wsm = smem_u32(wbase);
  const uint32_t wbar = smem_u32(&bars[warp][0]);
  if constexpr (kBulk) {
    if (lane == 0) {
      for (int st = 0; st < kStages; ++st) bar_init(wbar + 8 * st);
      bulk::bar_init_fence();
    }
    __syncwarp();
  }
  // The copies of step k into its stage (slot: this lane's lookup of it; cp.async: rows past the
  // split or past the warp's steps zero-filled).
  auto issue = [&](int k, int slot_l) {
    const uint32_t s0 = wsm + (k % kStages) * S::kBytes;
    const int t0 = step_pos(k);
    const bool live = k < my_steps;
    if constexpr (kBulk) {  // a step is a whole page's run of this head (the launcher's condition)
      const int first = __shfl_sync(0xffffffffu, slot_l, 0);
      if (live && lane == 0) {
        const uint32_t bar = wbar + 8 * (k % kStages);
        const int64_t at = f.codes_at(first, kvh);
        bar_expect(bar, 2 * S::kKRun);
        bulk_g2s(s0, kbase + at, S::kKRun, bar);
        bulk_g2s(s0 + S::kVAt, vbase + at, S::kKRun, bar);
      }
      return;
    }
    // A whole page in slot order (paged blocks of 16 or more, a step on a block boundary): the
    // head's 16 rows are one run of bytes, addressed without a shuffle a chunk.
    const int first = __shfl_sync(0xffffffffu, slot_l, 0);
    const bool page = __all_sync(0xffffffffu, slot_l == first + (lane & 15)) && first % kFp8KvPageSlots == 0;
    const int64_t page_at = f.codes_at(first, kvh);
#pragma unroll
    for (int j = 0; j < 16 * kChunks / 32; ++j) {
      const int c = lane + 32 * j, r = c / kChunks, ch = c % kChunks;
      const bool ok = live && t0 + r < t_end;
      int64_t at;
      if (page) at = page_at + c * 16;  // warp-uniform branch
      else at = f.codes_at(__shfl_sync(0xffffffffu, slot_l, r), kvh) + ch * 16;
      cp_async16(s0 + k_chunk<HD>(r, ch), kbase + at, ok);
      cp_async16(s0 + S::kKBytes + v_chunk<HD>(r, ch), vbase + at, ok);
    }
    const int r = lane & 15;
    const bool ok = live && t0 + r < t_end;
    cp_async4(s0 + S::kKBytes + S::kVBytes + lane * 4, (lane < 16 ? kbase : vbase) + f.scale_at(slot_l, kvh), ok);
  };

  float m = -1e30f, l = 0.0f;
  float acc[kMT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  const float k_mul = p.scale_log2 * (kF16 ? 1.0f / q_mul : kTwoPow60);
  float v_ref = 0.0f, v_mul = kTwoPow90;  // kF16: set at the warp's first step

#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {  // the ring's first kStages - 1 steps
    issue(k, slot_for(k));
    cp_async_commit();
  }
  int next_slot = slot_for(kStages - 1);
  for (int k = 0; k < my_steps; ++k) {
    issue(k + kStages - 1, next_slot);  // into the stage step k - 1 read (a __syncwarp ago)
    cp_async_commit();
    next_slot = slot_for(k + kStages);  // a block-table load (bs < 16) overlaps this step's products
    const int t0 = step_pos(k);
    unsigned char* sb = wbase + (k % kStages) * S::kBytes;
    // V row r's chunk c (16 bytes) and V scale of position t in this stage.
    // kBulk: V rows unswizzled, so a V read (rows 2i.., chunk g) meets 4-way bank conflicts;
    // measured cheaper than the 11 copies a step that padded pairs of rows took (the header).
    auto v_at = [&](int r, int c) { return kBulk ? S::kVAt + r * HD + c * 16 : S::kKBytes + v_chunk<HD>(r, c); };
    auto v_scale_at = [&](int t) { return kBulk ? S::kVAt + 16 * HD + t * 4 : S::kKBytes + S::kVBytes + 64 + t * 4; };
    auto v_scale = [&](int t) { return *reinterpret_cast<const float*>(sb + v_scale_at(t)); };
    if constexpr (kBulk) {
      bar_wait(wbar + 8 * (k % kStages), (k / kStages) & 1);
      if (t0 + 16 > t_end) {  // the split's partial last step: the page's rows past it read as zeros
        const int nv = t_end - t0;
        for (int c = lane; c < (16 - nv) * kChunks; c += 32) *reinterpret_cast<uint4*>(sb + v_at(nv + c / kChunks, c % kChunks)) = make_uint4(0, 0, 0, 0);
        if (lane < 16 - nv) *reinterpret_cast<float*>(sb + v_scale_at(nv + lane)) = 0.0f;
        __syncwarp();
      }
    } else {
      cp_async_wait<kStages - 1>();  // this lane's copies of step k have landed
      __syncwarp();                  // and every lane's
    }
    const float* ksc = reinterpret_cast<const float*>(sb + (kBulk ? 16 * HD : S::kKBytes + S::kVBytes));

    // S = Q·Kᵀ: sc[tt][0..1] = head g × positions 8tt + 2i, 8tt + 2i + 1 (c2, c3: the zero rows).
    float sc[2][4];
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {
      sc[tt][0] = sc[tt][1] = sc[tt][2] = sc[tt][3] = 0.0f;
      Vec8 xs[kKV];
      if constexpr (kBulk) {
        // Unswizzled rows: odd rows read their two chunks in the other order, so the 8 lanes of a
        // quarter-warp cover the 32 banks; the pair is put back in dims order after.
        static_assert(kKV == 2, "head_dim 128");
        const bool odd = g & 1;
        const unsigned char* kr = sb + (tt * 8 + g) * HD + i * 16;
        const Vec8 a0 = *reinterpret_cast<const Vec8*>(kr + (odd ? 64 : 0));
        const Vec8 a1 = *reinterpret_cast<const Vec8*>(kr + (odd ? 0 : 64));
        xs[0] = odd ? a1 : a0;
        xs[1] = odd ? a0 : a1;
      } else {
#pragma unroll
        for (int v = 0; v < kKV; ++v) xs[v] = *reinterpret_cast<const Vec8*>(sb + k_chunk<HD>(tt * 8 + g, i + 4 * v));
      }
#pragma unroll
      for (int v = 0; v < kKV; ++v) {
        const Vec8 x = xs[v];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t wd = decode::word(x, w);
          mma_16816<OT>(sc[tt], qa[v * 4 + w][0], 0u, qa[v * 4 + w][1], 0u, code_pair<kF16, false>(wd), code_pair<kF16, true>(wd));
        }
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int tt = 0; tt < 2; ++tt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = tt * 8 + 2 * i + e;
        const float x = t0 + t < t_end ? sc[tt][e] * (ksc[t] * k_mul) : -INFINITY;
        sc[tt][e] = x;
        mx = fmaxf(mx, x);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    if (__any_sync(0xffffffffu, m_new > m)) {  // a new running max somewhere: rescale (else every factor is 1)
      const float corr = exp2f(m - m_new);
      m = m_new;
      l *= corr;
      const float corr_a = __shfl_sync(0xffffffffu, corr, 8 * i), corr_b = __shfl_sync(0xffffffffu, corr, 8 * i + 4);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        acc[mt][0] *= corr_a;
        acc[mt][2] *= corr_a;
        acc[mt][1] *= corr_b;
        acc[mt][3] *= corr_b;
      }
    }
    if constexpr (kF16) {
      if (k == 0) {  // the largest V scale of this warp's first step (positions past the split: 0)
        float r = t0 + (lane & 15) < t_end ? v_scale(lane & 15) : 0.0f;
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, o));
        v_ref = r > 0.0f ? r : 1.0f;
        v_mul = 1.0f / v_ref;
      }
    }
    float pv[2][2];
#pragma unroll
    for (int tt = 0; tt < 2; ++tt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pr = exp2f(sc[tt][e] - m);
        l += pr;
        pv[tt][e] = pr * (v_scale(tt * 8 + 2 * i + e) * v_mul);
        if constexpr (kF16) pv[tt][e] = fminf(pv[tt][e], 65504.0f);
      }
    const uint32_t b0 = pack2<OT>(pv[0][0], pv[0][1]), b1 = pack2<OT>(pv[1][0], pv[1][1]);
    // This lane's HD/8 codes of the V rows of positions 2i, 2i+1, 8+2i, 9+2i.
    uint32_t vr[4][HD / 32];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int vrow = (r >> 1) * 8 + 2 * i + (r & 1);
      if constexpr (HD == 128) {
        const Vec8 x = *reinterpret_cast<const Vec8*>(sb + v_at(vrow, g));
        vr[r][0] = x.x;
        vr[r][1] = x.y;
        vr[r][2] = x.z;
        vr[r][3] = x.w;
      } else {  // 8 bytes: half (g & 1) of chunk g / 2
        const uint2 x = *reinterpret_cast<const uint2*>(sb + S::kKBytes + v_chunk<HD>(vrow, g >> 1) + (g & 1) * 8);
        vr[r][0] = x.x;
        vr[r][1] = x.y;
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      // A dim's bytes of positions (2i, 2i + 1) into one operand pair: next to each other for the
      // cvt (kF16), two apart for the masks.
      const uint32_t sel = kF16 ? ((mt & 1) ? 0x7362u : 0x5140u) : ((mt & 1) ? 0x7632u : 0x5410u);
      const uint32_t y01 = __byte_perm(vr[0][mt / 2], vr[1][mt / 2], sel);
      const uint32_t y23 = __byte_perm(vr[2][mt / 2], vr[3][mt / 2], sel);
      mma_16816<OT>(acc[mt], code_pair<kF16, false>(y01), code_pair<kF16, true>(y01), code_pair<kF16, false>(y23),
                    code_pair<kF16, true>(y23), b0, b1);
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the output tile reuses it

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (i == 0) {
    sm_m[warp][g] = m;
    sm_l[warp][g] = l;
  }
  const float o_mul = kF16 ? v_ref : kTwoPow30;  // the codes' and P's factors undone
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int d = g * (HD / 8) + 2 * mt;
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i) * kLd + d]) = make_float2(acc[mt][0] * o_mul, acc[mt][2] * o_mul);
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i + 1) * kLd + d]) = make_float2(acc[mt][1] * o_mul, acc[mt][3] * o_mul);
  }
  __syncthreads();
  decode::finish_block<T, HD, kG, kWarps, kLd>(p, sm_m, sm_l, sm_o, s, row, kvh, sub, split, ctx);
}

template <typename T, int HD, int kBps, bool kF16, bool kBulk = false>
void launch(const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  constexpr int bytes = Stage<HD, kBps, kBulk>::kBlockBytes;
  static std::atomic<uint64_t> raised{0};
  once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_fp8_async_kernel<T, HD, kBps, kF16, kBulk>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
  decode_fp8_async_kernel<T, HD, kBps, kF16, kBulk><<<grid, kThreads, bytes, stream>>>(p, f);
  CUDA_CHECK_LAUNCH();
}

template <typename T, int HD>
void launch_bps(int bps, bool f16, bool bulk, const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  if constexpr (HD == 128)
    if (bulk && f16 && bps == 4) return launch<T, HD, 4, true, true>(p, f, grid, stream);
  if (bulk) throw std::invalid_argument("decode_attention_fp8: the bulk ring is built for head_dim 128, f16, 4 blocks an SM");
  if (!f16 && bps == 2) return launch<T, HD, 2, false>(p, f, grid, stream);
  if (!f16 && bps == 3) return launch<T, HD, 3, false>(p, f, grid, stream);
  if (!f16 && bps == 4) return launch<T, HD, 4, false>(p, f, grid, stream);
  if (f16 && bps == 4) return launch<T, HD, 4, true>(p, f, grid, stream);
  throw std::invalid_argument("decode_attention_fp8: cp.async ring for " + std::to_string(bps) + " blocks an SM" +
                              (f16 ? " with f16 operands" : "") + " not built (2, 3, 4; f16: 4)");
}

template <typename T>
void launch_hd(int hd, int bps, bool f16, bool bulk, const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  if (hd == 64) return launch_bps<T, 64>(bps, f16, bulk, p, f, grid, stream);
  if (hd == 128) return launch_bps<T, 128>(bps, f16, bulk, p, f, grid, stream);
  throw std::invalid_argument("decode_attention_fp8: tensor cores need head_dim 64 or 128 (got " + std::to_string(hd) + ")");
}

}  // namespace async_detail

void launch_decode_fp8_async(ScalarType dtype, int head_dim, int blocks_per_sm, bool f16, bool bulk, const decode::Params& p,
                             const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  using namespace async_detail;
  SERVELAB_DISPATCH_16(dtype, (launch_hd<__nv_bfloat16>(head_dim, blocks_per_sm, f16, bulk, p, f, grid, stream)),
                       (launch_hd<__half>(head_dim, blocks_per_sm, f16, bulk, p, f, grid, stream)));
}

}  // namespace servelab::kernels::decode_fp8
