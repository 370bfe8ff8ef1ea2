#pragma once
// KvManager: decides which arena slots hold each sequence's K/V. It never touches the K/V data
// itself; the backend owns the arena memory (n_slots token slots) and reads/writes the slots the
// manager hands out. Check-then-commit pairs: can_allocate/allocate, can_grow/grow, release.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_moves.h"
#include "engine/request.h"

namespace servelab {

/// The vLLM paper's breakdown of the arena, in token slots. stored + reserved + internal_frag
/// + external_frag + free == capacity.
struct KvBreakdown {
  int64_t capacity = 0;       ///< all slots in the arena
  int64_t stored = 0;         ///< slots holding a token's K/V (shared blocks counted once)
  int64_t reserved = 0;       ///< held by a request for K/V it will still compute (below n_kv_final)
  int64_t internal_frag = 0;  ///< held by a request beyond n_kv_final (final length − 1): never used
  /// Free, but unable to hold the next reservation (the vLLM paper's definition). Naive: Σ over
  /// free extents of (extent mod R), R = the next waiting request's reservation (max_model_len
  /// when none waits, or always under reserve: max), capped at the arena. Paged: 0.
  int64_t external_frag = 0;
  int64_t free = 0;           ///< free and usable
  /// Share of memory taken by requests that holds token states: stored / (stored+reserved+internal).
  double utilization() const;
  int64_t used() const { return stored + reserved + internal_frag; }
};

enum class KvKind { naive, paged };
enum class NaiveReserve { max, pow2, oracle };
const char* to_string(KvKind k);
const char* to_string(NaiveReserve r);

/// Scenario-level KV settings. validate() names the bad field.
struct KvConfig {
  KvKind kind = KvKind::paged;
  int block_size = 16;                        ///< paged
  NaiveReserve reserve = NaiveReserve::max;   ///< naive
  bool prefix_caching = true;                 ///< paged: share full prompt blocks by hash
  int max_model_len = 2048;                   ///< naive reserve: max uses this
  void validate() const;
};

class KvManager {
 public:
  virtual ~KvManager() = default;
  virtual KvKind kind() const = 0;
  virtual int64_t capacity_slots() const = 0;
  virtual int64_t free_slots() const = 0;
  /// Granularity of allocation in slots (paged: block_size; naive: 1).
  virtual int64_t unit_slots() const { return 1; }
  /// Extra slots `seq` needs to hold its first n_tokens positions, given what it holds now
  /// (naive, unallocated: the whole reservation; paged: whole blocks).
  virtual int64_t slots_needed(const Sequence& seq, int n_tokens) const = 0;

  /// Slots seq takes at its largest (n_kv_final() positions) admitted alone into an empty arena,
  /// with no prefix-cache hits: what "can this ever fit" must compare with the arena, since
  /// cached blocks can be evicted before it runs. Default: one slot per position.
  virtual int64_t worst_case_slots(const Sequence& seq) const { return seq.n_kv_final(); }

  /// Can an unallocated seq be admitted holding its first n_tokens positions?
  virtual bool can_allocate(const Sequence& seq, int n_tokens) const = 0;
  /// Admits seq. May set seq.kv.n_cached_prefix (paged prefix cache; always < n_prompt).
  virtual void allocate(Sequence& seq, int n_tokens) = 0;
  /// Can an allocated seq grow to hold its first n_tokens positions?
  virtual bool can_grow(const Sequence& seq, int n_tokens) const = 0;
  virtual void grow(Sequence& seq, int n_tokens) = 0;
  /// Frees (or drops references to) everything seq holds. Idempotent on an unallocated seq.
  virtual void release(Sequence& seq) = 0;
  /// Gives back what seq holds past its first n_keep positions (n_keep >= seq.n_computed):
  /// rejected speculative tokens' slots. Paged: whole blocks past n_keep are freed (a shared one
  /// loses only seq's reference); naive: the reservation stays (default: nothing to give back).
  virtual void truncate(Sequence& seq, int n_keep) { (void)seq, (void)n_keep; }
  /// vLLM's allocate_slots: makes seq (allocated or not) hold n_computed + n_new positions plus
  /// n_lookahead more (speculative tokens about to be proposed), copying shared blocks about to be
  /// written. False, changing nothing, when the arena cannot.
  bool allocate_slots(Sequence& seq, int n_new, int n_lookahead = 0) {
    // Held already (a decode inside its last block, asked for every running sequence every
    // step): answered here, without the calls that would find no slot needed.
    const int n = seq.n_computed + n_new + n_lookahead;
    if (held_per_block_ > 0 && seq.kv.allocated && n >= 0 &&
        int64_t{n} <= held_per_block_ * static_cast<int64_t>(seq.kv.blocks.size()))
      return true;
    return allocate_slots_for(seq, n);
  }
  /// child shares parent's K/V (ref counts up); writing into a shared block later copies it.
  virtual void fork(const Sequence& parent, Sequence& child) = 0;

  /// Arena slot of position pos of seq (pos < what it holds).
  virtual int64_t slot(const Sequence& seq, int pos) const = 0;
  /// A block layout's row of a step's block table: the ids of seq's first n_blocks blocks into
  /// out[0, n_blocks), one call a sequence where slot() would be one a block (bench/sim_bench).
  /// False, writing nothing, for a contiguous layout.
  virtual bool block_ids(const Sequence& seq, int n_blocks, int32_t* out) const {
    (void)seq, (void)n_blocks, (void)out;
    return false;
  }
  /// Called after a step wrote seq's K/V up to seq.n_computed and the engine settled which
  /// tokens were accepted: registers full blocks of accepted tokens (below n_tokens()) for reuse.
  virtual void on_computed(Sequence& seq) {}
  /// on_computed, unless seq.n_computed is below seq.kv.register_at, where the manager said it
  /// would find nothing to register (the engine's call after every step of every sequence: most
  /// decodes complete no block, and this skips the call).
  void after_computed(Sequence& seq) {
    if (seq.n_computed >= seq.kv.register_at) on_computed(seq);
  }
  /// Copies the backend must make before the next forward (copy-on-write); clears the list.
  virtual std::vector<KvCopy> take_pending_copies() { return {}; }

  /// Arena breakdown for the live (allocated) sequences. `next`: the sequence the scheduler
  /// would allocate next (head of its queue), or nullptr; external fragmentation is measured
  /// against its reservation.
  virtual KvBreakdown breakdown(std::span<const Sequence* const> live, const Sequence* next = nullptr) const = 0;
  /// Checks internal invariants (ref counts, free list, no overlap); throws std::logic_error.
  virtual void check_invariants(std::span<const Sequence* const> live) const = 0;

 protected:
  /// A manager's word that an allocated sequence holding kv.blocks needs no slot (and no copy)
  /// to hold n <= kv.blocks.size() × this positions: its block size while no block is shared
  /// (paged), so allocate_slots answers a decode inside its last block at once. 0: always ask
  /// slots_needed.
  int64_t held_per_block_ = 0;

 private:
  /// allocate_slots for n positions in all: can_allocate/allocate, or slots_needed/can_grow/grow.
  bool allocate_slots_for(Sequence& seq, int n);
};

/// Builds the manager for config over an arena of n_slots token slots.
std::unique_ptr<KvManager> make_kv_manager(const KvConfig& config, int64_t n_slots);

}  // namespace servelab
