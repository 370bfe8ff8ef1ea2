#pragma once
// The flat per-step input the engine builds once per step and the backend uploads in one copy
// (issue 7, item 3). Plain C++: the engine, the CPU references and the CUDA kernels share it.
//
// Rows: a step runs n_tokens query rows, grouped by sequence. Sequence s owns rows
// [query_start[s], query_start[s+1]); its last row sits at position context_lens[s] - 1, so a
// decode row has query_start[s+1] - query_start[s] == 1 and a (chunked) prefill row attends to
// the cached prefix [0, context_lens[s] - q_len) plus the causal part of its own chunk.
// The KV of every row is written to the cache (slot_mapping) before attention reads it.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define SERVELAB_HD __host__ __device__ __forceinline__
#else
#define SERVELAB_HD inline
#endif

namespace servelab::kernels {

/// How a sequence's positions map to arena slots (see kernels/README.md, "KV layout").
enum class KvLayoutKind : int32_t {
  paged = 0,  ///< slot(p) = block_tables[s][p / block_size] * block_size + p % block_size
  naive = 1,  ///< slot(p) = base_slots[s] + p (one contiguous reservation per sequence)
};

/// Per-sequence KV addressing as raw pointers (host or device memory, the same struct).
struct KvAddressing {
  KvLayoutKind kind = KvLayoutKind::paged;
  const int32_t* block_tables = nullptr;  ///< paged: [n_seqs, block_table_stride]
  int32_t block_table_stride = 0;         ///< paged: entries per row (max blocks per sequence)
  int32_t block_size = 16;                ///< paged: slots per block (any value >= 1)
  const int64_t* base_slots = nullptr;    ///< naive: [n_seqs]
  /// paged, optional: [n_seqs] row of block_tables that sequence s reads (a persistent table kept
  /// on the device across steps, rows indexed by sequence, not by the step's order); null: row s.
  const int32_t* block_table_rows = nullptr;

  /// Row of block_tables sequence s reads (paged).
  SERVELAB_HD int64_t table_row(int s) const { return block_table_rows ? int64_t(block_table_rows[s]) : int64_t(s); }
  /// Arena slot of position p of sequence s whose table row is `row` (= table_row(s), hoisted).
  SERVELAB_HD int64_t slot_in_row(int s, int64_t row, int p) const {
    if (kind == KvLayoutKind::naive) return base_slots[s] + p;
    const int32_t block = block_tables[row * block_table_stride + p / block_size];
    return int64_t(block) * block_size + p % block_size;
  }
  /// Arena slot of position p of sequence s.
  SERVELAB_HD int64_t slot(int s, int p) const {
    return slot_in_row(s, kind == KvLayoutKind::paged ? table_row(s) : int64_t(s), p);
  }
};

/// One entry of a persistent block table to overwrite: table[index] = block, with
/// index = row * block_table_stride + col (kernels/ops.h: apply_block_table_updates).
struct BlockTableUpdate {
  int32_t index;
  int32_t block;
};

/// Shapes of one layer's KV arena: K and V each [n_slots, n_kv_heads, head_dim], row-major.
struct KvShape {
  int64_t n_slots = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  SERVELAB_HD int64_t row_elems() const { return int64_t(n_kv_heads) * head_dim; }
};

/// The per-step input on the host. Arrays are sized as their comments say; validate() checks.
struct StepInput {
  // Per query row [n_tokens].
  std::vector<int32_t> token_ids;     ///< embedding rows to gather
  std::vector<int32_t> positions;     ///< RoPE position of each row
  std::vector<int64_t> slot_mapping;  ///< arena slot each row's K/V is written to
  // Per sequence [n_seqs] (query_start has n_seqs + 1 entries, cu_seqlens).
  std::vector<int32_t> query_start;   ///< first row of each sequence; back() == n_tokens
  std::vector<int32_t> context_lens;  ///< tokens in the cache after this step's write
  KvLayoutKind kv_kind = KvLayoutKind::paged;
  int32_t block_size = 16;
  int32_t block_table_stride = 0;     ///< paged: entries per block-table row
  std::vector<int32_t> block_tables;  ///< paged: [n_seqs, block_table_stride]
  std::vector<int64_t> base_slots;    ///< naive: [n_seqs]
  // Per sampled row [n_samples]: sampling parameters as arrays (structure of arrays).
  std::vector<int32_t> sample_rows;   ///< query row whose logits are sampled
  std::vector<float> temperature;     ///< 0 = greedy
  std::vector<int32_t> top_k;         ///< 0 = off
  std::vector<float> top_p;           ///< 1 = off
  std::vector<uint64_t> seed;         ///< per-request seed
  std::vector<uint64_t> seq_key;      ///< sample index of the sequence within its request
  std::vector<int32_t> sample_position;  ///< index the sampled token takes in its sequence
  bool decode_only = false;           ///< every sequence has exactly one query row

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return static_cast<int>(context_lens.size()); }
  int n_samples() const { return static_cast<int>(sample_rows.size()); }
  int max_context() const {
    int m = 0;
    for (int32_t c : context_lens) m = c > m ? c : m;
    return m;
  }
  /// Addressing view over this host struct's arrays.
  KvAddressing addressing() const {
    KvAddressing a;
    a.kind = kv_kind;
    a.block_tables = block_tables.data();
    a.block_table_stride = block_table_stride;
    a.block_size = block_size;
    a.base_slots = base_slots.data();
    return a;
  }
  /// Throws std::invalid_argument naming the first inconsistent field.
  void validate() const {
    auto bad = [](const std::string& m) { throw std::invalid_argument("StepInput: " + m); };
    const size_t t = token_ids.size(), s = context_lens.size(), n = sample_rows.size();
    if (positions.size() != t || slot_mapping.size() != t) bad("positions and slot_mapping need n_tokens entries");
    if (query_start.size() != s + 1) bad("query_start needs n_seqs + 1 entries");
    if (query_start.front() != 0 || size_t(query_start.back()) != t) bad("query_start must run from 0 to n_tokens");
    for (size_t i = 0; i < s; ++i) {
      const int q = query_start[i + 1] - query_start[i];
      if (q < 1) bad("sequence " + std::to_string(i) + " has no query rows");
      if (context_lens[i] < q) bad("context_lens[" + std::to_string(i) + "] must be >= its query rows");
      if (decode_only && q != 1) bad("decode_only set but sequence " + std::to_string(i) + " has " + std::to_string(q) + " rows");
    }
    if (kv_kind == KvLayoutKind::paged) {
      if (block_size < 1) bad("block_size must be >= 1");
      if (block_tables.size() != s * size_t(block_table_stride)) bad("block_tables needs n_seqs * block_table_stride entries");
      for (size_t i = 0; i < s; ++i)
        if ((context_lens[i] + block_size - 1) / block_size > block_table_stride) bad("block_table_stride too small for context_lens[" + std::to_string(i) + "]");
    } else if (base_slots.size() != s) {
      bad("base_slots needs n_seqs entries");
    }
    if (temperature.size() != n || top_k.size() != n || top_p.size() != n || seed.size() != n ||
        seq_key.size() != n || sample_position.size() != n)
      bad("every sampling array needs n_samples entries");
    for (size_t i = 0; i < n; ++i)
      if (sample_rows[i] < 0 || size_t(sample_rows[i]) >= t) bad("sample_rows[" + std::to_string(i) + "] out of range");
  }
};

}  // namespace servelab::kernels
