#pragma once
// Deletion from an open-addressing table with linear probing over a power-of-two number of
// slots, by backward shift (no tombstones): the table types of engine/kv (PrefixIndex, OwnerRuns)
// share it.
#include <cstddef>
#include <vector>

namespace servelab {

/// Empties slot i of `slots` (mask = size - 1) and moves the later entries of its probe run into
/// the hole, so lookups that probed past i still find them. used(s): whether slot s holds an
/// entry; home(s): the slot its key hashes to. Slot{} is an empty slot.
template <class Slot, class Used, class Home>
inline void erase_backward_shift(std::vector<Slot>& slots, size_t mask, size_t i, Used used, Home home) {
  size_t hole = i;
  for (size_t j = (i + 1) & mask; used(slots[j]); j = (j + 1) & mask) {
    const size_t h = home(slots[j]);
    const bool between = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);  // h in (hole, j]
    if (between) continue;
    slots[hole] = slots[j];
    hole = j;
  }
  slots[hole] = Slot{};
}

}  // namespace servelab
