// Decode attention over several query rows per sequence (attention_decode_rows.h), on CUDA cores.
//
// Grid (n_kv_heads * n_sub, n_entries, n_splits): the block of a sequence's last row (spans > 0)
// computes kDecodeRowsQueries (row, head) pairs of one KV head over one split of the sequence's
// context; blocks of the other rows exit at once. The loop is attention_decode.cu's CUDA-core
// kernel (a lane group of HD / 8 threads holds a position's K and V row; kU passes loaded before
// use), with a per-pair context end: a pair's score at a position past its row is -inf, which adds
// exact zeros to its online softmax. Splits merge as in decode_attention: each block stores its
// normalized partial, the last block of a (sequence, block column) merges them in split order.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/attention_decode_common.cuh"
#include "kernels/attention_decode_rows.h"
#include "kernels/common.cuh"

namespace servelab::kernels {
namespace decode_rows {

constexpr int kThreads = decode::kThreads;

struct RowsParams {
  decode::Params p;
  const int32_t* spans;
};

/// kNq (row, head) pairs a block: 8 (two blocks an SM: ~244 registers) or 4 (four). A pair's
/// arithmetic does not depend on kNq, so neither do its bits.
template <typename T, int HD, int kNq>
__global__ void __launch_bounds__(kThreads, kNq >= 8 ? 2 : 4) rows_kernel(const RowsParams rp) {
  constexpr int kTpt = HD / 8, kLg = kThreads / kTpt, kU = 2;
  __shared__ float sm_m[kLg][kNq], sm_l[kLg][kNq];
  __shared__ __align__(16) float sm_o[kLg][kNq][HD];
  __shared__ float sm_scale[kLg][kNq], sm_stat[kNq][2];
  __shared__ int last;
  const decode::Params& p = rp.p;

  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int R = rp.spans[s];
  const int G = p.group;
  if (R <= 0 || sub * kNq >= R * G) return;  // not a sequence's last row, or no pair left: uniform
  const int ctx = p.context_lens[s];
  const int t_begin = split * p.split_len;
  if (t_begin >= ctx) return;
  const int t_end = min(ctx, t_begin + p.split_len);
  const int lg = threadIdx.x / kTpt, c = threadIdx.x % kTpt;
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  // Pair i of this block: row j = pi / G of the sequence (entry s - R + 1 + j), head g = pi % G.
  float qf[kNq][8];
  int pend[kNq];  // the pair's context end (0: no pair)
#pragma unroll
  for (int i = 0; i < kNq; ++i) {
    const int pi = sub * kNq + i, j = pi / G, g = pi % G;
    pend[i] = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) qf[i][e] = 0.0f;
    if (j < R) {
      const int ent = s - R + 1 + j;
      const int row = p.query_start ? p.query_start[ent + 1] - 1 : ent;
      pend[i] = ctx - R + 1 + j;
      const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * G + g) * HD + c * 8;
      unpack8<T>(*reinterpret_cast<const Vec8*>(qp), qf[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[i][e] *= p.scale_log2;
    }
  }
  float m[kNq], l[kNq], acc[kNq][8];
#pragma unroll
  for (int i = 0; i < kNq; ++i) {
    m[i] = -1e30f;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] = 0.0f;
  }
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  const int64_t col = (int64_t(kvh) * HD + c * 8) * int64_t(sizeof(T));
  int64_t slot[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int t = t_begin + u * kLg + lg;
    slot[u] = t < t_end ? decode::kv_slot(p, s, table_row, t) : 0;
  }
  for (int base = t_begin; base < t_end; base += kLg * kU) {  // uniform trip count: shuffles are safe
    Vec8 kv_k[kU], kv_v[kU];
    int tt[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + u * kLg + lg;
      tt[u] = t;
      if (t < t_end) {
        const int64_t off = slot[u] * p.kv_row * int64_t(sizeof(T)) + col;
        kv_k[u] = load_stream(kbase + off);
        kv_v[u] = load_stream(vbase + off);
      } else {
        kv_k[u] = kv_v[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + kLg * kU + u * kLg + lg;
      slot[u] = t < t_end ? decode::kv_slot(p, s, table_row, t) : 0;
    }
    float sc[kU][kNq];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float kf[8];
      unpack8<T>(kv_k[u], kf);
#pragma unroll
      for (int i = 0; i < kNq; ++i) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[i][e], kf[e], d);
#pragma unroll
        for (int o = kTpt / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u][i] = tt[u] < t_end && tt[u] < pend[i] ? d : -INFINITY;
      }
    }
    decode::online_softmax_pass<T, kU, kNq>(sc, kv_v, m, l, acc);
  }

  // Merge the lane groups (weights 2^(m - max); see store_lane_group).
  decode::store_lane_group<kLg, kNq, HD>(sm_m, sm_l, sm_o, lg, c, m, l, acc);
  __syncthreads();
  decode::block_stats<kNq, kLg>(sm_m, sm_l, sm_scale, sm_stat);
  auto pair_entry = [&](int i, int& ent, int& h) {  // false: no pair
    const int pi = sub * kNq + i, j = pi / G;
    ent = s - R + 1 + j;
    h = kvh * G + pi % G;
    return j < R;
  };
  auto row_of = [&](int ent) { return p.query_start ? p.query_start[ent + 1] - 1 : ent; };
  constexpr int kPer = (kNq * HD + kThreads - 1) / kThreads;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    const int i = idx / HD, d = idx % HD;
    int ent, h;
    if (idx >= kNq * HD || !pair_entry(i, ent, h)) continue;
    float oo = 0.0f;
#pragma unroll
    for (int q = 0; q < kLg; ++q) oo = fmaf(sm_o[q][i][d], sm_scale[q][i], oo);
    const float mm = sm_stat[i][0], ll = sm_stat[i][1];
    if (p.partial) {
      const int64_t ip = (int64_t(ent) * p.n_heads + h) * p.max_splits + split;
      p.ws_o[ip * HD + d] = ll > 0.0f ? oo / ll : 0.0f;
      if (d == 0) *reinterpret_cast<float2*>(p.ws_ml + ip * 2) = make_float2(mm, ll);
    } else {
      static_cast<T*>(p.out)[row_of(ent) * p.out_row_stride + int64_t(h) * HD + d] = from_float<T>(oo / ll);
    }
  }
  if (!p.partial) return;
  const int n = (ctx + p.split_len - 1) / p.split_len;
  int32_t* counter = p.counters + int64_t(s) * gridDim.x + blockIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    int old;
    asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
    last = old == n - 1;
    if (last) asm volatile("st.relaxed.gpu.global.s32 [%0], 0;\n" ::"l"(counter) : "memory");
  }
  __syncthreads();
  if (!last) return;
  // The last block merges every pair's splits in split order (a split past a pair's row holds
  // weight 0 and output 0: exact zeros in the sums).
  for (int idx = threadIdx.x; idx < kNq * HD; idx += kThreads) {
    const int i = idx / HD, d = idx % HD;
    int ent, h;
    if (!pair_entry(i, ent, h)) continue;
    const int64_t b = (int64_t(ent) * p.n_heads + h) * p.max_splits;
    float mx = -1e30f;
    for (int q = 0; q < n; ++q) mx = fmaxf(mx, __ldcg(p.ws_ml + (b + q) * 2));
    float wsum = 0.0f, oo = 0.0f;
    for (int q = 0; q < n; ++q) {
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(p.ws_ml + (b + q) * 2));
      const float w = ml.y * exp2f(ml.x - mx);
      wsum += w;
      oo = fmaf(w, __ldcg(p.ws_o + (b + q) * HD + d), oo);
    }
    static_cast<T*>(p.out)[row_of(ent) * p.out_row_stride + int64_t(h) * HD + d] = from_float<T>(oo / wsum);
  }
}

template <typename T, int kNq>
void launch_rows_nq(int hd, const RowsParams& rp, dim3 grid, cudaStream_t stream) {
  switch (hd) {
    case 32: rows_kernel<T, 32, kNq><<<grid, kThreads, 0, stream>>>(rp); break;
    case 64: rows_kernel<T, 64, kNq><<<grid, kThreads, 0, stream>>>(rp); break;
    case 128: rows_kernel<T, 128, kNq><<<grid, kThreads, 0, stream>>>(rp); break;
    default: throw std::invalid_argument("decode_attention_rows: head_dim " + std::to_string(hd) + " not built (32, 64, 128)");
  }
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_rows(int hd, int nq, const RowsParams& rp, dim3 grid, cudaStream_t stream) {
  if (nq == 4) launch_rows_nq<T, 4>(hd, rp, grid, stream);
  else launch_rows_nq<T, 8>(hd, rp, grid, stream);
}

}  // namespace decode_rows

DecodeSplit decode_attention_rows_split(const DecodeRowsArgs& a, int n_groups, int n_sms) {
  DecodeSplit r;
  const DecodeAttentionArgs& b = a.base;
  const int max_ctx = std::max(1, b.max_context);
  if (b.split.fixed_split_len > 0) {
    r.split_len = b.split.fixed_split_len;
    r.n_splits = ceil_div(max_ctx, r.split_len);
    r.reduce = true;
    return r;
  }
  const int group = b.n_heads / b.shape.n_kv_heads;
  const int n_sub = ceil_div(int64_t(kMaxDecodeRows) * group, decode_rows_queries(a));
  const int groups = n_groups > 0 ? std::min(n_groups, b.n_seqs) : b.n_seqs;
  // Blocks that compute: one column per (sequence, KV head, pair block); aim for ~4 a SM as the
  // CUDA-core decode kernel does, splits of >= 64 positions, rounded up to 64.
  const int64_t n_base = int64_t(std::max(1, groups)) * b.shape.n_kv_heads * n_sub;
  const int bps = b.split.blocks_per_sm > 0 ? b.split.blocks_per_sm : 4;
  const int min_len = b.split.min_split_len > 0 ? b.split.min_split_len : 64;
  const int most = std::min(kMaxAutoSplits, ceil_div(max_ctx, min_len));
  const int k = std::max(1, std::min<int>(ceil_div(int64_t(n_sms) * bps, n_base), most));
  r.split_len = ceil_div(ceil_div(max_ctx, k), 64) * 64;
  r.n_splits = ceil_div(max_ctx, r.split_len);
  r.reduce = r.n_splits > 1;
  r.blocks_per_sm = bps;
  return r;
}

int decode_rows_queries(const DecodeRowsArgs& a) { return a.queries_per_block == 4 ? 4 : kDecodeRowsQueries; }

void decode_attention_rows(const DecodeRowsArgs& a, cudaStream_t stream, int n_groups) {
  const DecodeAttentionArgs& b = a.base;
  if (b.n_seqs == 0) return;
  if (a.spans == nullptr) throw std::invalid_argument("decode_attention_rows: spans must be given");
  if (a.queries_per_block != 4 && a.queries_per_block != 8)
    throw std::invalid_argument("decode_attention_rows: queries_per_block must be 4 or 8 (got " +
                                std::to_string(a.queries_per_block) + ")");
  if (b.shape.n_kv_heads <= 0 || b.n_heads % b.shape.n_kv_heads != 0)
    throw std::invalid_argument("decode_attention_rows: n_heads must be a multiple of n_kv_heads");
  if (b.split.fixed_split_len < 0 || b.split.fixed_split_len % 16 != 0)
    throw std::invalid_argument("decode_attention_rows: fixed_split_len must be a multiple of 16");
  int device = 0, n_sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
  const DecodeSplit split = decode_attention_rows_split(a, n_groups, n_sms);
  const int hd = b.shape.head_dim, group = b.n_heads / b.shape.n_kv_heads;
  decode_rows::RowsParams rp{};
  decode::Params& p = rp.p;
  rp.spans = a.spans;
  p.q = b.q;
  p.q_row_stride = b.q_row_stride;
  p.query_start = b.query_start;
  p.k_cache = b.k_cache;
  p.v_cache = b.v_cache;
  p.kv_row = b.shape.row_elems();
  p.n_heads = b.n_heads;
  p.group = group;
  const int nq = decode_rows_queries(a);
  p.n_sub = ceil_div(int64_t(kMaxDecodeRows) * group, nq);
  p.context_lens = b.context_lens;
  p.kv = b.kv;
  p.scale_log2 = b.scale * decode::kLog2e;
  p.out = b.out;
  p.out_row_stride = b.out_row_stride;
  p.split_len = split.split_len;
  p.max_splits = split.n_splits;
  p.partial = split.reduce;
  p.cluster = false;
  p.release_arrive = true;
  p.bs_shift = -1;
  if (b.kv.kind == KvLayoutKind::paged) {
    if (b.kv.block_size < 1) throw std::invalid_argument("decode_attention_rows: block_size must be >= 1");
    if ((b.kv.block_size & (b.kv.block_size - 1)) == 0) p.bs_shift = __builtin_ctz(unsigned(b.kv.block_size));
  }
  const dim3 grid(b.shape.n_kv_heads * p.n_sub, b.n_seqs, split.n_splits);
  if (split.reduce) {
    const size_t need = decode_attention_workspace_bytes(b.n_seqs, b.n_heads, hd, split.n_splits);
    const size_t n_ctr = b.workspace_bytes / (4 * size_t(hd + 3)), ctr_at = b.workspace_bytes / 4 - n_ctr;
    const size_t partial_floats = size_t(b.n_seqs) * b.n_heads * split.n_splits * (hd + 2);
    if (b.workspace == nullptr || b.workspace_bytes < need || partial_floats > ctr_at ||
        size_t(b.n_seqs) * grid.x > n_ctr)
      throw std::invalid_argument("decode_attention_rows: workspace of " + std::to_string(b.workspace_bytes) +
                                  " bytes, needs " + std::to_string(need));
    p.ws_o = b.workspace;
    p.ws_ml = b.workspace + size_t(b.n_seqs) * b.n_heads * split.n_splits * hd;
    p.counters = reinterpret_cast<int32_t*>(b.workspace) + ctr_at;
  }
  if (b.dtype == ScalarType::bf16) {
    decode_rows::launch_rows<__nv_bfloat16>(hd, nq, rp, grid, stream);
  } else {
#if defined(SERVELAB_KERNELS_FP16)
    decode_rows::launch_rows<__half>(hd, nq, rp, grid, stream);
#else
    throw std::invalid_argument("decode_attention_rows: fp16 not built (configure with -DSERVELAB_KERNELS_FP16=ON)");
#endif
  }
}

}  // namespace servelab::kernels
