#pragma once
// Attention over the KV cache on the GPU. Host-callable launchers; every pointer is device memory.
// KV arenas are per layer K and V, each [n_slots, n_kv_heads, head_dim] (kernels/README.md).
// Supported: head_dim 32, 64, 128; any GQA ratio; any block size; bf16 (fp16 when built with
// SERVELAB_KERNELS_FP16).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/step_input.h"

namespace servelab::kernels {

enum class ScalarType { bf16, f16 };

/// Largest thread-block cluster of splits DecodeAttentionArgs::max_cluster_splits takes
/// (non-portable above 8: Hopper places 16).
constexpr int kMaxClusterSplits = 16;

/// Split policy for decode attention (FlashDecoding): each sequence's context is cut into splits
/// of split_len positions, each computed by its own blocks; the last block of a (sequence, KV head)
/// to finish merges the splits in split order, in the same launch.
struct SplitPolicy {
  /// 0: choose from the batch so the grid fills the GPU (fast). > 0: every split is exactly this
  /// many positions and the split merge always runs, so a sequence's result depends only on its own
  /// context (batch-invariant mode). Must be a multiple of 16.
  int fixed_split_len = 0;
  /// Auto mode only: > 0 cuts the contexts for this many blocks per multiprocessor, as given; 0
  /// (default) aims for one block per SM on the tensor-core kernel (splits of >= 128 positions)
  /// and 4 per SM on the CUDA-core one (>= 64), and avoids grids of 1-1.6 waves (long tails), as
  /// chosen from H100 measurements (results/gpu/, kernels/README.md). kernel_bench --sweep compares.
  int blocks_per_sm = 0;
  /// Auto mode only: > 0 the fewest positions a split holds (rounded up to 64 like every auto
  /// split); 0 (default) 128 on the tensor-core kernel (one pass), 64 on the CUDA-core one.
  /// kernel_bench --sweep compares (min512, min4096).
  int min_split_len = 0;
};

/// One decode step: one query row per sequence.
struct DecodeAttentionArgs {
  ScalarType dtype = ScalarType::bf16;
  const void* q = nullptr;        ///< row r at q + r * q_row_stride: [n_heads, head_dim]
  int64_t q_row_stride = 0;       ///< elements between rows (n_heads * head_dim when packed)
  const int32_t* query_start = nullptr;  ///< [n_seqs + 1] or null: sequence s uses row query_start[s+1]-1 (else s)
  const void* k_cache = nullptr;  ///< [n_slots, n_kv_heads, head_dim]
  const void* v_cache = nullptr;
  KvShape shape;
  int n_heads = 0;
  int n_seqs = 0;
  const int32_t* context_lens = nullptr;  ///< [n_seqs], >= 1
  KvAddressing kv;                ///< device block tables / base slots
  int max_context = 0;            ///< host-side upper bound of context_lens (sizes the grid)
  float scale = 1.0f;
  void* out = nullptr;            ///< row like q, at out + r * out_row_stride
  int64_t out_row_stride = 0;
  float* workspace = nullptr;     ///< decode_attention_workspace_bytes() bytes, zeroed once (see there)
  size_t workspace_bytes = 0;
  SplitPolicy split;
  /// GQA (n_heads / n_kv_heads >= 2) at head_dim 64 or 128 runs on tensor cores (mma.sync); false
  /// keeps every shape on the CUDA-core kernel (comparison in kernel_bench and the tests).
  bool tensor_cores = true;
  /// Programmatic dependent launch (common.cuh) where the step's kernels use it (pdl_enabled()):
  /// 0 a plain launch; 1 a block waits at the top for the kernel that wrote q and the step's K/V,
  /// and the next kernel may start once every block runs; 2 the same wait, the next kernel
  /// started once every block is done with its K/V (before the split merge).
  int pdl = 1;
  /// Tensor-core kernel, auto split only: when a context is cut into 2..max_cluster_splits splits
  /// and the grid has at most one block per SM, the splits of a (sequence, KV head) run as one
  /// thread-block cluster and merge in distributed shared memory (no workspace round trip).
  /// Up to kMaxClusterSplits (above 8 where the device places such clusters; else the workspace
  /// merge); 0 or 1 always merges through the workspace (comparison). Default 8: clusters of 16
  /// were slower than the workspace merge (H100, kernels/README.md).
  int max_cluster_splits = 8;
  /// Tensor-core kernel with at most one block per SM and splits of more than one pass (128
  /// positions): each pass's K loads for the next pass are
  /// issued right after its Q·Kᵀ and each V step's right after its P·V (loads overlap the softmax
  /// and the products); false loads a pass only when the previous one is done (comparison). The
  /// arithmetic and its order are the same either way, so the bits are too (the batch-invariance
  /// test compares a pipelined sequence alone with the same sequence in an unpipelined batch).
  bool pipeline = true;
  /// Tensor-core kernel: the load pipeline runs where the grid has at most this many blocks per
  /// SM (1 or 2; the pipelined kernel's 252 registers at head_dim 128 round to 256 a thread, so two
  /// blocks of 128 threads fill the 64K registers of an SM). 0 (default): chosen with the split
  /// (decode_attention_split: 2 where the auto split runs two blocks per SM with the pipeline,
  /// else 1). The bits do not depend on it (same arithmetic, same order).
  int pipeline_blocks_per_sm = 0;
  /// Split merge through the workspace (DecodeSplit::reduce): how a block counts its arrival.
  /// true (default since the seventh pass): a block barrier, then one thread's
  /// `atom.add.acq_rel.gpu` on the split counter (the release covers the block's stores, which
  /// the barrier ordered before it; the acquire, followed by a barrier, the other blocks'
  /// partials), no fence.sc; +0.1 to +4% on every shape that merges through the workspace
  /// (kernels/README.md). false: every thread `__threadfence()`s (fence.sc.gpu) after storing its
  /// part of the partial, then one thread adds to the counter, and the last block fences again
  /// before reading the partials. The same arithmetic in the same order: the same bits.
  bool release_arrive = true;
};

/// How decode_attention cuts the contexts for these arguments on a GPU with n_sms multiprocessors.
struct DecodeSplit {
  int split_len = 0;   ///< positions per split
  int n_splits = 1;    ///< splits of the longest context (the grid's depth)
  bool reduce = false; ///< partial results go through the workspace, merged by each column's last block
  bool tensor_cores = false;  ///< the tensor-core kernel runs (see DecodeAttentionArgs::tensor_cores)
  bool cluster = false;  ///< the splits merge in a thread-block cluster (no workspace; see max_cluster_splits)
  bool pipeline = false; ///< the tensor-core kernel's load pipeline runs (see DecodeAttentionArgs::pipeline)
  int blocks_per_sm = 1; ///< blocks per SM the cut aims at (auto split; 1 with a fixed split)
};
DecodeSplit decode_attention_split(const DecodeAttentionArgs& a, int n_sms);
/// Workspace for the partial results, [n_seqs, n_heads, n_splits, head_dim + 2] floats, and the
/// split counters: (head_dim + 3) * 4 bytes per (sequence, head, split). In auto mode n_splits never
/// exceeds kMaxAutoSplits; with a fixed split, ceil(max_context / split_len). The counters are the
/// last workspace_bytes / (4 (head_dim + 3)) ints of the workspace, whatever the call: they must be
/// zero before the first call on a fresh workspace (cudaMemset it once after allocating it), and
/// every call leaves them zero, so one workspace serves any later call (and CUDA graph replay) of
/// at most n_seqs * n_heads * n_splits (sequence, head, split) triples.
size_t decode_attention_workspace_bytes(int n_seqs, int n_heads, int head_dim, int n_splits);
constexpr int kMaxAutoSplits = 64;
/// Blocks of the tensor-core decode kernel (128 threads) one SM of the current device holds at
/// once (cudaOccupancyMaxActiveBlocksPerMultiprocessor), with or without the load pipeline;
/// head_dim 64 or 128, else throws std::invalid_argument.
int decode_mma_resident_blocks(ScalarType dtype, int head_dim, bool pipeline);
/// One launch (the splits merged by their last block). Throws std::invalid_argument on an
/// unsupported head_dim or a workspace smaller than decode_attention_workspace_bytes asks.
void decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream);

/// A varlen batch of prefill (or mixed) rows: causal, each sequence attending to its cached prefix
/// and its own chunk. K/V of the rows are already in the cache.
struct PrefillAttentionArgs {
  ScalarType dtype = ScalarType::bf16;
  const void* q = nullptr;        ///< [n_tokens] rows of [n_heads, head_dim] at q_row_stride
  int64_t q_row_stride = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  KvShape shape;
  int n_heads = 0;
  int n_seqs = 0;
  int n_tokens = 0;               ///< host copy of query_start[n_seqs]
  const int32_t* query_start = nullptr;   ///< [n_seqs + 1]
  const int32_t* context_lens = nullptr;  ///< [n_seqs]
  KvAddressing kv;
  float scale = 1.0f;
  void* out = nullptr;
  int64_t out_row_stride = 0;
};

/// Tiled, online-softmax attention on tensor cores. Runs prefill_attention_wgmma where
/// prefill_wgmma_supported(head_dim) (an sm_90a build on a compute 9.0 device, head_dim 128), else
/// prefill_attention_mma: the choice depends only on the device and the head dim (and, within
/// prefill_attention_wgmma, on the KV layout, between two kernels with the same bits), never on the
/// batch. In both, key tiles are aligned to absolute positions, so a row's result does not depend
/// on the other rows of its tile or batch: chunked prefill gives the same bits as a full prefill,
/// and the kernel is batch-invariant by design.
void prefill_attention(const PrefillAttentionArgs& a, cudaStream_t stream);
/// FlashAttention-2 structure on mma.sync (64-row tiles, K/V double-buffered by cp.async, O in
/// registers); any architecture the library is built for; head_dim 32, 64, 128.
void prefill_attention_mma(const PrefillAttentionArgs& a, cudaStream_t stream);
/// FlashAttention-3 structure on wgmma (sm_90a): 128-row tiles over 2 consumer warpgroups,
/// 128-position key tiles in 3 smem stages, P in registers. Runs one of the kernels below
/// (by KV layout alone, never the batch: prefill_attention_wgmma_fa10 for the naive layout and paged
/// blocks of 2^k >= 128 slots, prefill_attention_wgmma_fa11 otherwise; all three give fa8's bits).
/// Throws std::invalid_argument where prefill_wgmma_supported(head_dim) is false. The superseded
/// wgmma kernels are in kernels/scratch/ (built with -DSERVELAB_KERNEL_SCRATCH=ON).
void prefill_attention_wgmma(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa8 (kernels/notes-prefill.md, seventh pass, second call): FlashAttention-3's warp-specialized
/// ping-pong with FlashAttention-4's conditional rescaling: a row's kept maximum moves only where a
/// tile's maximum passes it by more than 8 in the exp2 domain (P <= 2^8), so the O rescale is
/// skipped warp by warp on almost every tile; K/V gathered by cp.async through the slot mapping.
/// The frozen baseline fa10 and fa11 are held to (the same bits) and their fallback; a row's bits
/// do not depend on the batch, the chunking or the KV layout.
void prefill_attention_wgmma_fa8(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa10 (kernels/notes-prefill.md, ninth pass): fa8's consumers fed by v6's TMA producer (one
/// thread loads whole key tiles by cp.async.bulk.tensor: a 128-row box a head_dim half for the
/// naive layout and paged blocks of >= 128 slots, a box a block for blocks of 16-64 slots; the
/// tile max_pos cuts by cp.async); other block sizes run fa8. The same shared memory as fa8, so
/// fa8's bits on every layout.
void prefill_attention_wgmma_fa10(const PrefillAttentionArgs& a, cudaStream_t stream);
/// fa11 (kernels/notes-prefill.md, tenth pass): fa8's consumers; the producer decides per key tile:
/// where the tile is whole and its 128 slots are consecutive in the arena (the naive layout, a block
/// of >= 128 slots, or blocks the table holds in one physical run, any block size), thread 0 loads
/// it as two 128-row boxes by cp.async.bulk.tensor; else the producer warpgroup gathers it by
/// cp.async as fa8 does. The same shared memory as fa8, so fa8's bits on every layout and table.
/// Each producer warp learns which tiles are TMA tiles 32 at a time (one ballot over its lanes'
/// table checks). +9-10% over fa8 on the engine's run tables, 2-5% behind it on shuffled ones.
void prefill_attention_wgmma_fa11(const PrefillAttentionArgs& a, cudaStream_t stream);
/// True when this build has sm_90a code and the current device is compute 9.0: the wgmma kernels'
/// (prefill attention, kernels/lora_fused_gemm.h) condition.
bool wgmma_device();
/// True when wgmma_device() and head_dim is 128.
bool prefill_wgmma_supported(int head_dim);

}  // namespace servelab::kernels
