#pragma once
// Grouped multi-LoRA (Punica's SGMV, S-LoRA's grouped kernels): the step's rows grouped by adapter
// slot once (lora_plan), so each adapter's A and B are read once per tile of up to
// kLoraTileRows rows of that adapter instead of once per row, for decode and prefill rows alike.
// Same pool layout and result as kernels/lora.h's BGMV pair (LoraPool), three kernels:
//   lora_plan:   rows with an adapter sorted by slot (perm), cut into tiles (slot, start, count);
//                once per step, read by every layer's launches. Rows with slot -1 (no adapter,
//                graph padding) are in no tile: the shrink and expand never touch them.
//   lora_sgmv_shrink: a block per (tile, chunk of the input width): the tile's dot products of x
//                with A[slot] over its chunk into fp32 partial sums, so a 4096- or 11008-wide
//                input spreads over many blocks even when the step has one adapter.
//   lora_sgmv_expand: a block per (tile, 256 output columns): the tile's xa (the sum of the
//                chunks' partials, times the slot's scale) in shared memory, each thread one
//                column of B[slot] in registers, added into y for every row of the tile; or
//                (LoraSgmvConfig::expand_by_rows) a block per 8 consecutive rows of perm, each
//                row's B column of its own slot.
// The grids are sized from the row count (lora_max_tiles), each block looping over the plan's
// items (blocks past them exit at once), so a CUDA graph of a fixed row count replays any mix
// of slots.
// Reference: kernels/ref/lora_ref.h (lora_plan_ref; the arithmetic is lora_shrink_ref then
// lora_expand_segments_ref).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/lora.h"
#include "kernels/lora_delta.h"

namespace servelab::kernels {

/// Rows of one adapter a tile holds at most (registers per thread grow with it).
inline constexpr int kLoraTileRows = 8;
/// Input elements one pass of a shrink warp covers (32 lanes × 8): chunks are multiples of it.
inline constexpr int kLoraChunkUnit = 256;

/// The shrink's chunking aims at this many blocks by default (4 an SM of an H100/H200).
inline constexpr int kLoraDefaultTargetBlocks = 528;

/// Launch variants of the grouped kernels, chosen on the host at each launch (engine_bench
/// --lora measures them side by side through CudaBackend::set_lora_kernels). Every variant
/// computes the same sums in the same order. The defaults: the expand by rows without the
/// register cap (the best decode ratio at every mix of 2026-11-29's ce0f498 call, 1 to 64
/// adapters, once no expand followed the products), 528, a block per item (a bound of 3 an SM
/// changed no decode step beyond noise and made the 512-token prefill 7% slower), every delta
/// computed beside its product (o_proj's and down_proj's into the residual, q|k|v's and
/// gate|up's into a scratch the kernels after the products add), the expands with PDL after
/// their shrinks; on an H200, docs/lora.md "GPU figures".
struct LoraSgmvConfig {
  /// The expand's blocks: false, one per (slot tile, 256 columns), each B column read once for
  /// the tile's rows; true, one per (kLoraTileRows consecutive rows of the plan's order, 256
  /// columns), each row with its own slot (rows of one slot still share B through the cache), so
  /// a step of many adapters makes n_rows / 8 blocks of 8 rows, not one block per 1-row tile.
  bool expand_by_rows = true;
  /// The expand compiled for at least 3 blocks an SM (at most 80 registers a thread); false: no cap.
  bool expand_register_cap = false;
  /// The shrink's chunking aims at this many blocks (lora_chunk_len).
  int shrink_target_blocks = kLoraDefaultTargetBlocks;
  /// Slot-tile shrink and expand: at most this many blocks per multiprocessor, each block looping
  /// over the step's (tile, chunk) or (tile, column block) items, so a step whose plan has few
  /// tiles launches no blocks that only read the tile count and exit (the grid is sized for the
  /// most tiles the row count can make: lora_max_tiles). 0: one block per possible item.
  int grid_blocks_per_sm = 0;
  /// Read by the cuda backend, not the kernels (cuda_ops.h LoraHook): the products whose output is
  /// added into the residual stream (o_proj, down_proj) get their delta added into the residual
  /// itself, shrink and expand both on the side stream beside the product, so neither is on the
  /// step's critical path; false: their expand follows the product, as for q|k|v and gate|up.
  bool residual_beside = true;
  /// Read by the cuda backend (cuda_ops.h LoraHook): in an eager step (a prefill or chunk; never
  /// in a CUDA graph), runs of at least this many consecutive rows of one adapter go to the tensor
  /// cores (kernels/lora_gemm.h: a shrink and an expand GEMM per run and product), at most
  /// gemm_max_runs of them (the longest); the other rows stay on the grouped kernels. 0: never.
  /// 16 and 8: on an H200 one prompt of 16 / 32 / 48 tokens costs 0.887 / 0.893 / 0.858 of the
  /// base step this way against 0.825 / 0.774 / 0.739 on the grouped kernels (2026-12-02), runs of
  /// 256-2048 rows far less, 16 runs of 64 rows about the same (docs/lora.md "GPU figures").
  int gemm_min_rows = 16;
  int gemm_max_runs = 8;
  /// Read by the cuda backend: the shrinks (and the residual expands) on a side stream beside the
  /// products (true) or in line on the backend's stream, before them (false).
  bool side_stream = true;
  /// Read by the cuda backend, in steps whose every adapter row is on the grouped kernels (every
  /// CUDA graph): gate|up's expand also runs on the side stream, writing the delta alone into a
  /// scratch (lora_sgmv_expand with accumulate = false), and lora_silu_mul adds it to the
  /// product's output inside SiLU·mul, so no LoRA launch follows the gate|up product.
  bool gate_up_beside = true;
  /// Read by the cuda backend, in decode steps with fusion on and a 16-bit KV cache whose every
  /// adapter row is on the grouped kernels (every decode graph): q|k|v's expand on the side stream
  /// too, the delta alone into a scratch, added by the RoPE + K/V write kernel
  /// (kernels::rope_kv_write's QkvArgs::delta), so no LoRA launch follows the q|k|v product.
  bool qkv_beside = true;
  /// Read by the cuda backend: the two above also in eager steps that are not plain decodes
  /// (prefills, chunks) and where tensor-core runs run (gemm_min_rows): the runs' expand GEMMs
  /// write the delta alone (beta 0) beside the product, the grouped rows' expand likewise, so no
  /// LoRA launch follows the q|k|v or gate|up product. A prompt beside running decodes (runs and
  /// grouped rows) takes mixed_grouped_beside instead where that is on, a step whose gate|up runs
  /// SiLU·mul expands (gate_up_in_silu_rows) keeps its expands after the products, and so do steps
  /// with a run longer than sm_reserve_max_run_rows. With the products leaving
  /// SMs to the side stream (product_sm_reserve) this is the default since 2026-12-03: on an H200
  /// one prompt's prefill step 0.91-0.93 / 0.84-0.85 of the base step at 128 / 256 tokens against
  /// 0.86 / 0.79 with every SM and the expands after; in mixed steps the expands after the
  /// products were level or better (docs/lora.md). Before, on every SM, the wide expand beside the
  /// product took SMs from it: 1-3% slower at every prefill shape (2026-12-01, 3f9c88e).
  bool eager_beside = true;
  /// Read by the cuda backend, in eager steps with tensor-core runs and rows left to the grouped
  /// kernels (eager_beside off, no fused product): a prompt beside running decodes, a serving run's
  /// usual prefill step. The grouped rows' shrink and expand go first on the side stream (the
  /// expand right after its shrink, with PDL), then the runs' shrinks (and o_proj's and
  /// down_proj's expands into the residual); the grouped rows' q|k|v and gate|up deltas are
  /// expanded there into the scratch, which the RoPE + K/V write (fusion on, a 16-bit cache) and
  /// SiLU·mul add (not where SiLU·mul expands the runs: gate_up_in_silu_rows), so only the runs'
  /// expands follow the products, as in a prompt alone. Off: the grouped rows' expands follow the
  /// runs' after the q|k|v and gate|up products, and their side work after the runs'.
  bool mixed_grouped_beside = true;
  /// Read by the cuda backend, in eager steps: the grouped kernels' grids and partial sums sized
  /// for the adapter rows left to them, counted on the host (LoraHook::plan_rows), rather than for
  /// every row of the step (a prompt of 256 rows beside 4 decodes: grids for 260 rows, nearly all
  /// blocks exiting at once). Graphs size for their row count (any mix of slots replays).
  bool size_by_plan_rows = true;
  /// Read by the cuda backend: an expand that follows its shrink on the same stream (into the
  /// residual, or the delta alone) is launched with programmatic dependent launch
  /// (lora_sgmv_expand's pdl), so its launch and its loads of the plan, y and B overlap the shrink.
  bool expand_pdl = true;
  /// Slot tiles (expand_by_rows false): the expand picks on the device, from the plan, by rows when
  /// the step's tiles outnumber twice its blocks of 8 rows (many adapters with few rows each: by
  /// rows was faster there, slot tiles with few adapters), so one CUDA graph serves both mixes.
  /// Compiled for 2 blocks an SM (128 registers), whatever expand_register_cap says.
  bool expand_auto = true;
  /// Read by the cuda backend, where gate|up's (gate_up_beside) and q|k|v's (qkv_beside) deltas
  /// would be expanded beside their products into a scratch: no expand launch for that product;
  /// its shrink finishes each row's xa (lora_sgmv_shrink's xa_rows) and the kernel after the
  /// product computes the delta itself (kernels/lora_delta.h: lora_silu_mul_xa, rope_kv_write's
  /// QkvArgs::lora), so a layer has 6 LoRA launches instead of 8 with both. Off: on the H200
  /// (2026-11-29, b54612e) the delta computed in line, B read again for every row, cost more than
  /// the two launches beside the products it saves: b32 / 1 adapter 0.759 of the base step with
  /// both against 0.882 without, b64 0.546 against 0.826 (docs/lora.md "GPU figures").
  bool gate_up_in_consumer = false;
  bool qkv_in_consumer = false;
  /// Read by the cuda backend, in eager steps whose gate|up expand follows the product (not
  /// eager_beside) and whose tensor-core runs hold at most this many rows in all: their gate|up
  /// delta computed by SiLU·mul from the runs' xa on the tensor cores (kernels::lora_silu_mul_runs),
  /// no expand GEMM for them (at most kLoraConsumerRuns runs of rank <= 32, else the expand as
  /// before). 0: never. 64: on an H200 (2026-12-02) one prompt of 16-64 tokens took 0.015-0.05 of
  /// the base step less this way, of 128 the same, of 256-512 0.01-0.02 more (docs/lora.md).
  int gate_up_in_silu_rows = 64;
  /// Read by the cuda backend, in eager steps on one GPU with 16-bit weights (eager_beside is off
  /// in them) whose tensor-core runs hold fused_product_min_rows to fused_product_max_rows rows in all: each
  /// product whose shape and pool kernels::lora_fused_fits takes runs as kernels::LoraFusedGemm,
  /// the runs' shrink and expand inside it (no LoRA launch for them, no branch); the rows left to
  /// the grouped kernels as before. max 0: never. Off by default: on an H200 (2026-12-02) our
  /// product is slower than cuBLASLt's by more than the LoRA work it takes in except near 128
  /// rows (results/gpu/lora/2026-12-02-h200-fused-gemm/, docs/lora.md).
  int fused_product_min_rows = 65;
  int fused_product_max_rows = 0;
  /// Read by the cuda backend, in plain decode steps whose products take our gemv (up to 16 rows:
  /// Gemm takes products with a LoRA epilogue there, two column tiles from 9; 16-bit weights, one GPU): each product's delta is added in the gemv's own epilogue from the
  /// rows' xa, which the grouped shrink finishes in the gemv's first in_product_shrink_blocks
  /// blocks (LoraGemvShrink): no LoRA launch at all, no side stream, RoPE + K/V write and
  /// SiLU·mul fused into their products again, the products still launched with PDL after the
  /// norms.
  bool in_product = true;
  /// Blocks of each product's gemv that run its shrink (in_product), and the chunks its input
  /// is cut into (at most 16; a tile's chunks are summed by the last block to finish one).
  int in_product_shrink_blocks = 128;
  int in_product_chunks = 16;
  /// The in-product shrink's items are single rows (true; B of one adapter read once a row from
  /// L2) or the plan's slot tiles of up to 8 rows (one block doing a whole tile's chunk).
  bool in_product_row_items = true;
  /// Read by the cuda backend, in steps whose LoRA work runs on the side stream beside cuBLASLt
  /// products (decode from 17 rows, prefills, mixed steps): the products are asked of cuBLASLt for
  /// this many SMs fewer than the device has (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), so that the
  /// side stream's shrinks and expands find SMs free beside a product instead of waiting for its
  /// grid to drain. 0: every SM.
  int product_sm_reserve = 8;
  /// Read by the cuda backend, in eager steps with tensor-core runs: the runs' shrink GEMMs asked
  /// of cuBLASLt for this many SMs (the SMs product_sm_reserve leaves). 0: every SM.
  int run_shrink_sms = 8;
  /// Read by the cuda backend: the two above, and eager_beside, only in steps whose longest
  /// tensor-core run holds at most this many rows; a longer run's products take every SM with
  /// its expands after them. On an H200 (2026-12-03, engine_bench --lora-sm-sweep) 8 SMs left
  /// took one prompt of 256 tokens from 0.83-0.85 of the base step to 0.89-0.92 and 384 beside 4
  /// decodes from 0.86 to 0.89-0.91 (384 alone 0.01 lower), but cost 0.02-0.05 from 512 tokens
  /// to 1,024 and for 512 beside decodes (the best reserve there moved with the rows: 12 at 384,
  /// 16 at 512, none at 768); 8 x 256 (runs of 256) gained 0.05-0.07 (docs/lora.md).
  int sm_reserve_max_run_rows = 384;
  /// Diagnostic, engine_bench only (the results are wrong): the plan is built from no rows, so
  /// every LoRA launch of the step runs and finds no work: what the launches, their empty blocks
  /// and the side stream's forks and joins cost alone.
  bool empty_plan = false;
  /// Diagnostic, engine_bench only (the results are wrong): in eager steps, the tensor-core runs'
  /// shrinks (bit 1) or expands (bit 2) are not launched, the forks and joins kept: what each
  /// part of a prefill's LoRA cost is in the step (engine_bench --lora-prefill).
  int skip_runs = 0;
  /// Diagnostic, engine_bench only (the results are wrong): the grouped kernels' shrinks (bit 1)
  /// or expands (bit 2) are not launched (engine_bench --lora-prefill's `sgmv` parts).
  int skip_grouped = 0;
};

/// The step's rows grouped by slot, on the device (sized with lora_max_tiles).
struct LoraPlan {
  int32_t* n_tiles = nullptr;    ///< [2]: tiles, then rows with an adapter (the length of perm)
  int32_t* tiles = nullptr;      ///< [max_tiles, 3]: slot, first index into perm, row count (1..kLoraTileRows)
  int32_t* perm = nullptr;       ///< [n_rows]: the rows with an adapter, by slot
  int32_t* perm_slot = nullptr;  ///< [n_rows]: each perm entry's slot
  LoraSgmvConfig config;         ///< host side: how the shrink and expand launch
  /// [max(max_tiles, n_rows)]: lora_sgmv_shrink's per-tile counters when it finishes xa rows, or
  /// per row for a gemv's shrink of rows (zero between launches: zeroed once when allocated, each
  /// launch leaves them 0); null: no xa rows.
  int32_t* tile_done = nullptr;
  /// [n_gemv_done]: a count per gemv of the step that runs its shrink inside
  /// (LoraGemvShrink::done), zeroed by lora_plan at each step's start.
  int32_t* gemv_done = nullptr;
  int n_gemv_done = 0;
};

/// Tiles a step of n_rows rows over n_slots slots can need: each slot's last tile may be partial.
inline int lora_max_tiles(int n_rows, int n_slots) {
  const int slots = n_rows < n_slots ? n_rows : n_slots;
  return (n_rows + kLoraTileRows - 1) / kLoraTileRows + slots;
}
/// Input elements per shrink chunk for a product of width n_in over n_rows rows: enough chunks
/// that the tiles the rows make fill the GPU (decode: many; prefill: the rows already do).
/// target_blocks: LoraSgmvConfig::shrink_target_blocks.
int lora_chunk_len(int n_in, int n_rows, int target_blocks = kLoraDefaultTargetBlocks);
inline int lora_n_chunks(int n_in, int n_rows, int target_blocks = kLoraDefaultTargetBlocks) {
  const int len = lora_chunk_len(n_in, n_rows, target_blocks);
  return (n_in + len - 1) / len;
}
/// fp32 partial sums the shrink writes for n_rows rows: [n_chunks, n_rows, pool.total_rank()].
inline size_t lora_partial_floats(const LoraPool& pool, int n_rows, int target_blocks = kLoraDefaultTargetBlocks) {
  return size_t(lora_n_chunks(pool.n_in, n_rows, target_blocks)) * size_t(n_rows) * size_t(pool.total_rank());
}
/// The most partial floats per row any row count needs for a product of width n_in and
/// total_rank ranks (a scratch bound: chunks never exceed n_in / kLoraChunkUnit rounded up).
inline size_t lora_partial_floats_per_row(int n_in, int total_rank) {
  return size_t((n_in + kLoraChunkUnit - 1) / kLoraChunkUnit) * size_t(total_rank);
}

/// Groups rows by row_slot[r] in [0, n_slots) (others: no adapter) into plan (perm_slot and the
/// row count included), and zeroes plan.gemv_done. One block.
/// Rows of a slot keep no particular order in perm (every row's result is computed alone).
/// Throws std::invalid_argument for n_slots < 1.
void lora_plan(const int32_t* row_slot, int n_rows, int n_slots, const LoraPlan& plan, cudaStream_t stream);
/// partial[j, p, k] = Σ_{i in chunk j} x[perm[p], i] · A[slot, k, i] for every tile's rows p;
/// partial holds lora_partial_floats(pool, n_rows). Throws std::invalid_argument for a bad pool
/// (as lora_shrink).
/// xa_rows (LoraSgmvConfig::gate_up_in_consumer, qkv_in_consumer) non-null: also xa_rows[perm[p], k] = scale[slot] ·
/// Σ_j partial[j, p, k] (fp32 [n_rows, total_rank], the sum the expand forms, in its order), by
/// the last block of each tile to finish (plan.tile_done, required then); rows without an adapter
/// untouched. kernels/lora_delta.h's consumers read it.
void lora_sgmv_shrink(ScalarType t, const void* x, const LoraPlan& plan, int n_rows, const LoraPool& pool,
                      float* partial, cudaStream_t stream, float* xa_rows = nullptr);
/// The shrink of lora_sgmv_shrink(x, plan, n_rows, pool, partial, xa_rows), finishing xa_rows,
/// as a gemv runs it in its first blocks (LoraInGemv; LoraSgmvConfig::in_product_shrink_blocks of
/// them), the step's launch-th such gemv (its count: plan.gemv_done[launch]). Throws
/// std::invalid_argument for a bad pool, a plan without tile_done, or launch outside
/// [0, plan.n_gemv_done).
LoraGemvShrink lora_gemv_shrink(const LoraPlan& plan, int n_rows, const LoraPool& pool, float* partial,
                                float* xa_rows, int launch);

/// y[perm[p], c0 + c] += Σ_k scale[slot] · (Σ_j partial[j, p, m · max_rank + k]) · B[slot, c, k]
/// (m: c's segment) for every tile's rows; rows in no tile untouched. y 16-bit, row stride ld_y.
/// accumulate = false: y[perm[p], c0 + c] = the delta alone (rounded once), for every column.
/// pdl: launched with programmatic dependent launch, for an expand that follows its shrink on the
/// same stream (the shrink launched without it): its blocks load the plan, y and B while the
/// shrink runs and wait for it before reading the partials. The caller guarantees that nothing
/// between the shrink's start and the expand writes y.
void lora_sgmv_expand(ScalarType t, const float* partial, const LoraPlan& plan, int n_rows, const LoraPool& pool,
                      void* y, int ld_y, int c0, cudaStream_t stream, bool accumulate = true, bool pdl = false);

}  // namespace servelab::kernels
