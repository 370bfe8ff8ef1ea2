#pragma once
// BlockRuns: the paged manager's free blocks that hold nothing worth keeping (no cached prefix),
// kept as runs of consecutive block ids so that each sequence's blocks lie in physical order
// (the decode kernel reads ordered blocks 2-4% faster at 4k-32k contexts: kernels/README.md,
// "KV layout"). Two kinds of run:
//  - extents: maximal runs no one has claimed, ordered by address and by length;
//  - reservations: per sequence, the run right after its last block, up to the blocks it will
//    still take (Sequence::n_kv_final). A reserved block is free: it counts for admission, and a
//    sequence that finds no extent (and no cached block: PagedKvManager) takes the top of the
//    largest reservation.
// Extents are kept in trees, O(log n) an update; reservations in a hash table by owner, O(1),
// walked to find the largest only when a new run finds no room elsewhere. No per-block state.
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/kv/owner_runs.h"

namespace servelab {

/// Physical runs of block tables: stretches of consecutive ids in table order (b, b+1, ...).
struct TableRuns {
  int64_t blocks = 0;
  int64_t runs = 0;
  /// Counts one table's blocks and runs.
  void add(std::span<const int32_t> table) {
    blocks += static_cast<int64_t>(table.size());
    for (size_t i = 0; i < table.size(); ++i) runs += i == 0 || table[i] != table[i - 1] + 1;
  }
  /// Mean blocks per run (0 without blocks).
  double mean() const { return runs ? static_cast<double>(blocks) / static_cast<double>(runs) : 0.0; }
};

/// Where a block comes from: see BlockRuns::take. Block ids are 0..n_blocks-1.
class BlockRuns {
 public:
  static constexpr int32_t kNone = -1;

  explicit BlockRuns(int32_t n_blocks) : n_blocks_(n_blocks) {}

  /// Free blocks held here (extents and reservations).
  int32_t size() const { return n_; }
  /// Blocks reserved by owner (0 when none).
  int32_t reserved(uint64_t owner) const;

  /// Block b (not held here) becomes free; merged with the extents beside it.
  void add(int32_t b) { add_range(b, b + 1); }
  /// Every block free: one extent (on a fresh instance).
  void add_all() { add_range(0, n_blocks_); }
  /// Blocks [begin, end) (none held here) become free; merged with the extents beside them.
  void add_range(int32_t begin, int32_t end) {
    n_ += end - begin;
    merge_extent(begin, end);
  }

  /// Takes a block for owner, to sit right after block `prev` (kNone: a table's first block),
  /// `want` blocks being what owner will still take from here on (this one included). In order:
  /// the first block of owner's reservation when it follows prev; the block after prev when it
  /// lies in an extent; the start of the smallest extent holding `want` blocks, else of the
  /// largest; with may_split, when no extent holds want and half the largest reservation is
  /// longer than every extent (or no extent is left), the top of that reservation (want blocks,
  /// at least half, all of it when want is as long); else kNone. `tail`: the block becomes owner's last, so the blocks after it (up to
  /// want - 1, from its extent) become owner's reservation and an older reservation is given back;
  /// otherwise (a copy-on-write of an inner block) owner's reservation is left alone.
  int32_t take(uint64_t owner, int32_t prev, int32_t want, bool tail, bool may_split = true);
  /// Whether take(owner, prev, want, tail, may_split) would find a block: false when nothing here
  /// can serve owner (no extent; with tail, no reservation of owner's; with may_split, no
  /// reservation to split), where take returns kNone changing nothing. The steady state of a full
  /// arena with a prefix cache, asked before each eviction: a few loads, not take's walk.
  bool can_serve(uint64_t owner, bool tail, bool may_split) const {
    if (n_ == 0) return false;
    if (!ext_.empty() || (tail && resv_.find(owner))) return true;
    return may_split && resv_.size() > 0;
  }
  /// add_range(begin, end) then take(owner, prev, want, tail, false): a run just evicted from the
  /// prefix cache, when take has just found no block. With no extent held (the common case: every
  /// free block is a cached one or reserved) this is done without the extent trees, since the
  /// new extent would be the only one: owner takes begin (prev, owner's block, lies outside it).
  int32_t take_run(uint64_t owner, int32_t prev, int32_t begin, int32_t end, int32_t want, bool tail);

  /// Up to n of owner's reserved blocks when its reservation starts right after prev (what n
  /// calls of take(owner, prev, ..., tail = true) in a row would hand out: prev + 1, prev + 2, ...)
  /// in one update of the reservation; returns how many (0: no reservation follows prev).
  int32_t take_reserved(uint64_t owner, int32_t prev, int32_t n);
  /// Gives owner's reservation back to the extents (a sequence leaving). No-op without one.
  void drop(uint64_t owner);

  /// Marks every block held here in `mark` (size n_blocks; must be 0 there) and checks the runs:
  /// in range, disjoint, extents maximal, the counts right. Returns "" or what is wrong.
  std::string check(std::span<char> mark) const;

 private:
  using Run = BlockRun;
  /// Makes [begin, end) (already counted in n_) an extent, merged with its neighbours.
  void merge_extent(int32_t begin, int32_t end);
  /// Takes b out of extent `it`; with `tail`, the blocks after b, up to b + want, become owner's
  /// reservation.
  int32_t take_from_extent(std::map<int32_t, int32_t>::iterator it, int32_t b, uint64_t owner, int32_t want, bool tail);
  /// Takes the middle block of victim's reservation, the largest (its owner keeps the lower half).
  int32_t split_largest_reservation(uint64_t owner, uint64_t victim, int32_t want, bool tail);
  /// (length, owner) of the longest reservation, the largest owner id among equals; (0, 0) when
  /// there is none. A walk over the reservations' table: asked only when no extent holds what a
  /// new run wants and no cached block is left, where keeping them ordered by length cost two
  /// tree updates every time a running sequence took its next reserved block.
  std::pair<int32_t, uint64_t> largest_reservation() const;
  void insert_extent(int32_t begin, int32_t end);
  void erase_extent(std::map<int32_t, int32_t>::iterator it);
  /// Node handles of erased runs, reused by the next insertions: a decode's block from its
  /// reservation, or an extent cut in two, changes the sets' keys without a free and a malloc.
  /// Only a cache: a copy of the runs starts without any.
  template <class Set>
  struct Spares {
    static constexpr size_t kMax = 8;
    std::vector<typename Set::node_type> nodes;
    Spares() = default;
    Spares(const Spares&) {}
    Spares& operator=(const Spares&) {
      nodes.clear();
      return *this;
    }
    Spares(Spares&&) = default;
    Spares& operator=(Spares&&) = default;
    void keep(typename Set::node_type&& node) {
      if (node && nodes.size() < kMax) nodes.push_back(std::move(node));
    }
    /// A spare node to overwrite, or an empty handle when none is left.
    typename Set::node_type take() {
      if (nodes.empty()) return {};
      typename Set::node_type node = std::move(nodes.back());
      nodes.pop_back();
      return node;
    }
  };
  /// The extent holding b, or ext_.end().
  std::map<int32_t, int32_t>::iterator extent_of(int32_t b);
  void set_reservation(uint64_t owner, int32_t begin, int32_t end) { set_reservation(resv_.find(owner), owner, begin, end); }
  /// The same with owner's entry in resv_ already looked up (nullptr: none).
  void set_reservation(Run* run, uint64_t owner, int32_t begin, int32_t end);

  int32_t n_blocks_;
  int32_t n_ = 0;
  std::map<int32_t, int32_t> ext_;                   ///< extent begin -> end
  std::set<std::pair<int32_t, int32_t>> ext_by_len_;  ///< (length, begin)
  OwnerRuns resv_;                                    ///< owner -> its reservation (never empty)
  Spares<std::map<int32_t, int32_t>> spare_ext_;
  Spares<std::set<std::pair<int32_t, int32_t>>> spare_ext_len_;
};

}  // namespace servelab
