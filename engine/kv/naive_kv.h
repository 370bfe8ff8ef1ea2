#pragma once
// Naive KV manager (Orca-style): each sequence reserves one contiguous region of the arena on
// admission, sized up front by NaiveReserve. Placement is first-fit over a sorted list of free
// extents, so external fragmentation is real: free slots split into gaps too small for the next
// request's reservation cannot be used.
#include <cstdint>
#include <map>
#include <vector>

#include "engine/kv/kv_manager.h"

namespace servelab {

/// Contiguous-reservation manager over n_slots token slots. Region of seq: slots
/// [seq.kv.region_begin, seq.kv.region_begin + seq.kv.region_slots); position p is at begin + p.
/// fork() cannot share a contiguous region: it reserves the child its own region and queues a
/// KvCopy of the parent's computed positions (check can_allocate(child, ...) first).
class NaiveKvManager final : public KvManager {
 public:
  NaiveKvManager(const KvConfig& config, int64_t n_slots);

  KvKind kind() const override { return KvKind::naive; }
  int64_t capacity_slots() const override { return n_slots_; }
  int64_t free_slots() const override { return n_free_; }
  int64_t slots_needed(const Sequence& seq, int n_tokens) const override;
  int64_t worst_case_slots(const Sequence& seq) const override { return reservation_slots(seq); }

  bool can_allocate(const Sequence& seq, int n_tokens) const override;
  void allocate(Sequence& seq, int n_tokens) override;
  bool can_grow(const Sequence& seq, int n_tokens) const override;
  void grow(Sequence& seq, int n_tokens) override;
  void release(Sequence& seq) override;
  void fork(const Sequence& parent, Sequence& child) override;

  int64_t slot(const Sequence& seq, int pos) const override;
  std::vector<KvCopy> take_pending_copies() override;

  KvBreakdown breakdown(std::span<const Sequence* const> live, const Sequence* next = nullptr) const override;
  void check_invariants(std::span<const Sequence* const> live) const override;

  /// Slots the region of seq would span: max_model_len, pow2 of the positions it will fill
  /// (n_kv_final() = final length − 1, capped at max_model_len) or exactly those; at least 1.
  int64_t reservation_slots(const Sequence& seq) const;
  /// Size of the largest free extent: the biggest region that can be placed now.
  int64_t largest_free_extent() const;
  /// Free slots that cannot hold the reservation of `next` (see KvBreakdown::external_frag).
  int64_t unusable_free(const Sequence* next) const;

 private:
  /// First free extent (by address) of at least n slots; extents_.end() when none fits.
  std::map<int64_t, int64_t>::const_iterator first_fit(int64_t n) const;
  /// Takes n slots from the front of the first fitting extent; returns the first slot.
  int64_t take(int64_t n);
  /// Returns [begin, begin+n) to the free list, merging with neighbours.
  void give_back(int64_t begin, int64_t n);

  KvConfig config_;
  int64_t n_slots_;
  int64_t n_free_;
  std::map<int64_t, int64_t> extents_;  ///< free extents: first slot -> length, sorted, never adjacent
  std::map<int64_t, int64_t> regions_;  ///< held regions: first slot -> length
  std::vector<KvCopy> pending_copies_;
};

}  // namespace servelab
