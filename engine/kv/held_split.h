#pragma once
// How a sequence's held slots split into the vLLM paper's categories. Shared by the naive and
// paged managers so both classify a position the same way.
#include <algorithm>
#include <cstdint>

#include "engine/request.h"

namespace servelab {

/// Slots of one held span of positions [begin, end), classified for KvBreakdown.
struct HeldSplit {
  int64_t stored = 0;         ///< positions below the computed length: K/V present
  int64_t reserved = 0;       ///< positions the sequence will still fill (below its final length)
  int64_t internal_frag = 0;  ///< positions past its final length: never used
};

/// Splits positions [begin, end) that seq holds. The computed length counts cached prefix tokens
/// even before the engine has moved n_computed past them: their K/V is already in the arena.
/// A sequence fills n_kv_final() = final length − 1 positions: its last token's K/V is never
/// computed, so the slot past them is internal fragmentation, not reserved.
inline HeldSplit split_held(const Sequence& seq, int64_t begin, int64_t end) {
  const int64_t computed = std::max<int64_t>(seq.n_computed, seq.kv.n_cached_prefix);
  const int64_t final_len = std::max<int64_t>(seq.n_kv_final(), computed);
  const auto within = [&](int64_t len) { return std::clamp<int64_t>(len - begin, 0, end - begin); };
  HeldSplit s;
  s.stored = within(computed);
  s.reserved = within(final_len) - s.stored;
  s.internal_frag = (end - begin) - s.stored - s.reserved;
  return s;
}

}  // namespace servelab
