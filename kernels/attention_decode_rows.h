#pragma once
// Decode attention for several query rows per sequence (speculative verification: a sequence's
// last accepted token and its k drafts, k + 1 <= kMaxDecodeRows rows at consecutive positions,
// causal inside the rows). One CUDA block reads a split of the sequence's K/V once for all its rows
// and all the GQA heads it holds (kDecodeRowsQueries (row, head) pairs a block), instead of once
// per row as when each row runs as a one-row decode sequence.
//
// The step is given in its one-row form (engine/backend/cuda/verify_rows.h), so that the decode
// CUDA graphs' buckets, which count one row per sequence, serve it unchanged: entry s of the arrays
// is one row (query row query_start[s + 1] - 1, or s; context context_lens[s] = its position + 1;
// its owner's block-table row or base slot), and spans[s] says how rows group into sequences: the
// last row of a sequence of R rows has spans = R and the R - 1 before it (entries s - R + 1 .. s,
// contexts context_lens[s] - R + 1 .. context_lens[s], one table row) have spans = 0. A plain
// decode row is a sequence of one (spans = 1).
//
// Row j of a sequence sees positions [0, context_lens[s] - R + 1 + j): positions the later rows
// add are masked, and a split that holds none of a row's positions contributes exact zeros to
// its merge, so a row's bits depend on its own context, its K/V and the split length alone: with
// a fixed split (batch-invariant mode) they do not depend on how many rows its sequence has or
// on the rest of the batch (tested).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"

namespace servelab::kernels {

/// Most rows a sequence may have (verification of up to 7 drafts).
constexpr int kMaxDecodeRows = 8;
/// (row, query head) pairs one block computes against one KV head (DecodeRowsArgs::queries_per_block
/// may ask for 4: more blocks of fewer registers).
constexpr int kDecodeRowsQueries = 8;

struct DecodeRowsArgs {
  DecodeAttentionArgs base;          ///< n_seqs, context_lens, query_start, kv: per row (see above)
  const int32_t* spans = nullptr;    ///< [base.n_seqs]: rows of the sequence ending here, 0 = not its last row
  /// (row, head) pairs a block computes: 8 (two blocks an SM) or 4 (four blocks an SM, K/V read
  /// twice for 5..8 rows at group 1; faster at every group-1 shape kernel_bench --verify-rows
  /// measured on an H200). A pair's bits are the same either way.
  int queries_per_block = kDecodeRowsQueries;
};

/// The pairs a block computes for these arguments (queries_per_block, 4 or 8).
int decode_rows_queries(const DecodeRowsArgs& a);

/// How decode_attention_rows cuts the contexts: split length and count (DecodeSplit's fields;
/// tensor_cores, cluster and pipeline are always false). Fixed split: base.split.fixed_split_len;
/// auto: about 4 blocks per SM over the blocks that compute (one per sequence, not per row), at
/// least 64 positions a split. `n_groups` = the number of sequences (<= base.n_seqs; the host's
/// count, or n_seqs when unknown, as in a CUDA graph).
DecodeSplit decode_attention_rows_split(const DecodeRowsArgs& a, int n_groups, int n_sms);
/// One launch. Needs decode_attention_workspace_bytes(base.n_seqs, n_heads, head_dim, n_splits)
/// of workspace (the same counters convention as decode_attention: zero before the first call on
/// a fresh workspace, left zero). Throws std::invalid_argument on an unsupported head_dim (32, 64,
/// 128), null spans or a short workspace. Any GQA group: a block holds kDecodeRowsQueries pairs in
/// row-major order (rows x the group's heads), so a sequence's K/V split is read
/// ceil(rows x group / kDecodeRowsQueries) times (once for every row count at group 1).
void decode_attention_rows(const DecodeRowsArgs& a, cudaStream_t stream, int n_groups = 0);

}  // namespace servelab::kernels
