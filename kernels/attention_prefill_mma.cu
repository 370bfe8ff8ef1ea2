// Prefill (and mixed) attention, FlashAttention-2 structure on mma.sync tensor cores.
//
// Grid (query tiles, n_kv_heads), 4 warps. A tile is 64 rows of (token, query head) pairs of one
// sequence and one KV head (GQA heads packed into the rows, so each K/V tile serves the group);
// each warp owns 16 rows. Q stays in registers as MMA fragments (ldmatrix from shared memory);
// per 64-position key tile, K and V rows are gathered through the slot mapping by cp.async into a
// double buffer (the next tile loads while this one computes); S = Q·Kᵀ with
// mma.m16n8k16 (bf16 in, fp32 accumulate), causal mask and online softmax in registers, P reused
// from the S accumulators as the A operand of O += P·V (V through ldmatrix.trans); O stays in
// registers (fp32) until the end. Key tiles sit at absolute positions and rows never mix, so a
// row's result does not depend on its tile or batch: chunked prefill gives the same bits as full.
// Shapes and addressing as kernels/attention_prefill.cu (the WMMA kernel kept for comparison).
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/per_device.h"
#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/mma_util.cuh"

namespace servelab::kernels {
namespace {

constexpr int kThreads = 128, kBM = 64, kBN = 64;
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
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

template <int HD>
struct Smem {
  static constexpr int kLd = HD + 8;  // elements per row: 16 bytes of padding, ldmatrix conflict-free
  static constexpr size_t kTile = size_t(kBM) * kLd * 2;  // one 64-row tile of 16-bit values
  static constexpr size_t kQ = 0, kK = kTile, kV = 3 * kTile, kRows = 5 * kTile;
  static constexpr size_t kBytes = kRows + size_t(kBM) * 3 * sizeof(int);
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}


template <typename T, int HD>
__global__ void __launch_bounds__(kThreads, 2) prefill_mma_kernel(const Params p) {
  using L = Smem<HD>;
  constexpr int kLd = L::kLd, kVecs = HD / 8, kKS = HD / 16;  // 16-byte vectors per row, k-steps over HD
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::kQ);
  T* ks = reinterpret_cast<T*>(smem + L::kK);  // [2][kBN][kLd]
  T* vs = reinterpret_cast<T*>(smem + L::kV);  // [2][kBN][kLd]
  int* row_pos = reinterpret_cast<int*>(smem + L::kRows);
  int* row_tok = row_pos + kBM;
  int* row_head = row_tok + kBM;
  __shared__ int sh_seq, sh_tile;

  const int kvh = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {  // tiles in reverse launch order: the longest (last) tiles of a prompt start first
    int tile = gridDim.x - 1 - blockIdx.x, seq = -1;
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
  }
  __syncthreads();
  const int last_i = min(q_len - 1, ((tile + 1) * kBM - 1) / p.group);
  const int max_pos = ctx - q_len + last_i;
  const int n_key_tiles = max_pos / kBN + 1;
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);

  // K/V tile kt into buffer b: 64 rows x kVecs vectors each, zeros past max_pos (0 · V stays 0).
  auto load_kv = [&](int kt, int b) {
    T* kd = ks + b * kBN * kLd;
    T* vd = vs + b * kBN * kLd;
    for (int idx = tid; idx < kBN * kVecs; idx += kThreads) {
      const int r = idx / kVecs, c = idx % kVecs, kp = kt * kBN + r;
      const bool valid = kp <= max_pos;
      int64_t off = 0;
      if (valid) off = (p.kv.slot_in_row(s, table_row, kp) * p.kv_row + int64_t(kvh) * HD + c * 8) * int64_t(sizeof(T));
      cp_async16(kd + r * kLd + c * 8, kbase + off, valid);
      cp_async16(vd + r * kLd + c * 8, vbase + off, valid);
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  // Q tile into shared memory, then into this warp's A fragments.
  for (int idx = tid; idx < kBM * kVecs; idx += kThreads) {
    const int r = idx / kVecs, c = idx % kVecs;
    Vec8 v = make_uint4(0, 0, 0, 0);
    if (row_pos[r] >= 0)
      v = *reinterpret_cast<const Vec8*>(static_cast<const T*>(p.q) + row_tok[r] * p.q_row_stride +
                                         int64_t(row_head[r]) * HD + c * 8);
    *reinterpret_cast<Vec8*>(qs + r * kLd + c * 8) = v;
  }
  __syncthreads();
  uint32_t qf[kKS][4];
#pragma unroll
  for (int k = 0; k < kKS; ++k)
    ldmatrix_x4(qf[k], qs + (warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * kLd + k * 16 + 8 * (lane / 16));

  const int g = lane / 4, c2 = (lane % 4) * 2;
  const int pos0 = row_pos[warp * 16 + g], pos1 = row_pos[warp * 16 + g + 8];
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float o[HD / 8][4];
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  for (int kt = 0; kt < n_key_tiles; ++kt) {
    const int b = kt & 1;
    if (kt + 1 < n_key_tiles) {
      load_kv(kt + 1, b ^ 1);  // the other buffer: its last reader finished before the barrier below
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* kt_s = ks + b * kBN * kLd;
    const T* vt_s = vs + b * kBN * kLd;

    // S = Q · Kᵀ: 16 rows x 64 keys per warp, 8 n-tiles of 8 keys.
    float sc[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < kKS; ++k) {
#pragma unroll
      for (int j = 0; j < kBN / 8; j += 2) {
        uint32_t kb[4];  // b0, b1 of n-tile j, then of n-tile j + 1
        ldmatrix_x4(kb, kt_s + (j * 8 + (lane % 8) + 8 * (lane / 16)) * kLd + k * 16 + 8 * ((lane / 8) % 2));
        mma_16816<T>(sc[j], qf[k], kb[0], kb[1]);
        mma_16816<T>(sc[j + 1], qf[k], kb[2], kb[3]);
      }
    }

    // Causal mask, online softmax (rows g and g + 8; a row's four lanes hold its 64 keys).
    float mx0 = -INFINITY, mx1 = -INFINITY;
    const int kbase_pos = kt * kBN + c2;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int kp = kbase_pos + j * 8 + e;
        sc[j][e] = kp <= pos0 ? sc[j][e] * p.scale_log2 : -INFINITY;
        sc[j][2 + e] = kp <= pos1 ? sc[j][2 + e] * p.scale_log2 : -INFINITY;
        mx0 = fmaxf(mx0, sc[j][e]);
        mx1 = fmaxf(mx1, sc[j][2 + e]);
      }
    }
#pragma unroll
    for (int o_ = 1; o_ <= 2; o_ <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o_));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o_));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float corr0 = exp2f(m0 - mu0), corr1 = exp2f(m1 - mu1);
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
    uint32_t pf[kBN / 16][4];  // P as A fragments, one per 16 keys
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const float p0 = exp2f(sc[j][0] - mu0), p1 = exp2f(sc[j][1] - mu0);
      const float p2 = exp2f(sc[j][2] - mu1), p3 = exp2f(sc[j][3] - mu1);
      sum0 += p0 + p1;
      sum1 += p2 + p3;
      pf[j / 2][(j % 2) * 2] = pack2<T>(p0, p1);
      pf[j / 2][(j % 2) * 2 + 1] = pack2<T>(p2, p3);
    }
    l0 = l0 * corr0 + sum0;
    l1 = l1 * corr1 + sum1;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      o[j][0] *= corr0;
      o[j][1] *= corr0;
      o[j][2] *= corr1;
      o[j][3] *= corr1;
    }

    // O += P · V: 16 rows x HD per warp; V fragments by ldmatrix.trans (keys are the k index).
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < HD / 8; j += 2) {
        uint32_t vb[4];  // b0, b1 of dim tile j, then of dim tile j + 1
        ldmatrix_x4_trans(vb, vt_s + (kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * kLd + j * 8 + 8 * (lane / 16));
        mma_16816<T>(o[j], pf[kk], vb[0], vb[1]);
        mma_16816<T>(o[j + 1], pf[kk], vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp done with buffer b before the next iteration loads into it
  }

  // Full row sums (the four lanes of a row), normalize, store rows g and g + 8.
#pragma unroll
  for (int o_ = 1; o_ <= 2; o_ <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o_);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o_);
  }
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) {
    if (pos0 >= 0)
      *reinterpret_cast<uint32_t*>(out + row_tok[r0] * p.out_row_stride + int64_t(row_head[r0]) * HD + j * 8 + c2) =
          pack2<T>(o[j][0] * inv0, o[j][1] * inv0);
    if (pos1 >= 0)
      *reinterpret_cast<uint32_t*>(out + row_tok[r1] * p.out_row_stride + int64_t(row_head[r1]) * HD + j * 8 + c2) =
          pack2<T>(o[j][2] * inv1, o[j][3] * inv1);
  }
}

template <typename T, int HD>
void launch(const Params& p, dim3 grid, cudaStream_t stream) {
  constexpr size_t bytes = Smem<HD>::kBytes;
  static std::atomic<uint64_t> raised{0};  // per device: kernels/per_device.h
  servelab::kernels::once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_mma_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  });
  prefill_mma_kernel<T, HD><<<grid, kThreads, bytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void dispatch(int hd, const Params& p, dim3 grid, cudaStream_t stream) {
  switch (hd) {
    case 32: return launch<T, 32>(p, grid, stream);
    case 64: return launch<T, 64>(p, grid, stream);
    case 128: return launch<T, 128>(p, grid, stream);
    default: throw std::invalid_argument("prefill_attention: head_dim " + std::to_string(hd) + " not built (32, 64, 128)");
  }
}

}  // namespace

void prefill_attention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (prefill_wgmma_supported(a.shape.head_dim)) return prefill_attention_wgmma(a, stream);
  prefill_attention_mma(a, stream);
}

void prefill_attention_mma(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.n_seqs == 0 || a.n_tokens == 0) return;
  if (a.shape.n_kv_heads <= 0 || a.n_heads % a.shape.n_kv_heads != 0)
    throw std::invalid_argument("prefill_attention: n_heads must be a multiple of n_kv_heads");
  Params p{};
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
