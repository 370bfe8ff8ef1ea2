#pragma once
// Paged KV manager (vLLM / nano-vllm style): the arena is cut into fixed blocks of block_size
// slots; each sequence owns a block table (seq.kv.blocks) mapping position p to block
// blocks[p / block_size]. Blocks are reference-counted so sequences can share them:
//  - prefix caching: a full, computed block of accepted tokens is registered under a chained hash
//    of (parent block's hash, its token ids), the chain rooted in the sequence's cache salt; a later sequence whose prompt starts with the same
//    tokens reuses those blocks instead of recomputing them. Freed blocks keep their hash while
//    free blocks that cache nothing are left (others' reservations below excepted); then the
//    least recently freed go first, a run at a time: the oldest with the cached free blocks beside
//    it (up to kMaxEvictRun), or the cached free block right after a growing sequence's last one.
//  - runs: a sequence's blocks are placed in physical order where free blocks allow, so the
//    decode kernel streams them (kernels/README.md, "KV layout"): the block after its last one;
//    a reservation of the blocks it will still take (n_kv_final), free for admission; a new run
//    in the smallest free extent that holds them (BlockRuns). Placement never changes how many
//    blocks are free, so admission and capacity are those of any placement; which prefixes stay
//    cached can differ from a strict least-recently-freed order by up to a run evicted early.
//  - fork (parallel sampling): the child shares every parent block; a write into a shared block
//    first copies it (copy-on-write), queued as a KvCopy for the backend.
#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/kv/block_runs.h"
#include "engine/kv/kv_manager.h"
#include "engine/kv/prefix_index.h"

namespace servelab {

/// Block-pool manager over n_slots / block_size whole blocks (a tail shorter than a block is not
/// used: capacity_slots() is the whole-block part). Not thread-safe: one thread owns engine state.
/// grow(seq, n) must be called before every write of positions [seq.n_computed, n), even when seq
/// already holds the blocks, so that shared blocks in that range are copied first.
class PagedKvManager final : public KvManager {
 public:
  PagedKvManager(const KvConfig& config, int64_t n_slots);

  KvKind kind() const override { return KvKind::paged; }
  int64_t capacity_slots() const override { return int64_t{n_blocks()} * block_size_; }
  int64_t free_slots() const override { return int64_t{n_free_} * block_size_; }
  int64_t unit_slots() const override { return block_size_; }
  /// Free-list slots that holding n_tokens would consume: new blocks, copy-on-write copies, and
  /// (unallocated) prefix-cache hits on blocks that sit on the free list.
  int64_t slots_needed(const Sequence& seq, int n_tokens) const override;
  /// Whole blocks for n_kv_final() positions, no prefix-cache hits.
  int64_t worst_case_slots(const Sequence& seq) const override {
    return int64_t{blocks_for(seq.n_kv_final())} * block_size_;
  }

  bool can_allocate(const Sequence& seq, int n_tokens) const override;
  void allocate(Sequence& seq, int n_tokens) override;
  bool can_grow(const Sequence& seq, int n_tokens) const override;
  void grow(Sequence& seq, int n_tokens) override;
  void release(Sequence& seq) override;
  /// Drops the blocks wholly past n_keep (tail first; a shared one loses only seq's reference).
  void truncate(Sequence& seq, int n_keep) override;
  void fork(const Sequence& parent, Sequence& child) override;

  int64_t slot(const Sequence& seq, int pos) const override {
    const auto b = static_cast<size_t>(pos / block_size_);
    if (pos < 0 || b >= seq.kv.blocks.size()) throw_bad_position(seq, pos);
    return int64_t{seq.kv.blocks[b]} * block_size_ + pos % block_size_;
  }
  bool block_ids(const Sequence& seq, int n_blocks, int32_t* out) const override {
    if (n_blocks < 0 || static_cast<size_t>(n_blocks) > seq.kv.blocks.size())
      throw_bad_position(seq, n_blocks * block_size_ - 1);
    std::copy_n(seq.kv.blocks.data(), n_blocks, out);
    return true;
  }
  void on_computed(Sequence& seq) override;
  std::vector<KvCopy> take_pending_copies() override;

  KvBreakdown breakdown(std::span<const Sequence* const> live, const Sequence* next = nullptr) const override;
  void check_invariants(std::span<const Sequence* const> live) const override;

  int block_size() const { return block_size_; }
  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  /// Live block-table references to block b (0: free, possibly still holding a cached prefix).
  int ref_count(int32_t b) const { return blocks_.at(static_cast<size_t>(b)).ref; }
  /// Blocks registered in the prefix cache (live or free).
  size_t n_cached_blocks() const { return by_hash_.size(); }
  /// Free blocks reserved for seq id's next blocks (counted in free_slots()).
  int32_t reserved_blocks(uint64_t seq_id) const { return runs_.reserved(seq_id); }

 private:
  static constexpr int32_t kNone = -1;
  static constexpr uint64_t kNoSeq = ~uint64_t{0};
  /// Most cached blocks evicted at once to start a run (512 KB of K at 2 KB slot rows, block 16).
  static constexpr int kMaxEvictRun = 32;

  /// 32 bytes, aligned so that none straddles two cache lines (the flags beside ref: 40 bytes
  /// with in_free at the end).
  struct alignas(32) Block {
    int ref = 0;
    bool hashed = false;           ///< hash and block_tokens_' row are valid: the block is full and computed
    /// by_hash_ maps hash to this block (hashed, and not a later copy of a cached block's
    /// content): freed, it stays cached. Kept here so a release reads no index entry.
    bool indexed = false;
    bool in_free = false;          ///< ref == 0: on the cached free list (hashed) or in runs_
    uint64_t hash = 0;             ///< chained hash of the prefix ending with this block
    uint64_t owner = kNoSeq;       ///< seq that took it from the free list (sharing bookkeeping)
    int32_t prev = kNone, next = kNone;  ///< links of the cached free list
  };
  static_assert(sizeof(Block) == 32);

  /// Blocks at the start of seq's prompt found in the prefix cache (never the block holding the
  /// last prompt token). The answer lives in a scratch vector reused by every call (no per-call
  /// allocation): read it before the next call.
  const std::vector<int32_t>& match_prefix(const Sequence& seq) const;
  /// The token ids cached block b holds (block_size of them), valid while it is hashed.
  const TokenId* tokens_of(int32_t b) const { return block_tokens_.data() + size_t(b) * size_t(block_size_); }
  /// Blocks in [seq.n_computed, n_tokens) that seq holds but shares: each needs a copy.
  int count_copies(const Sequence& seq, int n_tokens) const;
  int blocks_for(int n_tokens) const { return full_blocks(n_tokens + block_size_ - 1); }
  /// n_tokens / block_size for n_tokens >= 0: a shift when the block size is a power of two (it
  /// is asked several times a running sequence a step, and a division costs tens of cycles).
  int full_blocks(int n_tokens) const { return block_shift_ >= 0 ? n_tokens >> block_shift_ : n_tokens / block_size_; }

  /// Blocks seq will hold at its largest (n_kv_final() positions, or n_tokens when more).
  int final_blocks(const Sequence& seq, int n_tokens) const {
    return std::max(blocks_for(seq.n_kv_final()), blocks_for(n_tokens));
  }

  // Free blocks: the ones without a cached prefix in runs_ (BlockRuns), the cached ones on a
  // doubly linked list threaded through blocks_ in the order they were freed, so a prefix hit
  // takes one from the middle in O(1) and eviction takes the least recently freed (the head).
  void push_free_back(int32_t b);
  void unlink_free(int32_t b);
  /// Takes a free block for new content, to follow block prev in owner's table (kNone: first),
  /// owner taking `want` blocks from here on; tail: it becomes owner's last block (BlockRuns::take).
  /// A cached block is evicted (its hash dropped) only when runs_ is empty. ref becomes 1.
  int32_t take_fresh(uint64_t owner, int32_t prev, int want, bool tail);
  /// Free and caching a prefix (on the cached free list).
  bool cached_free(int32_t b) const {
    return b >= 0 && b < n_blocks() && blocks_[static_cast<size_t>(b)].in_free && blocks_[static_cast<size_t>(b)].hashed;
  }
  /// Moves cached free block b into runs_' bookkeeping: its prefix is forgotten, it stays free.
  void evict(int32_t b);
  /// [lo, hi] evicted already: evicts the cached free blocks after hi (and before lo when
  /// both_ways) while they extend it to min(want, kMaxEvictRun) blocks; hands it to runs_.
  void evict_run(int32_t lo, int32_t hi, int want, bool both_ways);
  /// evict_run's extension of [lo, hi], without handing the run to runs_.
  void extend_evicted(int32_t& lo, int32_t& hi, int want, bool both_ways);
  /// on_computed's work on seq's table blocks [first, n_full): each one's hash chained from
  /// parent, its tokens copied, its index entry. kBlock: the block size when known at compile time
  /// (16, the default), else 0.
  template <int kBlock>
  void register_blocks(Sequence& seq, int first, int n_full, uint64_t parent);
  /// Appends fresh blocks to seq's table until it holds n_tokens positions.
  void append_fresh(Sequence& seq, int n_tokens);
  /// Drops one reference; a block reaching 0 goes back to the free list.
  void unref(int32_t b);
  void forget_hash(Block& blk, int32_t b);

  [[noreturn]] static void throw_bad_position(const Sequence& seq, int pos);

  KvConfig config_;
  int block_size_;
  int block_shift_ = -1;  ///< log2(block_size_) when it is a power of two, else -1
  std::vector<Block> blocks_;
  BlockRuns runs_;
  int32_t free_head_ = kNone, free_tail_ = kNone;  ///< the cached free list
  int32_t n_free_ = 0;                             ///< runs_ and the cached free list
  PrefixIndex by_hash_;  ///< prefix cache: chained hash -> block (allocation-free, prefix_index.h)
  /// Per block, the token ids it caches (to confirm a hash match): one flat array for the arena
  /// rather than a vector a block, so registering a block copies without allocating.
  std::vector<TokenId> block_tokens_;
  mutable std::vector<int32_t> match_hits_;  ///< match_prefix's answer, reused
  /// Seqs that may hold a block with ref > 1 (every holder of a shared block is here); breakdown
  /// walks only these block tables and counts the others in O(1).
  std::unordered_set<uint64_t> sharing_;
  std::vector<KvCopy> pending_copies_;
  // breakdown() scratch, reused to stay allocation-free: per block, the visit epoch and the
  // largest stored / filled-to-be count over the owners seen.
  mutable std::vector<uint32_t> seen_epoch_;
  mutable std::vector<int32_t> seen_stored_, seen_fill_;
  mutable uint32_t epoch_ = 0;
};

}  // namespace servelab
