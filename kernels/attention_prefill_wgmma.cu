// Prefill (and mixed) attention on Hopper's warpgroup MMA (wgmma, sm_90a), FlashAttention-3
// structure: varlen causal, cached prefix + chunk, paged or naive KV gathered through KvAddressing,
// GQA heads packed into the rows (the same contract as the mma.sync kernel,
// attention_prefill_mma.cu, which runs where this one cannot). Grid: one block per (128-row tile,
// KV head), tiles longest first across all heads; the kernels themselves are the warp-specialized
// template of attention_prefill_wgmma_ws.cuh (producer warpgroup loading K/V, two consumer
// warpgroups on the tensor cores; design in kernels/README.md, history in notes-prefill.md).
// This file checks the arguments, builds Params and the grid, and picks the kernel by KV layout:
//  - fa10 where every key tile is two whole 128-row TMA boxes (the naive arena, paged blocks of
//    2^k >= 128 slots): +5.7% / +7.9% over fa8 at 4k on the naive arena, +10.6% / +10.8% on blocks
//    of 256 (GQA 1 / 4; notes-prefill.md, ninth pass);
//  - fa11 elsewhere (blocks of 16-64): two 128-row boxes for a tile whose 128 slots are consecutive
//    (PagedKvManager places a sequence's blocks in physical runs, engine/kv/block_runs.h), fa8's
//    cp.async gather otherwise: +9-10% over fa8 on the engine's own tables at 4k, 1.9% / 4.8% behind
//    it on a table shuffled block by block, the worst case (tenth pass).
// fa8, fa10 and fa11 fill the same shared memory, so they give the same bits and a row's result does
// not depend on the layout, the batch or the chunking. The superseded kernels (v4.1 sync, v5.1 ws and
// ping-pong, v6 tma, v6.1 lean, v7 persist, fa5-fa7, fa9, fa11_vote) are in kernels/scratch/.
#include <stdexcept>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_prefill_wgmma.cuh"
#include "kernels/common.cuh"

namespace servelab::kernels {

bool wgmma_device() {
#if defined(SERVELAB_HAS_SM90A)
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

bool prefill_wgmma_supported(int head_dim) { return head_dim == prefill_wgmma::kHD && wgmma_device(); }

namespace prefill_wgmma {

Params make_params(const PrefillAttentionArgs& a, int64_t& grid) {
  if (a.shape.n_kv_heads <= 0 || a.n_heads % a.shape.n_kv_heads != 0)
    throw std::invalid_argument("prefill_attention_wgmma: n_heads must be a multiple of n_kv_heads");
  if (!prefill_wgmma_supported(a.shape.head_dim))
    throw std::invalid_argument("prefill_attention_wgmma: needs an sm_90a build on a compute 9.0 device and head_dim 128 (got " +
                                std::to_string(a.shape.head_dim) + ")");
  Params p{};
  p.q = a.q;
  p.q_row_stride = a.q_row_stride;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.kv_row = a.shape.row_elems();
  p.n_heads = a.n_heads;
  p.n_kv = a.shape.n_kv_heads;
  p.group = a.n_heads / a.shape.n_kv_heads;
  p.n_seqs = a.n_seqs;
  p.query_start = a.query_start;
  p.context_lens = a.context_lens;
  p.kv = a.kv;
  p.block_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == a.kv.block_size) p.block_shift = sh;
  p.scale_log2 = a.scale * kLog2e;
  p.out = a.out;
  p.out_row_stride = a.out_row_stride;
  p.n_slots = a.shape.n_slots;
  // Upper bound of Σ ceil(q_len · group / 128) per KV head; blocks past the real count return.
  grid = int64_t(ceil_div(int64_t(a.n_tokens) * p.group, kBM) + a.n_seqs) * p.n_kv;
  if (grid > 0x7fffffff) throw std::invalid_argument("prefill_attention_wgmma: batch too large for one grid");
  return p;
}

void run_ws(const PrefillAttentionArgs& a, WsVariant v, cudaStream_t stream) {
  if (a.n_seqs == 0 || a.n_tokens == 0) return;
  int64_t grid = 0;
  const Params p = make_params(a, grid);
  launch_ws(p, int(grid), v, a.dtype, stream);
}

}  // namespace prefill_wgmma

namespace {
bool whole_tile_boxes(const KvAddressing& kv) {
  return kv.kind == KvLayoutKind::naive || (kv.block_size >= prefill_wgmma::kBN && (kv.block_size & (kv.block_size - 1)) == 0);
}
}  // namespace

void prefill_attention_wgmma(const PrefillAttentionArgs& a, cudaStream_t stream) {
  using prefill_wgmma::WsVariant;
  prefill_wgmma::run_ws(a, whole_tile_boxes(a.kv) ? WsVariant::fa10 : WsVariant::fa11, stream);
}
void prefill_attention_wgmma_fa8(const PrefillAttentionArgs& a, cudaStream_t stream) {
  prefill_wgmma::run_ws(a, prefill_wgmma::WsVariant::fa8, stream);
}
void prefill_attention_wgmma_fa10(const PrefillAttentionArgs& a, cudaStream_t stream) {
  prefill_wgmma::run_ws(a, prefill_wgmma::WsVariant::fa10, stream);
}
void prefill_attention_wgmma_fa11(const PrefillAttentionArgs& a, cudaStream_t stream) {
  prefill_wgmma::run_ws(a, prefill_wgmma::WsVariant::fa11, stream);
}

}  // namespace servelab::kernels
