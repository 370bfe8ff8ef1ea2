#pragma once
// OwnerRuns: BlockRuns' reservations, owner (sequence id) -> its run of blocks [begin, end), as an
// open-addressing table (linear probing, backward-shift deletion, Fibonacci hashing of the ids,
// which are sequential) that doubles when half full. A running sequence looks its owner up each
// time it crosses into its next reserved block; std::unordered_map walked a bucket's node list
// there, and freed and allocated a node each time a reservation ran out or began.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/kv/probe_erase.h"

namespace servelab {

/// Blocks [begin, end) of the arena.
struct BlockRun {
  int32_t begin = 0, end = 0;
};

class OwnerRuns {
 public:
  OwnerRuns() { resize(16); }

  size_t size() const { return size_; }
  /// owner's run, or nullptr. The pointer is valid until the next insert or erase.
  BlockRun* find(uint64_t owner) {
    for (size_t i = home(owner);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.owner == owner) return &s.run;
    }
  }
  const BlockRun* find(uint64_t owner) const { return const_cast<OwnerRuns*>(this)->find(owner); }
  /// Adds owner's run; owner must not have one.
  void insert(uint64_t owner, BlockRun run) {
    if (2 * (size_ + 1) > slots_.size()) resize(2 * slots_.size());
    place(owner, run);
    ++size_;
  }
  /// Drops owner's run if it has one.
  void erase(uint64_t owner) {
    size_t i = home(owner);
    for (; slots_[i].used; i = (i + 1) & mask_)
      if (slots_[i].owner == owner) break;
    if (!slots_[i].used) return;
    erase_backward_shift(
        slots_, mask_, i, [](const Slot& s) { return s.used; }, [this](const Slot& s) { return home(s.owner); });
    --size_;
  }
  /// Calls f(owner, run) for every entry, in table order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.used) f(s.owner, s.run);
  }

 private:
  struct Slot {
    uint64_t owner = 0;
    BlockRun run;
    bool used = false;
  };
  size_t home(uint64_t owner) const { return static_cast<size_t>((owner * 0x9e3779b97f4a7c15ull) >> shift_); }
  void place(uint64_t owner, BlockRun run) {
    size_t i = home(owner);
    while (slots_[i].used) i = (i + 1) & mask_;
    slots_[i] = Slot{owner, run, true};
  }
  void resize(size_t cap) {  // cap: a power of two
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    for (const Slot& s : old)
      if (s.used) place(s.owner, s.run);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace servelab
