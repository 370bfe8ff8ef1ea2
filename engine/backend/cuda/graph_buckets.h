#pragma once
// Which steps the CUDA backend replays as CUDA graphs, and the key of each captured graph: decode
// steps (one row per sequence; verification steps too, as one-row sequences: verify_rows.h),
// padded to a batch bucket, sized for a context bucket. Private to the backend's own files.
#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>

namespace servelab::cuda_impl {

/// Decode batch buckets a CUDA graph is captured for; larger batches run eagerly.
constexpr int kGraphBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512};
/// Longest context a graph serves (its block-table rows and decode grid are sized for it).
constexpr int kGraphMaxContext = 16384;
/// Block-table changes a graph step's input has room for (persistent tables); a step with more
/// (rare: many sequences swapped in at once) runs eagerly.
constexpr int kGraphMaxTableUpdates = 65536;

/// Verification steps of at most this many rows run as one-row decode sequences through the
/// decode graphs (verify_rows.h). Each such row reads its whole sequence's K/V again, so larger
/// steps stay on the eager prefill-attention path, which reads it once: on an H200 (llama2-7b,
/// contexts ~390, k = 4, results/gpu/spec/h200-2026-11-29-5cd01fe, SpecGpuBench) a graphed
/// verification step took 4.32 / 9.89 / 16.67 ms at 1 / 32 / 64 users (5 / 160 / 320 rows) against
/// 4.29 / 8.89 / 14.69 ms eager: level at batch 1, 11% and 14% slower at 32 and 64 users.
constexpr int kVerifyGraphMaxRows = 16;
/// With the multi-row decode attention (CudaBackendOptions::verify_rows_kernel, off by default:
/// kernels/attention_decode_rows.h, each sequence's K/V read once for its rows), verification
/// steps of up to this many rows replay the decode graphs (the largest bucket). Measured there:
/// 4.52 / 9.83 / 16.25 ms (1 / 32 / 64 users, the run above), slower than eager at every load.
constexpr int kVerifyRowsGraphMaxRows = 512;
/// (row, head) pairs a block of the multi-row attention computes (DecodeRowsArgs::queries_per_block):
/// 4 measured faster than 8 at every group-1 shape of kernel_bench --verify-rows (H200).
constexpr int kVerifyRowsQueries = 4;

inline int graph_bucket(int n_seqs) {
  for (int b : kGraphBuckets)
    if (b >= n_seqs) return b;
  return 0;
}

/// Context bucket: the decode grid is sized for the bucket, not the step (empty splits exit).
inline int context_bucket(int max_context) {
  int c = 256;
  while (c < max_context) c *= 2;
  return c;
}

struct GraphKey {
  int bucket, context, kind, block_size;
  bool lora;   // with the LoRA launches (any mix of slots replays it) or without any
  bool draws;  // with the draws (sampling); without: the forward up to the logits (late masks)
  bool rows;   // a verification step through decode_attention_rows (row spans in the input)
  bool probs;  // the draws write their distributions (Step::want_draw_probs: a draft model's q)
  bool operator<(const GraphKey& o) const {
    return std::tie(bucket, context, kind, block_size, lora, draws, rows, probs) <
           std::tie(o.bucket, o.context, o.kind, o.block_size, o.lora, o.draws, o.rows, o.probs);
  }
};
struct GraphEntry {
  cudaGraphExec_t exec = nullptr;
  uint64_t epoch = 0;
  int eager_runs = 0;  // the first run of a shape is eager: it warms the GEMM algorithm cache
};

}  // namespace servelab::cuda_impl
