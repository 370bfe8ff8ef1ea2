#pragma once
// The superseded prefill attention kernels, kept with their tests and benchmark rows so that a
// later pass can be compared against them (kernels/notes-prefill.md has every figure), but out of
// the production library: built only with -DSERVELAB_KERNEL_SCRATCH=ON (library
// servelab_kernels_scratch, tests test_kernels_scratch_gpu). Each has the production kernels'
// contract (PrefillAttentionArgs, kernels/attention.h): varlen causal over paged or naive KV, a
// row's bits independent of the batch and the chunking. What runs in production: prefill_attention.
#include "kernels/attention.h"

namespace servelab::kernels {

/// v5: warp-specialized (a producer warpgroup gathers K/V by cp.async onto per-stage mbarriers;
/// no block-wide barrier per key tile). Same contract and bits per row as the others.
void prefill_attention_wgmma_ws(const PrefillAttentionArgs& a, cudaStream_t stream);
/// v5 with ping-pong: the two consumer warpgroups take turns issuing their GEMMs (named barriers),
/// so one's softmax overlaps the other's GEMMs (v5.1: the producer's table reads independent).
/// prefill_attention_wgmma ran this one until fa5.
void prefill_attention_wgmma_pingpong(const PrefillAttentionArgs& a, cudaStream_t stream);
/// v6: v5.1 ping-pong whose producer loads whole key tiles by TMA (one thread; tensor maps over
/// the arenas, one box per KV block and head_dim half) for the naive layout and paged blocks of
/// 2^k >= 16 slots, the tile max_pos cuts by cp.async; other block sizes run v5.1's producer.
/// The same smem contents, so the same bits as the ws and ping-pong kernels. Slower than v5.1 at
/// block size 16 (kernels/notes-prefill.md): selectable in tests and kernel_bench only.
void prefill_attention_wgmma_tma(const PrefillAttentionArgs& a, cudaStream_t stream);
/// v6.1: v5.1 ping-pong with a leaner producer on whole key tiles (8 table reads a thread for blocks
/// of 2^k >= 16 slots, no validity tests) and the O rescale skipped where no row of a warp changed
/// its maximum. The same bits as v5.1; fewer instructions, but no faster (kernels/notes-prefill.md).
void prefill_attention_wgmma_lean(const PrefillAttentionArgs& a, cudaStream_t stream);
/// v7: v6.1 on a persistent grid (at most one block per SM, or max_blocks where > 0): each block
/// takes (row tile, KV head) items in a snake over the longest-first order, and its producer loads
/// the next item's Q and K/V while the consumers finish this one. Each row's arithmetic is v6.1's:
/// the same bits. As fast as v6.1 (kernels/notes-prefill.md): selectable in tests and kernel_bench
/// only. Throws std::invalid_argument for max_blocks < 0.
void prefill_attention_wgmma_persist(const PrefillAttentionArgs& a, cudaStream_t stream, int max_blocks = 0);
/// v4.1: every thread loads, one __syncthreads per key tile.
void prefill_attention_wgmma_sync(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa5: v5.1 ping-pong whose consumers let the softmax run under P·V (kernels/notes-prefill.md,
/// fifth pass): the warpgroup index warp-uniform (descriptors on the uniform datapath), the O
/// rescale issued between the next S GEMM and its P·V (FlashAttention-3's order), and the P·V
/// wait kept below the softmax by a control-flow boundary (the wait for the next V stage). The
/// same arithmetic per row: the same bits as v5.1.
void prefill_attention_wgmma_fa5(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa6 (kernels/notes-prefill.md, sixth pass): fa5 with the softmax's row maxima as pairwise trees
/// (depth 5 instead of chains of 16) and the offset / correction factor computed without branches.
/// Max is exact and order-free and the values are unchanged: the same bits as fa5 and v5.1. As
/// fast as fa5 in its one call (kernels/notes-prefill.md): selectable in tests and kernel_bench.
void prefill_attention_wgmma_fa6(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa7 (kernels/notes-prefill.md, seventh pass): fa6 with fma_share (16, 24 or 32) of each
/// thread's 64 exponentials a key tile computed on the FMA pipe (FlashAttention-4's degree-3
/// polynomial, kernels/ref/exp2_poly.h) instead of the MUFU. Other bits than fa5 / fa6 (P within
/// 8.8e-5 relative before its 16-bit rounding), but the same contract: a row's bits do not depend on
/// the batch, the chunking or the KV layout. Throws std::invalid_argument for another fma_share.
void prefill_attention_wgmma_fa7(const PrefillAttentionArgs& a, cudaStream_t stream, int fma_share);
/// fa8 (kernels/notes-prefill.md, seventh pass, second call), part 0: fa6 with FlashAttention-4's
/// conditional rescaling: a row's kept maximum moves only where a tile's maximum passes it by more
/// than 8 in the exp2 domain (P <= 2^8), so the O rescale (64 FMUL a thread and tile) is skipped
/// warp by warp on almost every tile. Other bits than fa6, the same contract (a row's bits do not
/// depend on the batch, the chunking or the KV layout). Part 1: fa8 on v6.1's lean producer; part
/// 2: fa6's consumers on the lean producer (fa6's bits). Throws std::invalid_argument for another part.
void prefill_attention_wgmma_fa8_part(const PrefillAttentionArgs& a, cudaStream_t stream, int part);
/// fa9 (kernels/notes-prefill.md, eighth pass): fa8 with each row's sum l taken from the tensor
/// core: the P fragments of every P·V also multiply a 16 x 8 ones matrix (8 m64n8k16 a key tile,
/// 4 more accumulators rescaled with O), instead of 64 FADDs a thread and tile and the final
/// shuffles. l is then the sum of the 16-bit P that P·V uses. Other bits than fa8, the same
/// contract (a row's bits do not depend on the batch, the chunking or the KV layout).
void prefill_attention_wgmma_fa9(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa11 deciding per key tile by a shuffle and a vote of each producer warp (the tenth pass's call
/// 1: 5-7% slower than fa8 where every tile is gathered). fa8's bits.
void prefill_attention_wgmma_fa11_vote(const PrefillAttentionArgs& a, cudaStream_t stream);
/// y[i] = fa7's FMA-pipe exp2 of x[i] (device pointers, n floats): the kernels' bits, for the test
/// against exp2_poly::exp2_poly3. Throws std::invalid_argument for n < 0.
void prefill_exp2_poly(const float* x, float* y, int64_t n, cudaStream_t stream);
/// fa5's parts, for the tests and kernel_bench: part 0 = fa5; 1 = the second call's fa5 (P packed
/// before the P·V wait, no boundary); 2 = no boundary, P packed after the wait (FlashAttention-3's
/// order); 3 = the uniform warpgroup index alone (v5.1's order); 4 = the uniform index and the
/// boundary in v5.1's order; 5 = fa5 without ping-pong's turns; 6 = fa6; 7 = fa6's tree maxima
/// alone (fa5 otherwise). All the same bits. Throws std::invalid_argument for a part outside 0..7.
void prefill_attention_wgmma_fa5_part(const PrefillAttentionArgs& a, cudaStream_t stream, int part);
/// v1 (WMMA, O in shared memory, no overlap; head_dim 32, 64, 128): the same contract, slower.
void prefill_attention_wmma(const PrefillAttentionArgs& a, cudaStream_t stream);

}  // namespace servelab::kernels
