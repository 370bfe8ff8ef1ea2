#pragma once
// SwapSpace: the bookkeeping of the host swap pool (vLLM's CPU block allocator). Swap preemption
// moves a sequence's K/V out of the arena into host memory the backend allocated once
// (Backend::make_host_pool, `engine.swap_space`); this class decides which host slots hold it.
// It never touches the bytes.
#include <cstdint>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "engine/request.h"

namespace servelab {

/// n_blocks blocks of block_slots host slots. A swapped-out sequence holds
/// ceil(n_positions / block_slots) blocks in seq.swap_blocks; position p sits at host slot
/// swap_blocks[p / block_slots] * block_slots + p % block_slots. The lowest free blocks go first,
/// so an unfragmented pool gives a sequence one contiguous region (one transfer on the cuda
/// backend). Not thread-safe: the engine's thread owns it.
class SwapSpace {
 public:
  /// n_slots rounded down to whole blocks; block_slots >= 1 (std::invalid_argument otherwise).
  SwapSpace(int64_t n_slots, int block_slots);

  int block_slots() const { return block_slots_; }
  int64_t capacity_slots() const { return n_blocks_ * block_slots_; }
  int64_t free_slots() const { return n_free_blocks() * block_slots_; }
  /// Blocks n_positions positions take.
  int64_t blocks_for(int n_positions) const { return (int64_t{n_positions} + block_slots_ - 1) / block_slots_; }
  /// Can a sequence holding no blocks swap out n_positions positions now?
  bool can_hold(int n_positions) const { return blocks_for(n_positions) <= n_free_blocks(); }

  /// Gives seq blocks for its first n_positions positions. Throws std::logic_error when seq
  /// already holds blocks or the pool cannot hold them (check can_hold first).
  void allocate(Sequence& seq, int n_positions);
  /// Returns seq's blocks to the pool. Idempotent.
  void release(Sequence& seq);

  /// Appends the runs that move positions [begin, end) of seq between its arena slots (as kv
  /// maps them now) and its host slots, adjacent runs merged. kv is asked once per arena block
  /// (paged) or once in all (naive: a contiguous region). Throws std::logic_error when seq does
  /// not hold host blocks up to end.
  void runs(const Sequence& seq, const KvManager& kv, int begin, int end, std::vector<KvSwap>& out) const;

  /// Every block handed out is either held by exactly one of `holders` (every sequence that may
  /// hold blocks) or free again; throws std::logic_error.
  void check_invariants(const std::vector<const Sequence*>& holders) const;

 private:
  int64_t n_free_blocks() const { return n_blocks_ - next_fresh_ + static_cast<int64_t>(released_.size()); }

  int block_slots_;
  int64_t n_blocks_;
  // Free blocks: every block >= next_fresh_ (never handed out yet) and released_, a min-heap
  // (std::greater) of blocks below it. Memory grows with what was used, not with the pool (a
  // 4 GiB pool of a small model has millions of blocks).
  int64_t next_fresh_ = 0;
  std::vector<int32_t> released_;
};

}  // namespace servelab
