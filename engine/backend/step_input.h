#pragma once
// Builds the flat per-step input every backend runs (Step, backend.h) from the engine's Batch and
// KvManager, once per step. The KV layout is read with O(blocks) kv.slot() calls per sequence
// (paged: one per block; naive: one per sequence), not one per position; backends address K/V
// through the step's slot mapping, block tables or base slots afterwards.
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/kv/kv_manager.h"
#include "engine/request.h"

namespace servelab {

/// One sequence's share of a step: positions [seq->n_computed, seq->n_computed + n_new) run
/// through the model (speculative tokens included: Sequence::token_at) and their K/V are written
/// to the arena. When `sample` is set the chunk draws (the engine sets it when the chunk ends at
/// seq->n_with_spec(); tests and the profiler may draw from any chunk's last row):
/// - without speculative tokens: n_samples draws of the last row (a request with n > 1 parallel
///   samples draws all n first tokens from its prefill's logits, as vLLM does), draw k keyed by
///   seq_key seq->sample_index + k;
/// - verifying k speculative tokens: one draw from each of the k + 1 rows at positions
///   n_tokens() - 1 .. n_with_spec() - 1 (n_samples must be 1); when the sequence carries its
///   drafts' distributions (Sequence::spec_probs) and does not draw greedily, draw j < k verifies
///   draft j against its row of q (draft_token, draft_dist, draft_probs: rejection sampling).
/// Every draw's sample_position is the index its token takes (row position + 1), so a draw equals
/// what the non-speculative step at that position would draw.
struct BatchEntry {
  Sequence* seq = nullptr;
  int n_new = 0;
  bool sample = false;
  int n_samples = 1;    ///< draws from the sampled row (>= 1; read only when sample is set)
  /// Token masks (Batch::mask_words): the first drawn row's mask index, later rows the next ones
  /// (parallel samples share it); -1 = unconstrained.
  int first_mask = -1;
  int lora_slot = -1;   ///< the backend's LoRA slot its rows run with (-1 = the base model)
};

/// A step's work as the engine sees it. n_padding_tokens are rows computed and thrown away
/// (static batching pads prompts to the longest and keeps finished slots in the batch): they
/// cost real compute.
struct Batch {
  std::vector<BatchEntry> entries;
  int n_padding_tokens = 0;
  std::vector<uint32_t> mask_words;  ///< token masks, mask_words_per_row words each
  int mask_words_per_row = 0;
  /// Late masks instead (mask_words empty): n_late_masks masks that fill_masks writes while the
  /// step runs (Step::fill_masks; the engine's structured output overlapped with the forward).
  int n_late_masks = 0;
  std::function<void(uint32_t* words)> fill_masks;
  int n_tokens() const;  ///< Σ n_new (padding excluded)
  bool empty() const { return entries.empty(); }
};

/// How much of a step build_step_input fills: everything, or its shape and draws (Step::shape_only,
/// for a backend whose caps().reads_rows is false).
enum class StepDetail { full, shape };

/// Fills `step` (reusing its vectors) for `batch` over `kv`:
/// - rows in entry order, positions [seq->n_computed, + n_new), token ids Sequence::token_at;
/// - paged (kv.kind() == paged): block b of a sequence is kv.slot(seq, b * block_size) /
///   block_size with block_size = kv.unit_slots(); block_table_stride = the most blocks any
///   sequence of the step holds; naive: base_slots[s] = kv.slot(seq, 0);
/// - slot_mapping from those, as kernels::KvAddressing::slot computes it;
/// - the draws of each entry with sample set (see BatchEntry): temperature (0 for greedy or
///   top_k == 1), top_k, top_p and seed from seq->sampling, seq_key, sample_position, mask_index;
/// - the masks: mask_words copied, or (n_late_masks > 0) in.late_masks and step.fill_masks set
///   (step.fill_masks is reset otherwise);
/// - lora_slot per row from its entry's, only when some entry has one (else empty: no adapters);
/// - decode_only when every entry has n_new == 1.
/// With detail shape: step.shape_only set, and none of the per-row arrays or the KV addressing
/// (token ids, positions, slot mapping, block tables, base slots, lora slots) are built; the rest
/// is as above. The step then costs O(sequences + draws) to build rather than O(rows + blocks).
/// Throws std::invalid_argument naming the entry and field for a malformed batch (null seq,
/// n_new < 1, positions outside the tokens, a token outside [0, vocab) (full detail), bad
/// sampling values, a mask index outside the batch's masks).
void build_step_input(const Batch& batch, const KvManager& kv, int vocab, Step& step,
                      StepDetail detail = StepDetail::full);

/// A shape-only step (StepDetail::shape) built entry by entry, as build_step_input builds one:
/// split so that the engine adds each entry while it makes it, reading each sequence once rather
/// than again in a second walk over the batch (a first read of ~200 sequences a step is most of
/// what building a step costs the simulator). build_step_input's shape-only path is this.
class ShapeStepBuilder {
 public:
  /// Clears `step` and starts it for up to n_entries entries (more may come) and n_padding
  /// padding rows (throws std::invalid_argument when < 0). n_masks: the batch's token masks, or
  /// -1 when they are not known yet (the engine's masks are planned as entries are made): add()
  /// then takes no entry with a mask.
  void begin(const KvManager& kv, int vocab, Step& step, int n_masks, size_t n_entries, int n_padding);
  /// Checks the next entry and adds its sequence's bounds and its draws (throws as
  /// build_step_input). False, adding nothing, for an entry with a mask when n_masks is -1: the
  /// caller builds the step with build_step_input instead.
  bool add(const BatchEntry& entry) {
    // A decode (one row, one draw, no drafts, no mask) in room already made, written here: most
    // entries of most steps. Its checks are check_entry's for it (a failing one goes the long
    // way, which throws naming it).
    kernels::StepInput& in = *in_;
    const Sequence* seq = entry.seq;
    const size_t e = n_entries_;
    if (seq && entry.n_new == 1 && entry.sample && entry.n_samples == 1 && entry.first_mask == -1 &&
        seq->spec_tokens.empty() && e < in.context_lens.size() && n_draws_ < in.sample_rows.size()) {
      const SamplingParams& p = seq->sampling;
      const int begin = seq->n_computed;
      if (begin >= 0 && begin < seq->n_tokens() && p.temperature >= 0.0f &&
          p.temperature <= std::numeric_limits<float>::max() && p.top_k >= 0 && p.top_p > 0.0f && p.top_p <= 1.0f) {
        const bool greedy = p.temperature == 0.0f || p.top_k == 1;
        const size_t d = n_draws_++;
        n_entries_ = e + 1;
        ++row_;
        in.query_start[e + 1] = row_;
        in.context_lens[e] = begin + 1;
        in.seq_ids[e] = seq->id;
        in.sample_rows[d] = row_ - 1;
        in.temperature[d] = greedy ? 0.0f : p.temperature;
        in.top_k[d] = greedy ? 0 : p.top_k;
        in.top_p[d] = greedy ? 1.0f : p.top_p;
        in.seed[d] = p.seed;
        in.seq_key[d] = static_cast<uint64_t>(seq->sample_index);
        in.sample_position[d] = begin + 1;
        in.mask_index[d] = -1;
        in.draft_token[d] = -1;
        in.draft_dist[d] = -1;
        return true;
      }
    }
    return add_any(entry);
  }
  /// Sizes the arrays to what was added and sets decode_only. The step's masks are not set.
  void finish();

 private:
  /// add() for any entry (the checks and draws of build_step_input).
  bool add_any(const BatchEntry& entry);

  kernels::StepInput* in_ = nullptr;
  int vocab_ = 0;
  int n_masks_ = 0;
  size_t n_entries_ = 0;  // added so far
  size_t n_draws_ = 0;
  int row_ = 0;
  bool decode_only_ = true;
};

/// What a backend reading a shape-only step relies on, as kernels::StepInput::validate checks it
/// for a full one: query_start runs from 0 over every sequence, each has >= 1 row and
/// context_lens >= its rows, every per-draw array has one entry per draw, each draw's row lies
/// in the step and its mask exists. Throws std::invalid_argument naming the field.
void check_step_shape(const kernels::StepInput& in);

/// The step for `batch` over `kv` on `backend`'s model (build_step_input).
Step make_step(const Backend& backend, const Batch& batch, const KvManager& kv);

/// Builds the step for `batch` and runs it on `backend`: what the engine does each step, for the
/// profiler, benchmarks and tests that drive a backend directly.
StepOutput run_batch(Backend& backend, const Batch& batch, const KvManager& kv);

}  // namespace servelab
