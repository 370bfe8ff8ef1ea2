// Prefill attention on wgmma, v4.1: FlashAttention-3's structure without warp specialization
// (kernels/notes-prefill.md). Grid: one block per (128-row tile, KV head), tiles longest first
// across all heads; 2 warpgroups of 64 rows. Q (128 x 128) and 3 stages of K and V tiles (128
// positions each) sit in shared memory in the 128-byte-swizzled layout wgmma reads through
// descriptors; every thread gathers its rows by cp.async through the slot mapping, two tiles ahead
// of the one computed, with one __syncthreads per key tile. Per key tile and warpgroup: S = Q · Kᵀ
// by 8 wgmma m64n128k16, the causal mask where a key passes the warpgroup's first row, the online
// softmax in registers, P as the A operand of O += P · V (V as B in MN-major order). Also here:
// fa7's FMA-pipe exp2 as a kernel of its own, for its test against kernels/ref/exp2_poly.h.
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/per_device.h"
#include "kernels/attention_prefill_wgmma.cuh"
#include "kernels/common.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/scratch/attention_prefill_scratch.h"

namespace servelab::kernels {
namespace {
using namespace prefill_wgmma;  // NOLINT: the shared tile constants and helpers

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) prefill_wgmma_kernel(const Params p) {
#if SERVELAB_WGMMA_DEVICE
  using L = Layout;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = smem_u32(smem);
  int* row_pos = reinterpret_cast<int*>(smem + L::kRows);
  int* row_tok = row_pos + kBM;
  int* row_head = row_tok + kBM;
  int* sh = row_head + kBM;  // sequence, tile

  const int tid = threadIdx.x, kvh = blockIdx.x % p.n_kv;
  if (tid == 0) {  // tiles in reverse order across all heads: the longest tiles start first
    int tile = int(gridDim.x) / p.n_kv - 1 - int(blockIdx.x) / p.n_kv;
    const int seq = find_row_tile(p, tile);
    sh[0] = seq;
    sh[1] = tile;
  }
  __syncthreads();
  const int s = sh[0], tile = sh[1];
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
  const int n_rows = min(kBM, q_len * p.group - tile * kBM);
  const int max_pos = ctx - q_len + (tile * kBM + n_rows - 1) / p.group;
  const int n_key_tiles = max_pos / kBN + 1;

  // Loads: thread tid moves 16-byte chunk lc of rows lr, lr + 16, ..., into the swizzled layout.
  const int lc = tid % 16, lr = tid / 16;
  const uint32_t sw = (lc / 8) * L::kHalf + uint32_t(((lc % 8) ^ (lr % 8)) * 16);
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  // Byte offsets of this thread's rows of key tile t in the arenas (-1: past max_pos). The slot
  // rule of KvAddressing, with the sequence's table row hoisted and shifts for power-of-two blocks.
  const bool paged = p.kv.kind == KvLayoutKind::paged;
  const int32_t* trow = paged ? p.kv.block_tables + table_row * p.kv.block_table_stride : nullptr;
  const int64_t base_slot = paged ? 0 : p.kv.base_slots[s];
  const int bs = p.kv.block_size, bs_shift = p.block_shift;
  const int64_t col = int64_t(kvh) * kHD + lc * 8;
  auto tile_offsets = [&](int t, int64_t (&off)[kBN / 16]) {
#pragma unroll
    for (int j = 0; j < kBN / 16; ++j) {
      const int kp = t * kBN + lr + 16 * j, kq = min(kp, max_pos);  // kq: never past the table
      int64_t slot;
      if (!paged) slot = base_slot + kq;
      else if (bs_shift >= 0) slot = (int64_t(trow[kq >> bs_shift]) << bs_shift) + (kq & (bs - 1));
      else slot = int64_t(trow[kq / bs]) * bs + kq % bs;
      off[j] = kp <= max_pos ? (slot * p.kv_row + col) * int64_t(sizeof(T)) : -1;
    }
  };
  // One K or V tile (t: its key tile) into its ring's stage t % kStages; zeros past max_pos.
  auto load_tile = [&](const char* base, uint32_t ring, int t, const int64_t (&off)[kBN / 16]) {
    const uint32_t d = sbase + ring + uint32_t(t % kStages) * L::kTile + sw;
#pragma unroll
    for (int j = 0; j < kBN / 16; ++j) cp_async16(d + (lr + 16 * j) * 128, base + (off[j] < 0 ? 0 : off[j]), off[j] >= 0);
  };
#pragma unroll
  for (int j = 0; j < kBM / 16; ++j) {  // Q tile (zeros in padding rows)
    const int r = lr + 16 * j;
    const bool valid = row_pos[r] >= 0;
    const T* src = static_cast<const T*>(p.q);
    if (valid) src += row_tok[r] * p.q_row_stride + int64_t(row_head[r]) * kHD + lc * 8;
    cp_async16(sbase + L::kQ + sw + r * 128, src, valid);
  }
  // cp.async groups: {Q, K0, V0}, {K1, V1}, {K2}, then per iteration kt {K kt+3, V kt+2}; at the
  // top of iteration kt, K kt+1 and V kt (two groups back) must have landed. A tile's offsets
  // are computed once: with its K, kept for its V an iteration later (off_v).
  int64_t off[kBN / 16], off_v[kBN / 16];
  tile_offsets(0, off);
  load_tile(kbase, L::kK, 0, off);
  load_tile(vbase, L::kV, 0, off);
  cp_async_commit();
  if (n_key_tiles > 1) {
    tile_offsets(1, off);
    load_tile(kbase, L::kK, 1, off);
    load_tile(vbase, L::kV, 1, off);
  }
  cp_async_commit();
  if (n_key_tiles > 2) {
    tile_offsets(2, off_v);
    load_tile(kbase, L::kK, 2, off_v);
  }
  cp_async_commit();

  // This thread's two rows (accumulator layout: warp w of the warpgroup owns rows 16w..16w+15).
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, c2 = (lane % 4) * 2;
  const int lr0 = wg * 64 + warp * 16 + g, lr1 = lr0 + 8;
  const int pos0 = row_pos[lr0], pos1 = row_pos[lr1];
  const int wg_min = row_pos[wg * 64];  // -1: no valid row in this warpgroup (masked everywhere)
  const float sl2 = p.scale_log2;
  RowPairSoftmax sm;
  float o[64], sc[64];
  uint32_t pf[kBN / 16][4];  // P of the current tile as A fragments, one per 16 keys
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;

  // Descriptors of the tiles' first rows; a k-step or stage adds its byte offset >> 4 to the
  // start-address field (shared addresses stay below 2^18, so the field never carries over).
  const uint64_t desc_q = wgmma::desc_sw128(sbase + L::kQ + wg * 64 * 128, 16, 1024);
  const uint64_t desc_k = wgmma::desc_sw128(sbase + L::kK, 16, 1024);
  const uint64_t desc_v = wgmma::desc_sw128(sbase + L::kV, L::kHalf, 1024);
  // S = Q · Kᵀ of key tile t: 64 rows x 128 keys, 8 k-steps of 16 over head_dim (32 bytes into
  // a half's rows); issued, not waited for.
  auto issue_s = [&](int t) { issue_qk<T>(sc, desc_q, desc_k, uint32_t(t % kStages) * L::kTile); };
  // Causal mask where a key passes the warpgroup's first row, then the online softmax of tile t
  // on rows g, g + 8 (sc[4j + e]: row g, key 8j + c2 + e; sc[4j + 2 + e]: row g + 8): sc becomes
  // P (fp32), m and l advance, corr0/corr1 are the factors O still has to take.
  auto softmax = [&](int t) { sm.tile(sc, t, wg_min, pos0, pos1, c2, sl2); };
  auto rescale_and_pack = [&] { sm.rescale_and_pack<T, false>(o, sc, pf); };

  // P · V of key tile t (V rows are keys, MN-major B: 64-column halves kHalf apart, 8-key groups
  // 1024 bytes apart); issued, not waited for.
  auto issue_pv = [&](int t) {
    const uint32_t st = uint32_t(t % kStages) * L::kTile;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma::mma_rs<T>(o, pf[kk], desc_v + ((st + kk * 2048) >> 4));
  };

  // Tile 0: S and softmax before the loop. No wgmma sits under a condition (ptxas would serialize
  // them all): a warpgroup whose rows mask a whole tile still runs it (exact zeros, P = 0).
  cp_async_wait<2>();  // {Q, K0, V0}
  wgmma::fence_proxy_async();
  __syncthreads();
  wgmma::fence();
  issue_s(0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::pin(sc);
  softmax(0);
  rescale_and_pack();
  // Iteration kt: S of tile kt + 1 and O += P·V of tile kt on the tensor cores together, the loads
  // two tiles ahead issued behind them, then the softmax of tile kt + 1 while P·V still runs.
  for (int kt = 0; kt + 1 < n_key_tiles; ++kt) {
    cp_async_wait<1>();  // K kt+1 and V kt have landed (for this thread)
    wgmma::fence_proxy_async();
    __syncthreads();     // ... for all; and every warpgroup is done with K kt and V kt-1
    wgmma::fence();
    issue_s(kt + 1);
    wgmma::commit();
    issue_pv(kt);
    wgmma::commit();
    if (kt + 2 < n_key_tiles) load_tile(vbase, L::kV, kt + 2, off_v);
    if (kt + 3 < n_key_tiles) {
      tile_offsets(kt + 3, off_v);
      load_tile(kbase, L::kK, kt + 3, off_v);
    }
    cp_async_commit();
    wgmma::wait<1>();  // S of tile kt + 1 (P · V of tile kt may still run)
    wgmma::pin(sc);
    softmax(kt + 1);
    wgmma::wait<0>();
    wgmma::pin(o);
    wgmma::pin_u32(pf);
    rescale_and_pack();
  }
  cp_async_wait<0>();  // V of the last tile
  wgmma::fence_proxy_async();
  __syncthreads();
  wgmma::fence();
  issue_pv(n_key_tiles - 1);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::pin(o);

  // Full row sums (the four lanes of a row), normalize, store rows lr0 and lr1.
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    sm.l0 += __shfl_xor_sync(0xffffffffu, sm.l0, x);
    sm.l1 += __shfl_xor_sync(0xffffffffu, sm.l1, x);
  }
  const float inv0 = 1.0f / sm.l0, inv1 = 1.0f / sm.l1;
  T* out = static_cast<T*>(p.out);
  T* out0 = out + row_tok[lr0] * p.out_row_stride + int64_t(row_head[lr0]) * kHD + c2;
  T* out1 = out + row_tok[lr1] * p.out_row_stride + int64_t(row_head[lr1]) * kHD + c2;
#pragma unroll
  for (int j = 0; j < kHD / 8; ++j) {
    if (pos0 >= 0) *reinterpret_cast<uint32_t*>(out0 + j * 8) = pack2<T>(o[4 * j] * inv0, o[4 * j + 1] * inv0);
    if (pos1 >= 0) *reinterpret_cast<uint32_t*>(out1 + j * 8) = pack2<T>(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
  }
#endif
}

template <typename T>
void launch(const Params& p, int grid, cudaStream_t stream) {
  static std::atomic<uint64_t> raised{0};  // per device: kernels/per_device.h
  servelab::kernels::once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Layout::kAlloc)));
  });
  prefill_wgmma_kernel<T><<<grid, kThreads, Layout::kAlloc, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

/// y[i] = ex2_poly(x[i]): fa7's FMA-pipe exp2 alone, for the test against its C++ reference.
__global__ void exp2_poly_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] = ex2_poly(x[i]);
}

}  // namespace

void prefill_exp2_poly(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) throw std::invalid_argument("prefill_exp2_poly: n must be >= 0 (got " + std::to_string(n) + ")");
  if (n == 0) return;
  exp2_poly_kernel<<<int(std::min<int64_t>(ceil_div(n, int64_t(256)), 1024)), 256, 0, stream>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void prefill_attention_wgmma_sync(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.n_seqs == 0 || a.n_tokens == 0) return;
  int64_t grid = 0;
  const Params p = make_params(a, grid);
  SERVELAB_DISPATCH_16(a.dtype, launch<__nv_bfloat16>(p, int(grid), stream), launch<__half>(p, int(grid), stream));
}

}  // namespace servelab::kernels
