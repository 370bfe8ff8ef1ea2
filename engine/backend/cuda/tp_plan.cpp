#include "engine/backend/cuda/tp_plan.h"

#include <cstring>
#include <stdexcept>

namespace servelab::cuda {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

void require_divides(int n_ranks, int value, const char* what) {
  if (value % n_ranks != 0)
    throw std::invalid_argument("tensor_parallel " + std::to_string(n_ranks) + " does not divide the model's " +
                                std::to_string(value) + " " + what);
}

}  // namespace

const char* to_string(ShardSplit s) {
  switch (s) {
    case ShardSplit::replicated: return "replicated";
    case ShardSplit::rows: return "rows";
    case ShardSplit::cols: return "cols";
  }
  return "?";
}

std::vector<int64_t> TensorShard::local_shape() const {
  std::vector<int64_t> s = spec.shape;
  if (split == ShardSplit::rows) s[0] = count;
  if (split == ShardSplit::cols) s[1] = count;
  return s;
}

int64_t TensorShard::local_numel() const {
  int64_t n = 1;
  for (int64_t d : local_shape()) n *= d;
  return n;
}

int64_t TensorShard::local_rows() const { return spec.shape.size() == 2 ? local_shape()[0] : 1; }
int64_t TensorShard::local_cols() const { return spec.shape.size() == 2 ? local_shape()[1] : local_shape()[0]; }
int64_t TensorShard::full_cols() const { return spec.shape.size() == 2 ? spec.shape[1] : spec.shape[0]; }

int64_t TensorShard::first_element() const {
  if (split == ShardSplit::replicated) return 0;
  if (spec.shape.size() == 1) return begin;                     // 1-D: a run of the vector
  if (split == ShardSplit::rows) return begin * spec.shape[1];  // whole rows
  return begin;                                                 // columns: an offset in each row
}

TpPlan TpPlan::make(const ModelConfig& model, int n_ranks) {
  if (n_ranks < 1) throw std::invalid_argument("tensor_parallel must be >= 1 (got " + std::to_string(n_ranks) + ")");
  model.validate();
  require_divides(n_ranks, model.n_heads, "attention heads");
  require_divides(n_ranks, model.n_kv_heads, "KV heads (KV heads are split across ranks, not replicated)");
  require_divides(n_ranks, model.intermediate_size, "FFN columns (intermediate_size)");
  require_divides(n_ranks, model.vocab_size, "vocabulary entries (the LM head is vocabulary-parallel)");
  TpPlan p;
  p.model = model;
  p.n_ranks = n_ranks;
  p.heads = model.n_heads / n_ranks;
  p.kv_heads = model.n_kv_heads / n_ranks;
  p.ffn = model.intermediate_size / n_ranks;
  p.vocab = model.vocab_size / n_ranks;
  return p;
}

TensorShard TpPlan::shard(const TensorSpec& spec, int rank) const {
  if (rank < 0 || rank >= n_ranks)
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(n_ranks) + ")");
  TensorShard s;
  s.spec = spec;
  const std::string& n = spec.name;
  auto cut = [&](ShardSplit split, int64_t per_rank) {
    s.split = split;
    s.begin = rank * per_rank;
    s.count = per_rank;
  };
  if (ends_with(n, "q_proj.weight") || ends_with(n, "q_proj.bias")) {
    cut(ShardSplit::rows, q_dim());
  } else if (ends_with(n, "k_proj.weight") || ends_with(n, "k_proj.bias") || ends_with(n, "v_proj.weight") ||
             ends_with(n, "v_proj.bias")) {
    cut(ShardSplit::rows, kv_dim());
  } else if (ends_with(n, "o_proj.weight")) {
    cut(ShardSplit::cols, q_dim());
  } else if (ends_with(n, "gate_proj.weight") || ends_with(n, "up_proj.weight")) {
    cut(ShardSplit::rows, ffn);
  } else if (ends_with(n, "down_proj.weight")) {
    cut(ShardSplit::cols, ffn);
  } else if (n == "lm_head.weight") {
    cut(ShardSplit::rows, vocab);
  } else if (n == "model.embed_tokens.weight" || ends_with(n, "layernorm.weight") || n == "model.norm.weight") {
    s.split = ShardSplit::replicated;
    s.begin = 0;
    s.count = spec.shape[0];
  } else {
    throw std::invalid_argument("TpPlan: no sharding rule for tensor " + n);
  }
  return s;
}

std::vector<TensorShard> TpPlan::shards(int rank) const {
  std::vector<TensorShard> out;
  for (const TensorSpec& spec : tensor_specs(model)) out.push_back(shard(spec, rank));
  return out;
}

void copy_shard(const float* full, const TensorShard& s, float* out) {
  const int64_t rows = s.local_rows(), cols = s.local_cols(), stride = s.full_cols();
  const float* src = full + s.first_element();
  for (int64_t i = 0; i < rows; ++i) std::memcpy(out + i * cols, src + i * stride, size_t(cols) * sizeof(float));
}

}  // namespace servelab::cuda
