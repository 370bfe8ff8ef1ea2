// Prefill (and mixed) attention through WMMA: the first version, FlashAttention-1 structure (O in
// shared memory, no load/compute overlap). prefill_attention (attention_prefill_mma.cu) replaced
// it; kept as prefill_attention_wmma, tested against the same reference, for comparison.
//
// Grid (query tiles, n_kv_heads). A tile is 64 rows of (token, query head) pairs of one sequence
// and one KV head: GQA heads are packed into the rows, so each K/V tile read from the cache serves
// the whole group. Per 64-position key tile (aligned to absolute positions): K and V rows are
// gathered through the slot mapping into shared memory (16-byte loads), each warp computes its 16
// rows of S = Q·Kᵀ with bf16 MMAs, applies the causal mask and the online softmax in fp32, writes
// P (bf16) and accumulates O += P·V with MMAs into an fp32 tile kept in shared memory.
// This is the FlashAttention-1 structure; not yet the Hopper one (wgmma, TMA, warp-specialized
// producer/consumer, O in registers): see kernels/README.md, "Performance notes".
//
// Because key tiles sit at absolute positions and rows never mix, a row's result depends only on
// its query, its position and the cache: a chunked prefill gives the same bits as a full one.
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernels/per_device.h"
#include "kernels/scratch/attention_prefill_scratch.h"
#include "kernels/common.cuh"

namespace servelab::kernels {
namespace {

using namespace nvcuda;

constexpr int kThreads = 128, kBM = 64, kBN = 64;
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillParams {
  const void* q;
  int64_t q_row_stride;
  const void* k_cache;
  const void* v_cache;
  int64_t kv_row;
  int n_heads, group, n_seqs;
  const int32_t* query_start;
  const int32_t* context_lens;
  KvAddressing kv;
  float scale_log2;
  void* out;
  int64_t out_row_stride;
};

/// Shared-memory layout; rows padded by 16 bytes (8 for floats 16) against bank conflicts, every
/// fragment pointer 32-byte aligned as WMMA requires.
template <typename T, int HD>
struct Layout {
  static constexpr int kLdQ = HD + 8;    // Q, K, V rows (T)
  static constexpr int kLdS = kBN + 4;   // scores (float)
  static constexpr int kLdP = kBN + 8;   // probabilities (T)
  static constexpr int kLdO = HD + 4;    // output accumulator (float)
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t(kBM) * kLdQ * sizeof(T);
  static constexpr size_t kV = kK + size_t(kBN) * kLdQ * sizeof(T);
  static constexpr size_t kS = kV + size_t(kBN) * kLdQ * sizeof(T);
  static constexpr size_t kP = kS + size_t(kBM) * kLdS * sizeof(float);
  static constexpr size_t kO = kP + size_t(kBM) * kLdP * sizeof(T);
  static constexpr size_t kRows = kO + size_t(kBM) * kLdO * sizeof(float);
  static constexpr size_t kBytes = kRows + size_t(kBM) * 5 * sizeof(float);
};

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const PrefillParams p) {
  using L = Layout<T, HD>;
  constexpr int kVecs = HD / 8;  // 16-byte vectors per row
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::kQ);
  T* ks = reinterpret_cast<T*>(smem + L::kK);
  T* vs = reinterpret_cast<T*>(smem + L::kV);
  float* sc = reinterpret_cast<float*>(smem + L::kS);
  T* pr = reinterpret_cast<T*>(smem + L::kP);
  float* ot = reinterpret_cast<float*>(smem + L::kO);
  float* row_m = reinterpret_cast<float*>(smem + L::kRows);
  float* row_l = row_m + kBM;
  int* row_pos = reinterpret_cast<int*>(row_l + kBM);
  int* row_tok = row_pos + kBM;
  int* row_head = row_tok + kBM;
  __shared__ int sh_seq, sh_tile;

  const int kvh = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {  // which sequence and tile this block owns
    int tile = blockIdx.x, seq = -1;
    for (int s = 0; s < p.n_seqs; ++s) {
      const int n_tiles = ((p.query_start[s + 1] - p.query_start[s]) * p.group + kBM - 1) / kBM;
      if (tile < n_tiles) {
        seq = s;
        break;
      }
      tile -= n_tiles;
    }
    sh_seq = seq;
    sh_tile = tile;
  }
  __syncthreads();
  const int s = sh_seq, tile = sh_tile;
  if (s < 0) return;
  const int q0 = p.query_start[s], q_len = p.query_start[s + 1] - q0, ctx = p.context_lens[s];
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  if (tid < kBM) {
    const int rr = tile * kBM + tid, i = rr / p.group;
    row_pos[tid] = i < q_len ? ctx - q_len + i : -1;
    row_tok[tid] = q0 + i;
    row_head[tid] = kvh * p.group + rr % p.group;
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.0f;
  }
  __syncthreads();
  for (int idx = tid; idx < kBM * kVecs; idx += kThreads) {
    const int r = idx / kVecs, c = idx % kVecs;
    Vec8 v = make_uint4(0, 0, 0, 0);
    if (row_pos[r] >= 0)
      v = *reinterpret_cast<const Vec8*>(static_cast<const T*>(p.q) + row_tok[r] * p.q_row_stride +
                                         int64_t(row_head[r]) * HD + c * 8);
    *reinterpret_cast<Vec8*>(qs + r * L::kLdQ + c * 8) = v;
  }
  for (int idx = tid; idx < kBM * HD / 4; idx += kThreads) {
    const int r = idx / (HD / 4), c = idx % (HD / 4);
    *reinterpret_cast<float4*>(ot + r * L::kLdO + c * 4) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int last_i = min(q_len - 1, ((tile + 1) * kBM - 1) / p.group);
  const int max_pos = ctx - q_len + last_i;  // the tile's last row
  const int n_key_tiles = max_pos / kBN + 1;
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);

  for (int kt = 0; kt < n_key_tiles; ++kt) {
    __syncthreads();  // previous tile's K/V (and the setup above) fully consumed
    for (int idx = tid; idx < kBN * kVecs; idx += kThreads) {
      const int r = idx / kVecs, c = idx % kVecs, kp = kt * kBN + r;
      Vec8 kv = make_uint4(0, 0, 0, 0), vv = kv;  // zeros past max_pos: 0·V must stay 0
      if (kp <= max_pos) {
        const int64_t off = (p.kv.slot_in_row(s, table_row, kp) * p.kv_row + int64_t(kvh) * HD + c * 8) * int64_t(sizeof(T));
        kv = load_stream(kbase + off);
        vv = load_stream(vbase + off);
      }
      *reinterpret_cast<Vec8*>(ks + r * L::kLdQ + c * 8) = kv;
      *reinterpret_cast<Vec8*>(vs + r * L::kLdQ + c * 8) = vv;
    }
    __syncthreads();

    // S rows [16 warp, 16 warp + 16) = Q · Kᵀ.
#pragma unroll
    for (int n = 0; n < kBN / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int k = 0; k < HD / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(a, qs + warp * 16 * L::kLdQ + k * 16, L::kLdQ);
        wmma::load_matrix_sync(b, ks + n * 16 * L::kLdQ + k * 16, L::kLdQ);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(sc + warp * 16 * L::kLdS + n * 16, acc, L::kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, 32 columns each.
    {
      const int r = warp * 16 + lane / 2, half = lane & 1, pos = row_pos[r];
      const float* srow = sc + r * L::kLdS + half * 32;
      const int kp0 = kt * kBN + half * 32;
      float mx = -INFINITY;
#pragma unroll 8
      for (int j = 0; j < 32; ++j) mx = fmaxf(mx, kp0 + j <= pos ? srow[j] * p.scale_log2 : -INFINITY);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = row_m[r], m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
      T* prow = pr + r * L::kLdP + half * 32;
#pragma unroll 8
      for (int j = 0; j < 32; ++j) {
        const float e = kp0 + j <= pos ? exp2f(srow[j] * p.scale_log2 - m_use) : 0.0f;
        prow[j] = from_float<T>(e);
        sum += e;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float corr = exp2f(m_old - m_use);
      float* orow = ot + r * L::kLdO + half * (HD / 2);
#pragma unroll 8
      for (int d = 0; d < HD / 2; ++d) orow[d] *= corr;
      __syncwarp();
      if (half == 0) {
        row_m[r] = m_new;
        row_l[r] = row_l[r] * corr + sum;
      }
    }
    __syncwarp();

    // O rows of this warp += P · V.
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* optr = ot + warp * 16 * L::kLdO + n * 16;
      wmma::load_matrix_sync(acc, optr, L::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kBN / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, pr + warp * 16 * L::kLdP + k * 16, L::kLdP);
        wmma::load_matrix_sync(b, vs + k * 16 * L::kLdQ + n * 16, L::kLdQ);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(optr, acc, L::kLdO, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kBM * kVecs; idx += kThreads) {
    const int r = idx / kVecs, c = idx % kVecs;
    if (row_pos[r] < 0) continue;
    const float inv = 1.0f / row_l[r];
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = ot[r * L::kLdO + c * 8 + j] * inv;
    *reinterpret_cast<Vec8*>(static_cast<T*>(p.out) + row_tok[r] * p.out_row_stride + int64_t(row_head[r]) * HD +
                             c * 8) = pack8<T>(f);
  }
}

template <typename T, int HD>
void launch(const PrefillParams& p, dim3 grid, cudaStream_t stream) {
  constexpr size_t bytes = Layout<T, HD>::kBytes;
  static std::atomic<uint64_t> raised{0};  // per device: kernels/per_device.h
  servelab::kernels::once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  });
  prefill_kernel<T, HD><<<grid, kThreads, bytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void dispatch(int hd, const PrefillParams& p, dim3 grid, cudaStream_t stream) {
  switch (hd) {
    case 32: return launch<T, 32>(p, grid, stream);
    case 64: return launch<T, 64>(p, grid, stream);
    case 128: return launch<T, 128>(p, grid, stream);
    default: throw std::invalid_argument("prefill_attention: head_dim " + std::to_string(hd) + " not built (32, 64, 128)");
  }
}

}  // namespace

void prefill_attention_wmma(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.n_seqs == 0 || a.n_tokens == 0) return;
  if (a.shape.n_kv_heads <= 0 || a.n_heads % a.shape.n_kv_heads != 0)
    throw std::invalid_argument("prefill_attention: n_heads must be a multiple of n_kv_heads");
  PrefillParams p{};
  p.q = a.q;
  p.q_row_stride = a.q_row_stride;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.kv_row = a.shape.row_elems();
  p.n_heads = a.n_heads;
  p.group = a.n_heads / a.shape.n_kv_heads;
  p.n_seqs = a.n_seqs;
  p.query_start = a.query_start;
  p.context_lens = a.context_lens;
  p.kv = a.kv;
  p.scale_log2 = a.scale * kLog2e;
  p.out = a.out;
  p.out_row_stride = a.out_row_stride;
  // Upper bound of Σ ceil(q_len · group / 64); blocks past the real count return at once.
  const int n_tiles = ceil_div(int64_t(a.n_tokens) * p.group, kBM) + a.n_seqs;
  const dim3 grid(n_tiles, a.shape.n_kv_heads);
  if (a.dtype == ScalarType::bf16) {
    dispatch<__nv_bfloat16>(a.shape.head_dim, p, grid, stream);
  } else {
#if defined(SERVELAB_KERNELS_FP16)
    dispatch<__half>(a.shape.head_dim, p, grid, stream);
#else
    throw std::invalid_argument("prefill_attention: fp16 not built (configure with -DSERVELAB_KERNELS_FP16=ON)");
#endif
  }
}

}  // namespace servelab::kernels
