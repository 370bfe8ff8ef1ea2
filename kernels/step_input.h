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
  /// The same addressing for the sequences from s0 on (sequence s of the result is s0 + s here).
  KvAddressing from(int s0) const {
    KvAddressing a = *this;
    if (block_table_rows) a.block_table_rows += s0;
    else if (block_tables) a.block_tables += int64_t(s0) * block_table_stride;
    if (base_slots) a.base_slots += s0;
    return a;
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

/// Which count an array of the step input is sized by.
enum class StepExtent : int32_t {
  rows,        ///< one per query row (the packed copy adds the padding rows)
  opt_rows,    ///< one per query row, or none at all (every row then takes the pad value)
  tokens,      ///< one per query row that attends and writes K/V
  seqs,        ///< one per sequence
  seq_bounds,  ///< n_seqs + 1 (cu_seqlens)
  table,       ///< paged only: n_seqs * block_table_stride; naive: none
  naive_seqs,  ///< naive only: one per sequence; paged: none
  samples,     ///< one per sampled draw
  masks,       ///< mask_words_per_row words per token mask
  dists,       ///< vocab floats per draft distribution (speculative rejection sampling)
};

/// Where an array goes on a device backend: packed into the one per-step upload, kept on the host
/// (read while planning the step), or uploaded on its own only when present (token masks: large,
/// and most steps carry none).
enum class StepTravel : int32_t { packed, host, separate };

/// How a packed array is padded past the host's entries (CUDA-graph buckets, padding rows).
enum class StepPad : int32_t {
  value,    ///< the table's pad value
  running,  ///< previous entry + 1 (query_start: one row per padding sequence)
  iota,     ///< the entry's own index (sample_rows: a padding sequence samples its own row)
  table,    ///< block tables: rows re-strided, padding rows read block 0
};

// THE TABLE of per-step arrays: X(name, element type, extent, travel, pad kind, pad value).
// It drives StepInput's members, clear(), the size checks of validate(), the CUDA backend's packed
// layout and its padding (engine/backend/cuda/step_pack.cpp): a new per-row or per-sample array
// (an adapter index, draft positions, KV scales) is one line here plus the code that fills and
// reads it.
#define SERVELAB_STEP_FIELDS(X)                                                                        \
  X(token_ids, int32_t, rows, packed, value, 0)             /* embedding rows to gather */              \
  X(positions, int32_t, tokens, packed, value, 0)           /* RoPE position of each row */             \
  X(slot_mapping, int64_t, tokens, packed, value, -1)       /* arena slot each row's K/V goes to */     \
  X(query_start, int32_t, seq_bounds, packed, running, 0)   /* first row of each sequence */            \
  X(context_lens, int32_t, seqs, packed, value, 1)          /* tokens cached after this step */         \
  X(seq_ids, uint64_t, seqs, host, value, 0)                /* the engine's sequence id (tables) */      \
  X(block_tables, int32_t, table, packed, table, 0)         /* paged: [n_seqs, stride] */               \
  X(base_slots, int64_t, naive_seqs, packed, value, 0)      /* naive: first slot of each sequence */    \
  X(sample_rows, int32_t, samples, packed, iota, 0)         /* query row whose logits are sampled */    \
  X(temperature, float, samples, packed, value, 0)          /* 0 = greedy */                            \
  X(top_k, int32_t, samples, packed, value, 0)              /* 0 = off */                               \
  X(top_p, float, samples, packed, value, 1)                /* 1 = off */                               \
  X(seed, uint64_t, samples, packed, value, 0)              /* per-request seed */                      \
  X(seq_key, uint64_t, samples, packed, value, 0)           /* sample index within its request */       \
  X(sample_position, int32_t, samples, packed, value, 1)    /* index the sampled token takes */         \
  X(mask_index, int32_t, samples, packed, value, -1)        /* token mask of the draw, -1 = none */     \
  X(lora_slot, int32_t, opt_rows, packed, value, -1)        /* LoRA adapter slot of each row, -1 none */ \
  X(mask_words, uint32_t, masks, separate, value, 0)        /* bit t of mask m: token t allowed */  \
  X(draft_token, int32_t, samples, packed, value, -1)       /* draft the draw verifies, -1 = none */ \
  X(draft_dist, int32_t, samples, packed, value, -1)        /* its q in draft_probs, -1 = none */   \
  X(draft_probs, float, dists, separate, value, 0)          /* [n_dists, vocab] drafts' q */

/// The per-step input on the host: the arrays of SERVELAB_STEP_FIELDS plus the scalars below.
/// Rows: a step runs n_tokens query rows, grouped by sequence (see the top of this file). Draws:
/// each draw samples one row's logits; a row may be drawn several times (n parallel samples share
/// their prefill's last row) and a sequence may have several drawn rows (verifying speculative
/// tokens: k + 1 consecutive rows). A draw with mask_index m >= 0 samples only among the tokens
/// whose bit is set in mask m (words [m * mask_words_per_row, (m + 1) * mask_words_per_row)).
/// A draw with draft_dist d >= 0 verifies draft_token x drawn from the proposer's distribution q
/// = draft_probs[d * vocab, (d + 1) * vocab) by rejection sampling (Leviathan et al.): it yields x
/// with probability min(1, p(x) / q(x)), else a token from norm(max(0, p - q)); any other draw
/// samples p (a point-mass draft is accepted exactly when that draw equals it).
struct StepInput {
#define SERVELAB_STEP_MEMBER(name, type, extent, travel, pad, pad_value) std::vector<type> name;
  SERVELAB_STEP_FIELDS(SERVELAB_STEP_MEMBER)
#undef SERVELAB_STEP_MEMBER
  KvLayoutKind kv_kind = KvLayoutKind::paged;
  int32_t block_size = 16;
  int32_t block_table_stride = 0;  ///< paged: entries per block-table row
  int32_t mask_words_per_row = 0;  ///< (vocab + 31) / 32 when the step carries masks, else 0
  /// Late masks (structured output overlapped with the forward): the step's masks are not in
  /// mask_words (empty) but written by the engine's filler (servelab::Step::fill_masks) while the
  /// forward runs; mask_index names them as usual. 0 = none (masks, if any, are in mask_words).
  int32_t late_masks = 0;
  bool decode_only = false;        ///< every sequence has exactly one query row

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return static_cast<int>(context_lens.size()); }
  int n_samples() const { return static_cast<int>(sample_rows.size()); }
  int n_masks() const {
    if (late_masks > 0) return late_masks;
    return mask_words_per_row > 0 ? static_cast<int>(mask_words.size() / mask_words_per_row) : 0;
  }
  bool has_masks() const { return n_masks() > 0; }      ///< in mask_words or late
  bool has_late_masks() const { return late_masks > 0; }
  int max_context() const {
    int m = 0;
    for (int32_t c : context_lens) m = c > m ? c : m;
    return m;
  }
  /// Entries an array of `extent` holds on the host for this step's counts.
  size_t host_count(StepExtent extent) const {
    const size_t t = token_ids.size(), s = context_lens.size();
    const bool paged = kv_kind == KvLayoutKind::paged;
    switch (extent) {
      case StepExtent::rows:
      case StepExtent::opt_rows:
      case StepExtent::tokens: return t;
      case StepExtent::seqs: return s;
      case StepExtent::seq_bounds: return s + 1;
      case StepExtent::table: return paged ? s * size_t(block_table_stride) : 0;
      case StepExtent::naive_seqs: return paged ? 0 : s;
      case StepExtent::samples: return sample_rows.size();
      case StepExtent::masks: return mask_words.size();
      case StepExtent::dists: return draft_probs.size();
    }
    return 0;
  }
  /// Empties every array (keeping their capacity) and resets the scalars.
  void clear() {
#define SERVELAB_STEP_CLEAR(name, type, extent, travel, pad, pad_value) name.clear();
    SERVELAB_STEP_FIELDS(SERVELAB_STEP_CLEAR)
#undef SERVELAB_STEP_CLEAR
    block_table_stride = 0;
    mask_words_per_row = 0;
    late_masks = 0;
    decode_only = false;
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
    if (mask_words_per_row < 0 || (mask_words_per_row > 0 && mask_words.size() % size_t(mask_words_per_row) != 0) ||
        (mask_words_per_row == 0 && !mask_words.empty()))
      bad("mask_words must hold whole masks of mask_words_per_row words");
    if (late_masks < 0 || (late_masks > 0 && (!mask_words.empty() || mask_words_per_row == 0)))
      bad("late_masks needs mask_words empty and mask_words_per_row > 0");
#define SERVELAB_STEP_SIZE(name, type, extent, travel, pad, pad_value)                                    \
    if (StepExtent::extent != StepExtent::masks && StepExtent::extent != StepExtent::dists &&                       \
        !(StepExtent::extent == StepExtent::opt_rows && name.empty()) &&                                          \
        name.size() != host_count(StepExtent::extent))                                                              \
      bad(std::string(#name) + " has " + std::to_string(name.size()) + " entries, its extent (" #extent ") needs " + \
          std::to_string(host_count(StepExtent::extent)));
    SERVELAB_STEP_FIELDS(SERVELAB_STEP_SIZE)
#undef SERVELAB_STEP_SIZE
    const size_t t = token_ids.size(), s = context_lens.size(), n = sample_rows.size();
    if (query_start.front() != 0 || size_t(query_start.back()) != t) bad("query_start must run from 0 to n_tokens");
    for (size_t i = 0; i < s; ++i) {
      const int q = query_start[i + 1] - query_start[i];
      if (q < 1) bad("sequence " + std::to_string(i) + " has no query rows");
      if (context_lens[i] < q) bad("context_lens[" + std::to_string(i) + "] must be >= its query rows");
      if (decode_only && q != 1) bad("decode_only set but sequence " + std::to_string(i) + " has " + std::to_string(q) + " rows");
    }
    if (kv_kind == KvLayoutKind::paged) {
      if (block_size < 1) bad("block_size must be >= 1");
      for (size_t i = 0; i < s; ++i)
        if ((context_lens[i] + block_size - 1) / block_size > block_table_stride) bad("block_table_stride too small for context_lens[" + std::to_string(i) + "]");
    }
    const int masks = n_masks();
    for (size_t i = 0; i < n; ++i) {
      if (sample_rows[i] < 0 || size_t(sample_rows[i]) >= t) bad("sample_rows[" + std::to_string(i) + "] out of range");
      if (mask_index[i] < -1 || mask_index[i] >= masks) bad("mask_index[" + std::to_string(i) + "] names no mask");
      if (draft_dist[i] < -1 || (draft_dist[i] >= 0 && draft_token[i] < 0))
        bad("draft_dist[" + std::to_string(i) + "] needs a draft_token");
    }
    for (size_t i = 0; i < lora_slot.size(); ++i)
      if (lora_slot[i] < -1) bad("lora_slot[" + std::to_string(i) + "] must be >= -1");
  }
};

}  // namespace servelab::kernels
