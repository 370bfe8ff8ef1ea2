#pragma once
// Decode attention on tensor cores for GQA (group >= 2): a block owns one KV head of one sequence
// over one split, for up to 8 query heads of its group (rows 0-7 of the m16 tile; rows 8-15 zero).
// Each of the 4 warps takes 16-position steps (kS per pass, interleaved with the other warps) and
// loads them straight from the cache into mma.sync fragments, no shared memory:
//   S = Q·Kᵀ   m16n8k16, A = Q (heads × dims), B = Kᵀ (dims × 8 positions), two n-tiles a step;
//   Oᵀ += Vᵀ·Pᵀ m16n8k16, A = Vᵀ (16 dims × 16 positions), B = Pᵀ = the S accumulators as they lie.
// The sums over head_dim (Q·K) and over positions (P·V) are permuted so that every lane's loads
// are whole 16-byte vectors, coalesced in 64-byte (K) and 128-byte (V) runs per row:
//   K row of position `g` (lane / 4) of a tile: lane quad i (lane % 4) loads vectors v*4 + i;
//     k-step j uses words (j%2)*2, (j%2)*2 + 1 of vector j/2 (Q loaded the same way);
//   V rows of positions 2i, 2i+1, 2i+8, 2i+9 of a step: lane g loads vectors v*8 + g; m-tile mt
//     uses word mt%4 of vector mt/4: rows g / g+8 of the tile are its low / high 16-bit halves,
//     paired over two positions with one byte permute.
// Oᵀ's accumulators give lane (g, i) heads 2i, 2i+1; their softmax rescaling comes from the lanes
// that own those heads' scores (two shuffles a pass). fp32 accumulation; P rounded to T for P·V.
#include <type_traits>

#include "kernels/attention_decode_common.cuh"
#include "kernels/mma_util.cuh"

namespace servelab::kernels::decode {

constexpr int kMmaHeads = 8;  // query heads per block on the tensor-core path

__device__ __forceinline__ uint32_t word(const Vec8& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

/// kS: 16-position steps per warp per pass (all loaded before any is used). kCluster: launched in
/// clusters of (1, 1, n_splits), the splits merged in distributed shared memory
/// (finish_cluster_push); otherwise one split writes the output, several go through the workspace
/// (finish_block).
/// kPipe: the next pass's K loads are issued right after this pass's Q·Kᵀ (the K registers are
/// free then) and each step's V loads right after its P·V, so a pass's loads are in flight while
/// the previous pass computes, in the same registers; the block-table lookup runs a pass ahead.
/// Either way the same arithmetic in the same order: the same bits.
/// K/V loads carry the L2::256B prefetch-size hint (load_kv; measured neutral, kernels/README.md).
template <typename T, int HD, int kS, bool kCluster, bool kPipe>
__global__ void __launch_bounds__(kThreads, kS >= 2 ? 2 : 3) decode_mma_kernel(const Params p) {
  static_assert(HD % 64 == 0, "tensor-core decode needs head_dim 64 or 128");
  constexpr int kWarps = kThreads / 32, kG = kMmaHeads;
  constexpr int kKV = HD / 32;  // K vectors per row per lane
  constexpr int kVV = HD / 64;  // V vectors per row per lane
  constexpr int kKS = HD / 16;  // k-steps of Q·Kᵀ
  constexpr int kMT = HD / 16;  // m-tiles of Oᵀ
  constexpr int kPass = kWarps * kS * 16;
  constexpr int kLd = HD + 4;   // padded rows: fewer bank conflicts when the warps store Oᵀ
  __shared__ float sm_m[kWarps][kG], sm_l[kWarps][kG];
  __shared__ __align__(16) float sm_o[kWarps * kG * kLd];

  pdl_wait();  // q and this step's K/V are the previous kernel's (launched with PDL: attention_decode.cu)
  if (p.pdl_trigger == 1) pdl_launch_dependents();
  if constexpr (kCluster) cluster_arrive_relaxed();  // this block runs: the others may store into its shared memory
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int t_begin = split * p.split_len;
  // Lane l looks up position pos(l) of the pass: step l / 16 of this warp, position l % 16. The
  // first lookup is issued before the context length arrives (clamped to the table row, used only
  // inside the context); each later one while an earlier pass's loads are in flight. The query
  // row and Q are read before the context length is known too (none depends on it).
  auto pos = [&](int base, int l_) { return base + ((l_ >> 4) * kWarps + warp) * 16 + (l_ & 15); };
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);
  int my_slot;
  {
    const int t = pos(t_begin, lane);
    my_slot = (lane >> 4) < kS && t < t_begin + p.split_len ? int(kv_slot(p, s, table_row, t, true)) : 0;
  }
  const int row = p.query_start ? __ldg(p.query_start + s + 1) - 1 : s;

  // Q of head g as the A operand (row g; rows g + 8 are zero).
  uint32_t qa[kKS][2];
  {
    const int hq = sub * kG + g;
    const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * p.group + hq) * HD;
#pragma unroll
    for (int v = 0; v < kKV; ++v) {
      const Vec8 x = hq < p.group ? *reinterpret_cast<const Vec8*>(qp + (v * 4 + i) * 8) : make_uint4(0, 0, 0, 0);
      qa[2 * v][0] = x.x;
      qa[2 * v][1] = x.y;
      qa[2 * v + 1][0] = x.z;
      qa[2 * v + 1][1] = x.w;
    }
  }
  const int ctx = p.context_lens[s];
  if (!kCluster && t_begin >= ctx) return;  // uniform over the block (in a cluster: an empty part)
  const int t_end = min(ctx, t_begin + p.split_len);

  float m = -1e30f, l = 0.0f;  // head g: running max (log2 units; same in the 4 lanes of a quad), lane's sum
  float acc[kMT][4];           // Oᵀ: [m-tile][c0..c3] = dims (g | g+8 rows) × heads 2i, 2i+1
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;

  const char* kbase = static_cast<const char*>(p.k_cache) + int64_t(kvh) * HD * int64_t(sizeof(T));
  const char* vbase = static_cast<const char*>(p.v_cache) + int64_t(kvh) * HD * int64_t(sizeof(T));
  const int64_t row_bytes = p.kv_row * int64_t(sizeof(T));
  Vec8 kr[kS][2][kKV], vr[kS][4][kVV];
  // Step u of the pass at `b`, slots from lane-held `sl` (whole warp, uniform).
  auto load_k = [&](int u, int b, int sl) {
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {  // K rows: positions g and 8 + g of the step
      const int src = u * 16 + tt * 8 + g;
      const int slot = __shfl_sync(0xffffffffu, sl, src);
      const bool ok = pos(b, src) < t_end;
      const char* kp = kbase + int64_t(slot) * row_bytes + i * 16;
#pragma unroll
      for (int v = 0; v < kKV; ++v) kr[u][tt][v] = ok ? load_kv(kp + v * 64) : make_uint4(0, 0, 0, 0);
    }
  };
  auto load_v = [&](int u, int b, int sl) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // V rows: positions 2i, 2i+1, 8+2i, 9+2i of the step
      const int src = u * 16 + (r >> 1) * 8 + 2 * i + (r & 1);
      const int slot = __shfl_sync(0xffffffffu, sl, src);
      const bool ok = pos(b, src) < t_end;
      const char* vp = vbase + int64_t(slot) * row_bytes + g * 16;
#pragma unroll
      for (int v = 0; v < kVV; ++v) vr[u][r][v] = ok ? load_kv(vp + v * 128) : make_uint4(0, 0, 0, 0);
    }
  };
  auto lookup = [&](int b) {
    const int t = pos(b, lane);
    return (lane >> 4) < kS && t < t_end ? int(kv_slot(p, s, table_row, t)) : 0;
  };
  if constexpr (kPipe) {
#pragma unroll
    for (int u = 0; u < kS; ++u) {
      load_k(u, t_begin, my_slot);
      load_v(u, t_begin, my_slot);
    }
    my_slot = lookup(t_begin + kPass);
  }
  for (int base = t_begin; base < t_end; base += kPass) {  // uniform trip count: shuffles are safe
    const int nb = base + kPass;
    const bool more = kPipe && nb < t_end;  // uniform
    int slot_after = 0;
    if constexpr (!kPipe) {
#pragma unroll
      for (int u = 0; u < kS; ++u) {
        load_k(u, base, my_slot);
        load_v(u, base, my_slot);
      }
      my_slot = lookup(nb);
    } else {
      slot_after = lookup(nb + kPass);
    }
    // S = Q·Kᵀ: sc[u][tt][0..1] = head g × positions 2i, 2i+1 of tile tt (c2, c3: the zero rows).
    float sc[kS][2][4];
#pragma unroll
    for (int u = 0; u < kS; ++u)
#pragma unroll
      for (int tt = 0; tt < 2; ++tt) {
        sc[u][tt][0] = sc[u][tt][1] = sc[u][tt][2] = sc[u][tt][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < kKS; ++j)
          mma_16816<T>(sc[u][tt], qa[j][0], 0u, qa[j][1], 0u, word(kr[u][tt][j / 2], (j % 2) * 2),
                       word(kr[u][tt][j / 2], (j % 2) * 2 + 1));
      }
    if (more) {
#pragma unroll
      for (int u = 0; u < kS; ++u) load_k(u, nb, my_slot);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < kS; ++u)
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool ok = pos(base, u * 16 + tt * 8 + 2 * i + e) < t_end;
          const float x = ok ? sc[u][tt][e] * p.scale_log2 : -INFINITY;
          sc[u][tt][e] = x;
          mx = fmaxf(mx, x);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float corr = exp2f(m - m_new);
    m = m_new;
    l *= corr;
    // Oᵀ columns are heads 2i and 2i + 1: their factors live in lanes (2i) * 4 and (2i + 1) * 4.
    const float corr_a = __shfl_sync(0xffffffffu, corr, 8 * i), corr_b = __shfl_sync(0xffffffffu, corr, 8 * i + 4);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      acc[mt][0] *= corr_a;
      acc[mt][2] *= corr_a;
      acc[mt][1] *= corr_b;
      acc[mt][3] *= corr_b;
    }
#pragma unroll
    for (int u = 0; u < kS; ++u) {
      float pr[2][2];
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          pr[tt][e] = exp2f(sc[u][tt][e] - m);
          l += pr[tt][e];
        }
      const uint32_t b0 = pack2<T>(pr[0][0], pr[0][1]), b1 = pack2<T>(pr[1][0], pr[1][1]);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int v = mt / 4, w = mt % 4;
        const uint32_t x0 = word(vr[u][0][v], w), x1 = word(vr[u][1][v], w);
        const uint32_t x2 = word(vr[u][2][v], w), x3 = word(vr[u][3][v], w);
        mma_16816<T>(acc[mt], __byte_perm(x0, x1, 0x5410), __byte_perm(x0, x1, 0x7632), __byte_perm(x2, x3, 0x5410),
                     __byte_perm(x2, x3, 0x7632), b0, b1);
      }
      if (more) load_v(u, nb, my_slot);
    }
    if constexpr (kPipe) my_slot = slot_after;
  }

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (i == 0) {
    sm_m[warp][g] = m;
    sm_l[warp][g] = l;
  }
  // acc[mt][0 | 2] = head 2i at dims d, d + 1 with d = (v*8 + g)*8 + 2w; [1 | 3] = head 2i + 1.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int d = ((mt / 4) * 8 + g) * 8 + (mt % 4) * 2;
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i) * kLd + d]) = make_float2(acc[mt][0], acc[mt][2]);
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i + 1) * kLd + d]) = make_float2(acc[mt][1], acc[mt][3]);
  }
  __syncthreads();
  if (p.pdl_trigger == 2) pdl_launch_dependents();
  if constexpr (kCluster)
    finish_cluster_push<T, HD, kG, kWarps, kLd>(p, sm_m, sm_l, sm_o, row, kvh, sub);
  else
    finish_block<T, HD, kG, kWarps, kLd>(p, sm_m, sm_l, sm_o, s, row, kvh, sub, split, ctx);
}

}  // namespace servelab::kernels::decode
