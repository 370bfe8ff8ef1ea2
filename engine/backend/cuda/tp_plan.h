#pragma once
// The tensor-parallel sharding plan (issue 13): which rows or columns of every checkpoint tensor
// each of N ranks holds, Megatron-style. Plain C++ (always built, tested on the CPU against the
// plain reference forward in tests/cuda_backend/tp_plan_test.cpp).
//
//   q/k/v_proj (and biases)  column-parallel: rank r holds heads [r·H/N, (r+1)·H/N) of Q and
//                            [r·KV/N, (r+1)·KV/N) of K and V (rows of the [out, in] matrix), so a
//                            rank's query heads read exactly its own KV heads (GQA groups stay whole)
//   o_proj                   row-parallel: the columns of its query heads; partial sums all-reduced
//   gate_proj, up_proj       column-parallel: FFN rows [r·F/N, (r+1)·F/N)
//   down_proj                row-parallel: the same FFN columns; partial sums all-reduced
//   lm_head                  vocabulary-parallel: vocab rows [r·V/N, (r+1)·V/N); logits all-gathered
//   embed_tokens, norms      replicated (with tied embeddings the LM head's rows are the rank's
//                            vocabulary slice of the replicated embedding)
// KV heads are split, never replicated: N must divide n_heads, n_kv_heads, the FFN size and the
// vocabulary (make() says which does not).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/tensors.h"

namespace servelab::cuda {

/// How a tensor is cut: not at all, along dim 0 (rows of [out, in]; 1-D biases), or dim 1.
enum class ShardSplit { replicated, rows, cols };
const char* to_string(ShardSplit s);

/// One rank's piece of one checkpoint tensor: `count` rows (or columns) from `begin`.
struct TensorShard {
  TensorSpec spec;  ///< the whole tensor (name, full shape, role)
  ShardSplit split = ShardSplit::replicated;
  int64_t begin = 0, count = 0;  ///< along the split dimension (the whole extent when replicated)

  /// The rank's shape: spec.shape with the split dimension cut to `count`.
  std::vector<int64_t> local_shape() const;
  int64_t local_numel() const;
  /// Rows of the local tensor and the columns each holds (1-D: one row).
  int64_t local_rows() const;
  int64_t local_cols() const;
  /// Columns of the full tensor (1-D: its length).
  int64_t full_cols() const;
  /// The local tensor's first element in the full row-major tensor, and the full tensor's row
  /// stride: local (i, j) is full element first_element() + i·full_cols() + j.
  int64_t first_element() const;
};

/// The plan for N ranks of one model. make() validates.
struct TpPlan {
  ModelConfig model;  ///< the whole model
  int n_ranks = 1;
  int heads = 0, kv_heads = 0, ffn = 0, vocab = 0;  ///< per rank

  /// Throws std::invalid_argument naming what N does not divide ("tensor_parallel 4 does not divide
  /// the model's 2 KV heads (...)"), or N < 1.
  static TpPlan make(const ModelConfig& model, int n_ranks);

  /// Rank `rank`'s piece of `spec` (a tensor of tensor_specs(model)). Throws std::invalid_argument
  /// for a rank outside [0, n_ranks) or an unknown tensor name.
  TensorShard shard(const TensorSpec& spec, int rank) const;
  /// Every tensor of tensor_specs(model), in its order, as rank `rank` holds it.
  std::vector<TensorShard> shards(int rank) const;

  int q_dim() const { return heads * model.head_dim(); }      ///< local query width
  int kv_dim() const { return kv_heads * model.head_dim(); }  ///< local K (or V) width
  /// Bytes one KV slot takes on one rank: 2 × n_layers × kv_dim() × elem_bytes.
  int64_t kv_bytes_per_slot(int elem_bytes) const { return 2ll * model.n_layers * kv_dim() * elem_bytes; }
  /// Elements each all-reduce of a step of `rows` rows sums: rows × hidden (two per layer).
  int64_t all_reduce_elems(int64_t rows) const { return rows * model.hidden_size; }
};

/// Copies shard `s` out of the whole tensor `full` (row-major, spec's shape) into `out`
/// (local_numel() elements, row-major local shape).
void copy_shard(const float* full, const TensorShard& s, float* out);

}  // namespace servelab::cuda
