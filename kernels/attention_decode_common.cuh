#pragma once
// Pieces shared by the two decode-attention kernels (attention_decode.cu: CUDA cores;
// attention_decode_mma.cuh: tensor cores): the launch parameters, the slot lookup, and the end of
// a block: merge its partial softmax states, then either write the output (one split) or store a
// split partial, and let the last block of a (sequence, KV head) to finish merge the splits.
//
// Split merge in one launch: each block of a split context writes its normalized output and
// (max, sum) to the workspace, then __threadfence + atomicAdd on a counter per (sequence, block
// column) (with Params::release_arrive: a block barrier and one acq_rel atomic). The block that brings the counter to the sequence's split count merges the partials in
// split order (fixed, so the result is reproducible and, with a fixed split length, independent of
// the batch) and sets the counter back to 0, so the next launch (or a CUDA graph replay) finds it
// zero. The counters live at the end of the workspace (decode_workspace_layout) and must be zero
// before the first launch on a fresh workspace.
#include <cooperative_groups.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/step_input.h"

namespace servelab::kernels::decode {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMergeChunk = 64;  // splits whose weights sit in shared memory at once (last-block merge)

struct Params {
  const void* q;
  int64_t q_row_stride;
  const int32_t* query_start;
  const void* k_cache;
  const void* v_cache;
  int64_t kv_row;  // n_kv_heads * head_dim
  int n_heads, group, n_sub;
  const int32_t* context_lens;
  KvAddressing kv;
  float scale_log2;
  void* out;
  int64_t out_row_stride;
  int split_len, max_splits;
  int bs_shift;  // paged with a power-of-two block size: log2(block_size) (shift and mask); else -1
  bool partial;  // splits merged through the workspace by their last block
  bool cluster;  // splits merged through distributed shared memory: one thread-block cluster per column
  float* ws_o;       // [n_seqs, n_heads, max_splits, HD]
  float* ws_ml;      // [n_seqs, n_heads, max_splits, 2]
  int32_t* counters; // [n_seqs, gridDim.x], zero between launches
  bool release_arrive;  // DecodeAttentionArgs::release_arrive: one acq_rel atomic instead of the fences
  int pdl_trigger;      // DecodeAttentionArgs::pdl: 1 dependents launched at the top, 2 before the merge
};

/// Read-only 16-byte load of K/V, no L1 allocation, with the L2::256B prefetch-size hint (a miss
/// fetches the aligned 256 bytes around the address: a KV head's whole row at head_dim 128, of
/// which one instruction reads 64 or 128 bytes). Measured neutral against plain loads (H100,
/// results/gpu/decode-attn-2026-11-24-h100-6c54dd2/: the nohint column), kept as the default.
__device__ __forceinline__ Vec8 load_kv(const void* p) {
  return load_stream_256(p);
}

/// Arena slot of position t of sequence s, whose block-table row is `row` (KvAddressing::slot
/// without a division for power-of-two block sizes; block-table entries read through the
/// read-only path; the row looked up once per CUDA block, see KvAddressing::block_table_rows).
/// With `clamp`, a block index past the table row reads its last entry (a lookup issued before the
/// context length is known; its slot is used only for positions inside the context).
__device__ __forceinline__ int64_t kv_slot(const Params& p, int s, int64_t row, int t, bool clamp = false) {
  if (p.kv.kind == KvLayoutKind::naive) return __ldg(p.kv.base_slots + s) + t;
  int blk, off;
  if (p.bs_shift >= 0) {
    blk = t >> p.bs_shift;
    off = t & ((1 << p.bs_shift) - 1);
  } else {
    blk = t / p.kv.block_size;
    off = t - blk * p.kv.block_size;
  }
  if (clamp) blk = min(blk, int(p.kv.block_table_stride) - 1);
  return int64_t(__ldg(p.kv.block_tables + row * p.kv.block_table_stride + blk)) * p.kv.block_size + off;
}

/// The last block of (sequence s, block column blockIdx.x) merges the n split partials of its G
/// heads in split order: each warp turns the (max, sum) of its heads' splits into weights
/// l_i * 2^(m_i - max) in shared memory, kMergeChunk splits at a time (one pass over the
/// statistics when n <= kMergeChunk), then each thread sums float4 columns of the normalized
/// outputs (loads bypass L1: other blocks wrote them).
template <typename T, int HD, int G>
__device__ __forceinline__ void merge_splits(const Params& p, int s, int row, int kvh, int sub, int n) {
  constexpr int kWarps = kThreads / 32, kR = (G + kWarps - 1) / kWarps, kC = kMergeChunk / 32;
  __shared__ float sm_max[G], sm_w[G][kMergeChunk];
  constexpr int kCols = G * HD / 4, kPer = (kCols + kThreads - 1) / kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  auto base_of = [&](int g) { return (int64_t(s) * p.n_heads + kvh * p.group + sub * G + g) * p.max_splits; };
  auto valid = [&](int g) { return g < G && sub * G + g < p.group; };
  const bool one_chunk = n <= kMergeChunk;
  if (!one_chunk) {  // the maximum over every split first
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int g = warp + r * kWarps;
      float mx = -1e30f;
      if (valid(g))
        for (int i = lane; i < n; i += 32) mx = fmaxf(mx, __ldcg(p.ws_ml + (base_of(g) + i) * 2));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      if (lane == 0 && g < G) sm_max[g] = mx;
    }
  }
  float4 acc[kPer];
  float wsum[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    wsum[k] = 0.f;
  }
  for (int c0 = 0; c0 < n; c0 += kMergeChunk) {
    __syncthreads();  // sm_max written; the previous chunk's weights consumed
    float2 ml[kR][kC];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int g = warp + r * kWarps;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int i = c0 + lane + 32 * c;
        ml[r][c] = valid(g) && i < n ? __ldcg(reinterpret_cast<const float2*>(p.ws_ml + (base_of(g) + i) * 2))
                                     : make_float2(-1e30f, 0.f);
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int g = warp + r * kWarps;
      float mx;
      if (one_chunk) {
        mx = ml[r][0].x;
#pragma unroll
        for (int c = 1; c < kC; ++c) mx = fmaxf(mx, ml[r][c].x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      } else {
        mx = g < G ? sm_max[g] : 0.f;
      }
      if (g < G)
#pragma unroll
        for (int c = 0; c < kC; ++c) sm_w[g][lane + 32 * c] = ml[r][c].y * exp2f(ml[r][c].x - mx);
    }
    __syncthreads();
    const int cn = min(kMergeChunk, n - c0);
    const float4* src[kPer];
    int gk[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int col = tid + k * kThreads, g = min(col / (HD / 4), G - 1);
      gk[k] = g;
      src[k] = reinterpret_cast<const float4*>(p.ws_o + (base_of(g) + c0) * HD) + col % (HD / 4);
    }
    // All of a chunk's loads in flight at once where registers allow (16 splits: one round trip
    // instead of two at G >= 4; the CUDA-core kernel with G = 1 has a 72-register cap).
#pragma unroll(G >= 4 ? 16 : 8)
    for (int i = 0; i < cn; ++i) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int col = tid + k * kThreads;
        if (col < kCols && valid(gk[k])) {
          const float w = sm_w[gk[k]][i];
          const float4 v = __ldcg(src[k] + int64_t(i) * (HD / 4));
          wsum[k] += w;
          acc[k].x = fmaf(w, v.x, acc[k].x);
          acc[k].y = fmaf(w, v.y, acc[k].y);
          acc[k].z = fmaf(w, v.z, acc[k].z);
          acc[k].w = fmaf(w, v.w, acc[k].w);
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int col = tid + k * kThreads;
    if (col >= kCols) continue;
    const int g = col / (HD / 4), d = (col % (HD / 4)) * 4;
    if (!valid(g)) continue;
    const int h = kvh * p.group + sub * G + g;
    const float inv = 1.0f / wsum[k];
    T* o = static_cast<T*>(p.out) + row * p.out_row_stride + int64_t(h) * HD + d;
    o[0] = from_float<T>(acc[k].x * inv);
    o[1] = from_float<T>(acc[k].y * inv);
    o[2] = from_float<T>(acc[k].z * inv);
    o[3] = from_float<T>(acc[k].w * inv);
  }
}
/// One pass of the CUDA-core kernels' online softmax over kU positions, for N queries: rescales
/// m, l and acc to the pass's new maximum, then adds each position's V row (this lane's 8 dims)
/// weighted by 2^(score - m). sc: the pass's scores (log2 domain, -inf where masked).
template <typename T, int kU, int N>
__device__ __forceinline__ void online_softmax_pass(const float (&sc)[kU][N], const Vec8 (&kv_v)[kU], float (&m)[N],
                                                    float (&l)[N], float (&acc)[N][8]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float mx = sc[0][i];
#pragma unroll
    for (int u = 1; u < kU; ++u) mx = fmaxf(mx, sc[u][i]);
    const float m_new = fmaxf(m[i], mx);
    const float corr = exp2f(m[i] - m_new);
    m[i] = m_new;
    l[i] *= corr;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] *= corr;
  }
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    float vf[8];
    unpack8<T>(kv_v[u], vf);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float pr = exp2f(sc[u][i] - m[i]);
      l[i] += pr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(pr, vf[e], acc[i][e]);
    }
  }
}

/// Lane group lg's partial state into shared memory for block_stats / finish_block: its m and l
/// (lane c == 0 of the group) and this lane's 8 output dims (c * 8 ...). A lane group that saw none
/// of a query's positions has m = -1e30 and l = 0, so it weighs exactly 0 in the merge.
template <int kLg, int N, int HD>
__device__ __forceinline__ void store_lane_group(float (&sm_m)[kLg][N], float (&sm_l)[kLg][N], float (&sm_o)[kLg][N][HD],
                                                 int lg, int c, const float (&m)[N], const float (&l)[N],
                                                 const float (&acc)[N][8]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (c == 0) {
      sm_m[lg][i] = m[i];
      sm_l[lg][i] = l[i];
    }
    float4* o = reinterpret_cast<float4*>(&sm_o[lg][i][c * 8]);
    o[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    o[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}


/// The block's merged softmax state per head: sm_scale[i][g] = 2^(m_i - max), sm_stat[g] = (max,
/// sum), from its NL parts (sm_m/sm_l [NL][G], written before a __syncthreads). Ends synchronized.
template <int G, int NL>
__device__ __forceinline__ void block_stats(const float (*sm_m)[G], const float (*sm_l)[G], float (*sm_scale)[G],
                                            float (*sm_stat)[2]) {
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float mm = -1e30f;
#pragma unroll
    for (int i = 0; i < NL; ++i) mm = fmaxf(mm, sm_m[i][g]);
    float ll = 0.0f;
#pragma unroll
    for (int i = 0; i < NL; ++i) {
      const float w = exp2f(sm_m[i][g] - mm);
      sm_scale[i][g] = w;
      ll = fmaf(sm_l[i][g], w, ll);
    }
    sm_stat[g][0] = mm;
    sm_stat[g][1] = ll;
  }
  __syncthreads();
}

/// Cluster barrier halves (PTX barrier.cluster, sm_90): every thread of every block of the cluster
/// arrives, then waits for all. The relaxed arrive orders no memory (the kernel's first arrive: it
/// only tells the others that this block runs, so its shared memory may be written); the release
/// arrive and acquire wait order this thread's earlier shared-memory stores, remote ones included,
/// before the other blocks' later loads.
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

/// The end of a block in a cluster of the splits of one (sequence, block column), merged by
/// remote stores: the output's G * HD values are dealt in runs of
/// per = ceil(G * HD / cs) to the cs blocks (rank r merges run r). Each block stores its
/// normalized part of run q into block q's rx_part[r] and its (max, sum) into every block's
/// rx_stat[r], then one cluster barrier; each block then merges its run from its own shared
/// memory, in rank (split) order. Nothing is read remotely, so no block waits on another after the
/// barrier; blocks past a sequence's context contribute weight 0. (A merge by remote loads between
/// two barriers gave the same bits and was up to 2% slower at b8 x 1k x GQA 4 in three H100 runs:
/// removed.) The kernel must have called
/// cluster_arrive_relaxed() once at its start (before any early exit: none in a cluster).
template <typename T, int HD, int G, int NL, int LD>
__device__ __forceinline__ void finish_cluster_push(const Params& p, const float (*sm_m)[G], const float (*sm_l)[G],
                                                    const float* sm_o, int row, int kvh, int sub) {
  namespace cg = cooperative_groups;
  constexpr int kCs = kMaxClusterSplits;
  static_assert(kCs * G <= kThreads, "one thread per (rank, head) statistics store");
  __shared__ float sm_scale[NL][G], sm_stat[G][2];
  __shared__ __align__(16) float rx_stat[kCs][G][2];
  __shared__ float rx_part[G * HD + kCs];
  block_stats<G, NL>(sm_m, sm_l, sm_scale, sm_stat);
  cg::cluster_group cl = cg::this_cluster();
  const int cs = int(cl.num_blocks()), r = int(cl.block_rank());
  const int per = (G * HD + cs - 1) / cs;
  cluster_wait();  // the kernel's first arrive: every block of the cluster has started
  if (int(threadIdx.x) < cs * G) {
    const int q = threadIdx.x / G, g = threadIdx.x % G;
    float* dst = cl.map_shared_rank(&rx_stat[0][0][0], q);
    *reinterpret_cast<float2*>(dst + (r * G + g) * 2) = make_float2(sm_stat[g][0], sm_stat[g][1]);
  }
  constexpr int kPer = (G * HD + kThreads - 1) / kThreads;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    if (idx >= G * HD) continue;
    const int g = idx / HD, d = idx % HD;
    float oo = 0.0f;
#pragma unroll
    for (int i = 0; i < NL; ++i) oo = fmaf(sm_o[(i * G + g) * LD + d], sm_scale[i][g], oo);
    const float ll = sm_stat[g][1];
    const int q = idx / per;
    cl.map_shared_rank(rx_part, q)[r * per + idx - q * per] = ll > 0.0f ? oo / ll : 0.0f;
  }
  cluster_arrive();
  cluster_wait();
  for (int e = r * per + int(threadIdx.x); e < min((r + 1) * per, G * HD); e += kThreads) {
    const int g = e / HD, d = e % HD;
    if (sub * G + g >= p.group) continue;
    float mm = -1e30f;
    for (int q = 0; q < cs; ++q) mm = fmaxf(mm, rx_stat[q][g][0]);
    float ll = 0.0f, oo = 0.0f;
#pragma unroll 8
    for (int q = 0; q < cs; ++q) {
      const float w = rx_stat[q][g][1] * exp2f(rx_stat[q][g][0] - mm);
      ll += w;
      oo = fmaf(w, rx_part[q * per + e - r * per], oo);
    }
    const int h = kvh * p.group + sub * G + g;
    static_cast<T*>(p.out)[row * p.out_row_stride + int64_t(h) * HD + d] = from_float<T>(oo / ll);
  }
}

/// The end of a block: merges its NL partial softmax states per head (sm_m/sm_l [NL][G], sm_o
/// [NL][G][LD], written before a __syncthreads), then writes the output (one split) or the
/// split's partial; the last block of a split (sequence, block column) merges the splits.
template <typename T, int HD, int G, int NL, int LD>
__device__ __forceinline__ void finish_block(const Params& p, const float (*sm_m)[G], const float (*sm_l)[G],
                                             const float* sm_o, int s, int row, int kvh, int sub, int split,
                                             int ctx) {
  __shared__ float sm_scale[NL][G], sm_stat[G][2];
  block_stats<G, NL>(sm_m, sm_l, sm_scale, sm_stat);
  constexpr int kPer = (G * HD + kThreads - 1) / kThreads;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    const int g = idx / HD, d = idx % HD;
    if (idx >= G * HD || sub * G + g >= p.group) continue;
    float oo = 0.0f;
#pragma unroll
    for (int i = 0; i < NL; ++i) oo = fmaf(sm_o[(i * G + g) * LD + d], sm_scale[i][g], oo);
    const float mm = sm_stat[g][0], ll = sm_stat[g][1];
    const int h = kvh * p.group + sub * G + g;
    if (p.partial) {
      const int64_t ip = (int64_t(s) * p.n_heads + h) * p.max_splits + split;
      p.ws_o[ip * HD + d] = oo / ll;
      if (d == 0) *reinterpret_cast<float2*>(p.ws_ml + ip * 2) = make_float2(mm, ll);
    } else {
      static_cast<T*>(p.out)[row * p.out_row_stride + int64_t(h) * HD + d] = from_float<T>(oo / ll);
    }
  }
  if (!p.partial) return;
  __shared__ int last;
  const int n = (ctx + p.split_len - 1) / p.split_len;
  int32_t* c = p.counters + int64_t(s) * gridDim.x + blockIdx.x;
  if (p.release_arrive) {  // uniform over the grid
    // The barrier orders every thread's partial stores before thread 0's release (cumulative in
    // the PTX memory model); its acquire, then the barrier, orders the other blocks' partials
    // before this block's loads of them (the pattern of CUTLASS's generic barrier).
    __syncthreads();
    if (threadIdx.x == 0) {
      int old;
      asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(c) : "memory");
      last = old == n - 1;
      if (last) asm volatile("st.relaxed.gpu.global.s32 [%0], 0;\n" ::"l"(c) : "memory");  // ready for the next launch
    }
    __syncthreads();
    if (!last) return;
  } else {
    __threadfence();  // this block's partial is visible before its arrival is counted
    __syncthreads();
    if (threadIdx.x == 0) {
      last = atomicAdd(c, 1) == n - 1;
      if (last) atomicExch(c, 0);  // every block of this column has arrived: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
  }
  merge_splits<T, HD, G>(p, s, row, kvh, sub, n);
}

}  // namespace servelab::kernels::decode
