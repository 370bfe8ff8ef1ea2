#pragma once
// PrefixIndex: the paged KV manager's prefix cache index, chained block hash -> block id. An
// open-addressing table (linear probing, backward-shift deletion) sized once for every block the
// arena has, so registering and forgetting blocks never allocates: with std::unordered_map each
// full block cost a node allocation and its eviction a free, on the simulator's hot path.
// The keys are splitmix64 outputs, already well mixed, so the low bits pick the home slot.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/kv/probe_erase.h"

namespace servelab {

class PrefixIndex {
 public:
  static constexpr int32_t kAbsent = -1;

  PrefixIndex() : PrefixIndex(0) {}
  /// Room for up to max_entries entries (one a block) at a load of at most one half.
  explicit PrefixIndex(size_t max_entries) {
    size_t cap = 16;
    while (cap < 2 * max_entries) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }

  size_t size() const { return size_; }
  /// The block registered under hash, or kAbsent.
  int32_t find(uint64_t hash) const {
    for (size_t i = home(hash);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.block == kAbsent) return kAbsent;
      if (s.hash == hash) return s.block;
    }
  }
  /// Registers block under hash unless hash is already there (the first one stays, as
  /// unordered_map::try_emplace); true when it did. Callers keep at most one entry per block, so
  /// it never fills.
  bool insert_if_absent(uint64_t hash, int32_t block) {
    size_t i = home(hash);
    for (; slots_[i].block != kAbsent; i = (i + 1) & mask_)
      if (slots_[i].hash == hash) return false;
    slots_[i] = {hash, block};
    ++size_;
    return true;
  }
  /// Drops hash's entry if it names block (another block may own that hash).
  void erase_if(uint64_t hash, int32_t block) {
    size_t i = home(hash);
    for (; slots_[i].block != kAbsent; i = (i + 1) & mask_)
      if (slots_[i].hash == hash) break;
    if (slots_[i].block != block || block == kAbsent) return;
    erase_backward_shift(
        slots_, mask_, i, [](const Slot& s) { return s.block != kAbsent; },
        [this](const Slot& s) { return home(s.hash); });
    --size_;
  }
  /// Starts loading hash's home slot into the cache (a hint: no effect on the contents).
  void prefetch(uint64_t hash) const { __builtin_prefetch(slots_.data() + home(hash)); }
  /// Calls f(hash, block) for every entry (invariant checks), in table order.
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.block != kAbsent) f(s.hash, s.block);
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    int32_t block = kAbsent;
  };
  size_t home(uint64_t hash) const { return static_cast<size_t>(hash) & mask_; }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace servelab
