#pragma once
// Test fixture shared by the CPU reference tests and the GPU kernel tests: a random varlen batch
// laid out in a KV arena either paged (blocks shuffled over the arena) or naive (one contiguous,
// randomly placed reservation per sequence), with random bf16-representable K, V and Q.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/step_input.h"
#include "engine/model/half.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/step_input.h"

namespace servelab::kernels::testing {

/// Normal(0, sigma) values rounded through bf16, so a bf16 kernel sees exactly these inputs.
inline std::vector<float> random_bf16(size_t n, std::mt19937_64& rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16(d(rng));
  return v;
}

/// ‖a − b‖ / ‖b‖ in double; NaN anywhere gives infinity.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct BatchSpec {
  std::vector<int> context_lens;  ///< per sequence, after this step
  std::vector<int> q_lens;        ///< per sequence query rows (1 = decode)
  int n_heads = 8;
  int n_kv_heads = 8;
  int head_dim = 128;
  KvLayoutKind kind = KvLayoutKind::paged;
  int block_size = 16;
};

/// A batch with its arena filled with random K/V and random queries.
struct KvBatch {
  BatchSpec spec;
  StepInput in;   ///< query_start, context_lens, slot_mapping, block tables / base slots
  KvShape shape;
  std::vector<float> k_cache, v_cache;  ///< [n_slots, n_kv_heads, head_dim]
  std::vector<float> q;                 ///< [n_tokens, n_heads, head_dim]
  int n_tokens() const { return in.query_start.back(); }
};

inline KvBatch make_batch(const BatchSpec& spec, std::mt19937_64& rng) {
  KvBatch b;
  b.spec = spec;
  const int n_seqs = static_cast<int>(spec.context_lens.size());
  StepInput& in = b.in;
  in.kv_kind = spec.kind;
  in.block_size = spec.block_size;
  in.query_start.assign(1, 0);
  for (int s = 0; s < n_seqs; ++s) {
    in.query_start.push_back(in.query_start.back() + spec.q_lens[s]);
    in.context_lens.push_back(spec.context_lens[s]);
    in.seq_ids.push_back(static_cast<uint64_t>(s + 1));
  }
  const int bs = spec.block_size;
  if (spec.kind == KvLayoutKind::paged) {
    int max_blocks = 1, total_blocks = 0;
    for (int c : spec.context_lens) {
      max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
      total_blocks += (c + bs - 1) / bs;
    }
    const int n_blocks = total_blocks + 3;  // a few never-used blocks
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    in.block_table_stride = max_blocks;
    in.block_tables.assign(size_t(n_seqs) * max_blocks, -1);
    int next = 0;
    for (int s = 0; s < n_seqs; ++s)
      for (int j = 0; j < (spec.context_lens[s] + bs - 1) / bs; ++j) in.block_tables[size_t(s) * max_blocks + j] = perm[next++];
    b.shape.n_slots = int64_t(n_blocks) * bs;
  } else {
    int64_t base = 0;
    std::uniform_int_distribution<int> gap(0, 7);
    for (int c : spec.context_lens) {
      base += gap(rng);
      in.base_slots.push_back(base);
      base += c + gap(rng);  // reservations a little longer than used
    }
    b.shape.n_slots = base + 1;
  }
  b.shape.n_kv_heads = spec.n_kv_heads;
  b.shape.head_dim = spec.head_dim;
  const KvAddressing kv = in.addressing();
  for (int s = 0; s < n_seqs; ++s)
    for (int i = 0; i < spec.q_lens[s]; ++i) {
      const int pos = spec.context_lens[s] - spec.q_lens[s] + i;
      in.positions.push_back(pos);
      in.slot_mapping.push_back(kv.slot(s, pos));
      in.token_ids.push_back(0);
    }
  const size_t cache_elems = size_t(b.shape.n_slots) * b.shape.row_elems();
  b.k_cache = random_bf16(cache_elems, rng);
  b.v_cache = random_bf16(cache_elems, rng);
  b.q = random_bf16(size_t(b.n_tokens()) * spec.n_heads * spec.head_dim, rng);
  return b;
}

/// src's K, V and Q in a fresh arena laid out as `kind` with blocks of `block_size` slots (the
/// arena shuffled anew): every (sequence, position) row holds what it holds in src.
inline KvBatch relayout(const KvBatch& src, KvLayoutKind kind, int block_size, std::mt19937_64& rng) {
  BatchSpec spec = src.spec;
  spec.kind = kind;
  spec.block_size = block_size;
  KvBatch dst = make_batch(spec, rng);
  dst.q = src.q;
  const int64_t row = src.shape.row_elems();
  const KvAddressing a = src.in.addressing(), b = dst.in.addressing();
  for (int s = 0; s < src.in.n_seqs(); ++s)
    for (int p = 0; p < src.in.context_lens[s]; ++p) {
      std::copy_n(src.k_cache.begin() + a.slot(s, p) * row, row, dst.k_cache.begin() + b.slot(s, p) * row);
      std::copy_n(src.v_cache.begin() + a.slot(s, p) * row, row, dst.v_cache.begin() + b.slot(s, p) * row);
    }
  return dst;
}

/// attention_ref over the batch (scale 1/sqrt(head_dim)): the output every kernel is checked
/// against, one row per query token and head; rows the reference does not write keep `fill`.
inline std::vector<float> reference_attention(const KvBatch& b, float fill = 0.0f) {
  std::vector<float> out(b.q.size(), fill);
  AttentionRefArgs a;
  a.q = b.q.data();
  a.k_cache = b.k_cache.data();
  a.v_cache = b.v_cache.data();
  a.shape = b.shape;
  a.n_heads = b.spec.n_heads;
  a.n_seqs = b.in.n_seqs();
  a.query_start = b.in.query_start.data();
  a.context_lens = b.in.context_lens.data();
  a.kv = b.in.addressing();
  a.scale = 1.0f / std::sqrt(float(b.shape.head_dim));
  a.out = out.data();
  attention_ref(a);
  return out;
}

}  // namespace servelab::kernels::testing
