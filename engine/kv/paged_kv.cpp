#include "engine/kv/paged_kv.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/kv/held_split.h"
#include "engine/splitmix64.h"
#include "engine/kv/kv_checks.h"

namespace servelab {
namespace {

constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ull;  // parent hash of a sequence's first block

/// Parent hash of a sequence's first block: the salt (a LoRA adapter's id) keys the whole chain,
/// so K/V computed under one salt is never found under another.
/// Root of a sequence's hash chain: the cache salt and then the LoRA adapter id mixed in, so K/V
/// computed under one (salt, adapter) is never reused under another; (0, 0) is the plain root.
uint64_t root_hash(uint64_t salt, uint64_t lora_id) {
  uint64_t h = salt == 0 ? kRootHash : splitmix64(kRootHash ^ splitmix64(salt));
  return lora_id == 0 ? h : splitmix64(h ^ splitmix64(lora_id ^ 0x4c6f5241ull));
}

/// 64x64 -> 128-bit product folded to 64 bits (wyhash's "mum"): one multiplication mixes every
/// bit of both words into the result.
inline uint64_t mum(uint64_t a, uint64_t b) {
  const __uint128_t p = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

/// Chained block hash: depends on every token of the prefix through `parent`. Every full block
/// is hashed once (on_computed) and every prompt block of an admission again (match_prefix), so
/// this runs over every token the simulator sees: four tokens (two 64-bit words) a multiplication,
/// chained as wyhash chains its rounds (the state goes into the next product, so the order of the
/// words counts), ~45 instructions a 16-token block where four multiply-rotate lanes and two
/// splitmix64 rounds took ~145. Token ids are in [0, 2^31) and kW0 has bits 31 and 63 set, so a
/// word xor kW0 is never 0 (a zero factor would forget the state). A collision costs only a
/// cache miss: match_prefix compares the tokens before it reuses a block.
uint64_t block_hash(uint64_t parent, const TokenId* tokens, int n) {
  constexpr uint64_t kW0 = 0xe7037ed1a0b428dbull, kW1 = 0x8ebc6af09c88c6e3ull, kEnd = 0x589965cc75374cc3ull;
  uint64_t h = parent ^ 0xa0761d6478bd642full;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    uint64_t a, b;
    std::memcpy(&a, tokens + i, sizeof a);  // tokens i and i + 1
    std::memcpy(&b, tokens + i + 2, sizeof b);
    h = mum(a ^ kW0, b ^ h ^ kW1);
  }
  for (; i < n; ++i) h = mum(uint64_t{static_cast<uint32_t>(tokens[i])} ^ kW0, h ^ kW1);  // a block size not a multiple of 4
  return mum(h ^ kEnd, static_cast<uint64_t>(n) ^ kW1);
}

constexpr kv_checks::Checks kPaged{"paged"};  // messages name the manager

}  // namespace

PagedKvManager::PagedKvManager(const KvConfig& config, int64_t n_slots)
    : config_(config), block_size_(config.block_size), runs_(0) {
  config_.validate();
  if (std::has_single_bit(static_cast<unsigned>(block_size_))) block_shift_ = std::countr_zero(static_cast<unsigned>(block_size_));
  if (n_slots < block_size_)
    throw std::invalid_argument("paged KV arena of " + std::to_string(n_slots) +
                                " slots is smaller than one block (kv.block_size = " + std::to_string(block_size_) +
                                "); give the KV cache more memory or lower kv.block_size");
  const int64_t n_blocks = n_slots / block_size_;
  if (n_blocks > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("paged KV arena of " + std::to_string(n_slots) + " slots has more than 2^31 blocks; "
                                "raise kv.block_size");
  blocks_.resize(static_cast<size_t>(n_blocks));
  runs_ = BlockRuns(static_cast<int32_t>(n_blocks));
  held_per_block_ = block_size_;  // nothing shared yet
  for (Block& blk : blocks_) blk.in_free = true;
  runs_.add_all();
  n_free_ = static_cast<int32_t>(n_blocks);
  by_hash_ = PrefixIndex(blocks_.size());  // at most one entry a block: never grows while running
  block_tokens_.assign(blocks_.size() * static_cast<size_t>(block_size_), 0);
  seen_epoch_.assign(blocks_.size(), 0);
  seen_stored_.assign(blocks_.size(), 0);
  seen_fill_.assign(blocks_.size(), 0);
}

void PagedKvManager::throw_bad_position(const Sequence& seq, int pos) {
  throw std::out_of_range(kPaged.label(seq) + ": position " + std::to_string(pos) + " outside its " +
                          std::to_string(seq.kv.blocks.size()) + " block(s)");
}

// ---- free blocks ----

void PagedKvManager::push_free_back(int32_t b) {
  Block& blk = blocks_[b];
  blk.next = kNone;
  blk.prev = free_tail_;
  if (free_tail_ != kNone) blocks_[free_tail_].next = b; else free_head_ = b;
  free_tail_ = b;
  blk.in_free = true;
  ++n_free_;
}

void PagedKvManager::unlink_free(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.prev != kNone) blocks_[blk.prev].next = blk.next; else free_head_ = blk.next;
  if (blk.next != kNone) blocks_[blk.next].prev = blk.prev; else free_tail_ = blk.prev;
  blk.prev = blk.next = kNone;
  blk.in_free = false;
  --n_free_;
}

void PagedKvManager::forget_hash(Block& blk, int32_t b) {
  if (!blk.hashed) return;
  if (blk.indexed) by_hash_.erase_if(blk.hash, b);
  blk.hashed = blk.indexed = false;
}

int32_t PagedKvManager::take_fresh(uint64_t owner, int32_t prev, int want, bool tail) {
  // The block after prev caches a prefix no one holds: the run goes on through it (and the
  // cached free blocks after it) rather than starting again elsewhere.
  if (prev != kNone && cached_free(prev + 1)) {
    evict(prev + 1);
    evict_run(prev + 1, prev + 1, want, false);
  }
  const bool may_split = free_head_ == kNone;
  int32_t b = runs_.can_serve(owner, tail, may_split) ? runs_.take(owner, prev, want, tail, may_split) : kNone;
  if (b == kNone) {  // no free block left outside the prefix cache (or only others' reservations)
    if (free_head_ == kNone) throw std::logic_error("paged KV: out of free blocks; call can_allocate/can_grow first");
    // The least recently freed block, with the ones freed with it that lie beside it (a released
    // sequence's blocks sit on the list tail first, so its run comes back in one piece).
    int32_t lo = free_head_, hi = free_head_;
    evict(free_head_);
    while (hi - lo + 1 < std::min(want, kMaxEvictRun) && free_head_ != kNone && (free_head_ == lo - 1 || free_head_ == hi + 1)) {
      if (free_head_ == lo - 1) --lo; else ++hi;
      evict(free_head_);
    }
    extend_evicted(lo, hi, want, true);
    b = runs_.take_run(owner, prev, lo, hi + 1, want, tail);  // the run just freed, not a reservation
  }
  Block& blk = blocks_[b];
  blk.in_free = false;
  --n_free_;
  forget_hash(blk, b);
  blk.ref = 1;
  blk.owner = owner;
  return b;
}

void PagedKvManager::evict(int32_t b) {
  unlink_free(b);
  Block& blk = blocks_[b];
  forget_hash(blk, b);
  blk.in_free = true;  // still free, now in runs_
  ++n_free_;
  // The next block evicted is most often the new head of the list, whose line unlink_free just
  // wrote: fetch its index slot now (a cache miss a block otherwise, in that eviction's erase).
  if (free_head_ != kNone && blocks_[free_head_].indexed) by_hash_.prefetch(blocks_[free_head_].hash);
}

void PagedKvManager::extend_evicted(int32_t& lo, int32_t& hi, int want, bool both_ways) {
  const int n = std::min(want, kMaxEvictRun);
  while (hi - lo + 1 < n) {
    if (cached_free(hi + 1)) evict(++hi);
    else if (both_ways && cached_free(lo - 1)) evict(--lo);
    else break;
  }
}

void PagedKvManager::evict_run(int32_t lo, int32_t hi, int want, bool both_ways) {
  extend_evicted(lo, hi, want, both_ways);
  runs_.add_range(lo, hi + 1);
}

void PagedKvManager::unref(int32_t b) {
  Block& blk = blocks_[b];
  if (--blk.ref > 0) return;
  blk.owner = kNoSeq;
  if (blk.indexed) {
    push_free_back(b);  // still a cached prefix: evicted only after blocks freed before it
  } else {
    forget_hash(blk, b);
    blk.in_free = true;  // nothing worth keeping: reused before any cached block
    ++n_free_;
    runs_.add(b);
  }
}

// ---- queries ----

const std::vector<int32_t>& PagedKvManager::match_prefix(const Sequence& seq) const {
  std::vector<int32_t>& hits = match_hits_;
  hits.clear();
  if (!config_.prefix_caching) return hits;
  const int n_prompt = std::min(seq.n_prompt, seq.n_tokens());
  const int n_full = n_prompt > 0 ? (n_prompt - 1) / block_size_ : 0;  // blocks ending before the last prompt token
  uint64_t parent = root_hash(seq.cache_salt, seq.lora_id);
  for (int i = 0; i < n_full; ++i) {
    const TokenId* t = seq.tokens.data() + static_cast<size_t>(i) * block_size_;
    const uint64_t h = block_hash(parent, t, block_size_);
    const int32_t b = by_hash_.find(h);
    if (b == PrefixIndex::kAbsent) break;
    if (!std::equal(t, t + block_size_, tokens_of(b))) break;  // hash collision
    hits.push_back(b);
    parent = h;
  }
  return hits;
}

int PagedKvManager::count_copies(const Sequence& seq, int n_tokens) const {
  // Every holder of a shared block is in sharing_: with no sharing at all (the common case, asked
  // for every running sequence every step) no block needs a copy.
  if (n_tokens <= seq.n_computed || sharing_.empty()) return 0;
  const int end = std::min(static_cast<int>(seq.kv.blocks.size()), blocks_for(n_tokens));
  int n = 0;
  for (int i = full_blocks(std::max(0, seq.n_computed)); i < end; ++i) n += blocks_[seq.kv.blocks[i]].ref > 1;
  return n;
}

int64_t PagedKvManager::slots_needed(const Sequence& seq, int n_tokens) const {
  kPaged.require_tokens(seq, n_tokens);
  if (seq.kv.allocated) {
    const int n_new = std::max(0, blocks_for(n_tokens) - static_cast<int>(seq.kv.blocks.size()));
    return int64_t{n_new + count_copies(seq, n_tokens)} * block_size_;
  }
  const std::vector<int32_t>& hits = match_prefix(seq);
  const int n_hits = static_cast<int>(hits.size());
  const int n_off_free = static_cast<int>(std::count_if(hits.begin(), hits.end(), [&](int32_t b) { return blocks_[b].ref == 0; }));
  return int64_t{std::max(blocks_for(n_tokens), n_hits) - n_hits + n_off_free} * block_size_;
}

bool PagedKvManager::can_allocate(const Sequence& seq, int n_tokens) const {
  kPaged.require_allocated(seq, false);
  return slots_needed(seq, n_tokens) <= free_slots();
}

bool PagedKvManager::can_grow(const Sequence& seq, int n_tokens) const {
  kPaged.require_allocated(seq, true);
  return slots_needed(seq, n_tokens) <= free_slots();
}

// ---- mutations ----

void PagedKvManager::allocate(Sequence& seq, int n_tokens) {
  if (!can_allocate(seq, n_tokens))
    throw std::logic_error(kPaged.label(seq) + ": not enough free blocks for " + std::to_string(n_tokens) +
                           " tokens; call can_allocate first");
  const std::vector<int32_t>& hits = match_prefix(seq);
  seq.kv = KvHandle{};
  seq.kv.blocks.reserve(static_cast<size_t>(std::max(blocks_for(n_tokens), static_cast<int>(hits.size()))));
  for (int32_t b : hits) {
    Block& blk = blocks_[b];
    if (blk.ref == 0) {
      unlink_free(b);
      blk.owner = seq.id;
    } else {  // now shared with a live sequence: both sides' tables must be walked by breakdown
      sharing_.insert(seq.id);
      if (blk.owner != kNoSeq) sharing_.insert(blk.owner);
      held_per_block_ = 0;  // copy-on-write may be needed: ask slots_needed
    }
    ++blk.ref;
    seq.kv.blocks.push_back(b);
  }
  append_fresh(seq, n_tokens);
  seq.kv.n_cached_prefix = static_cast<int>(hits.size()) * block_size_;
  seq.kv.n_registered = static_cast<int>(hits.size());
  seq.kv.allocated = true;
}

void PagedKvManager::grow(Sequence& seq, int n_tokens) {
  if (!can_grow(seq, n_tokens))
    throw std::logic_error(kPaged.label(seq) + ": not enough free blocks to grow to " + std::to_string(n_tokens) +
                           " tokens; call can_grow first");
  auto& table = seq.kv.blocks;
  if (n_tokens > seq.n_computed) {  // copy-on-write every shared block about to be written
    const int end = std::min(static_cast<int>(table.size()), blocks_for(n_tokens));
    const int n_final = final_blocks(seq, n_tokens);
    for (int i = std::max(0, seq.n_computed / block_size_); i < end; ++i) {
      const int32_t old = table[i];
      if (blocks_[old].ref <= 1) continue;
      const bool last = i + 1 == static_cast<int>(table.size());
      const int32_t fresh = take_fresh(seq.id, i > 0 ? table[i - 1] : kNone, n_final - i, last);
      const int64_t filled = std::clamp<int64_t>(seq.n_computed - int64_t{i} * block_size_, 0, block_size_);
      if (filled > 0) pending_copies_.push_back({int64_t{old} * block_size_, int64_t{fresh} * block_size_, filled});
      Block& shared = blocks_[old];
      --shared.ref;  // stays >= 1: the other holders keep it
      if (shared.owner == seq.id) shared.owner = kNoSeq;
      table[i] = fresh;
    }
  }
  append_fresh(seq, n_tokens);
}

void PagedKvManager::append_fresh(Sequence& seq, int n_tokens) {
  auto& table = seq.kv.blocks;
  const int n_final = final_blocks(seq, n_tokens);
  const int n_blocks = blocks_for(n_tokens);
  while (static_cast<int>(table.size()) < n_blocks) {
    const int i = static_cast<int>(table.size());
    // The run of its reservation that follows its last block, taken at once: the blocks
    // take_fresh would hand out one by one (none of them caches a prefix: reserved blocks are
    // in runs_), with one update of the reservation rather than one a block.
    if (const int32_t m = table.empty() ? 0 : runs_.take_reserved(seq.id, table.back(), n_blocks - i); m > 0) {
      for (int32_t b = table.back() + 1, last = table.back() + m; b <= last; ++b) {
        Block& blk = blocks_[b];
        blk.in_free = false;
        blk.ref = 1;
        blk.owner = seq.id;
        table.push_back(b);
      }
      n_free_ -= m;
      continue;
    }
    table.push_back(take_fresh(seq.id, table.empty() ? kNone : table.back(), n_final - i, true));
  }
}

void PagedKvManager::release(Sequence& seq) {
  if (!seq.kv.allocated) return;
  sharing_.erase(seq.id);
  if (sharing_.empty()) held_per_block_ = block_size_;
  // Tail first, so a sequence's last blocks are evicted from the prefix cache before its first.
  for (auto it = seq.kv.blocks.rbegin(); it != seq.kv.blocks.rend(); ++it) {
    const int32_t b = *it;
    if (b < 0 || b >= n_blocks() || blocks_[b].ref <= 0)
      throw std::logic_error(kPaged.label(seq) + ": releasing block " + std::to_string(b) + " it does not hold");
    if (blocks_[b].owner == seq.id) blocks_[b].owner = kNoSeq;
    unref(b);
  }
  runs_.drop(seq.id);
  seq.kv = KvHandle{};
}

void PagedKvManager::truncate(Sequence& seq, int n_keep) {
  kPaged.require_allocated(seq, true);
  if (n_keep < seq.n_computed)
    throw std::logic_error(kPaged.label(seq) + ": truncate to " + std::to_string(n_keep) + " positions would drop " +
                           std::to_string(seq.n_computed) + " computed ones");
  auto& table = seq.kv.blocks;
  const int keep = blocks_for(n_keep);
  while (static_cast<int>(table.size()) > keep) {  // tail first, as release
    const int32_t b = table.back();
    if (blocks_[b].owner == seq.id) blocks_[b].owner = kNoSeq;
    unref(b);
    table.pop_back();
  }
  seq.kv.n_registered = std::min(seq.kv.n_registered, static_cast<int>(table.size()));
  seq.kv.register_at = 0;  // on_computed works it out again
}

void PagedKvManager::fork(const Sequence& parent, Sequence& child) {
  kPaged.require_allocated(parent, true);
  kPaged.require_allocated(child, false);
  child.kv = KvHandle{};
  child.kv.blocks = parent.kv.blocks;
  child.kv.n_registered = parent.kv.n_registered;
  for (int32_t b : child.kv.blocks) ++blocks_[b].ref;
  child.kv.allocated = true;
  if (!child.kv.blocks.empty()) {
    sharing_.insert(parent.id);
    sharing_.insert(child.id);
    held_per_block_ = 0;
  }
}

void PagedKvManager::on_computed(Sequence& seq) {
  if (!config_.prefix_caching) {
    seq.kv.register_at = std::numeric_limits<int>::max();  // never anything to register
    return;
  }
  if (!seq.kv.allocated) return;
  const auto& table = seq.kv.blocks;
  const int n_full = std::min(full_blocks(std::max(0, std::min(seq.n_computed, seq.n_tokens()))), static_cast<int>(table.size()));
  // Blocks are registered in order: the first unregistered full block follows the
  // n_registered ones. Most calls (a decode that did not fill its block) find none and return
  // without touching blocks_ (a cache miss a running sequence a step).
  int i = seq.kv.n_registered;
  // Until n_computed reaches the end of the first unregistered block there is nothing to do.
  if (i >= n_full) {
    seq.kv.register_at = (i + 1) * block_size_;
    return;
  }
  seq.kv.register_at = (n_full + 1) * block_size_;
  uint64_t parent = i > 0 ? blocks_[table[i - 1]].hash : root_hash(seq.cache_salt, seq.lora_id);
  seq.kv.n_registered = n_full;
  if (block_size_ == 16) register_blocks<16>(seq, i, n_full, parent);  // the default block size
  else register_blocks<0>(seq, i, n_full, parent);
}

template <int kBlock>
void PagedKvManager::register_blocks(Sequence& seq, int first, int n_full, uint64_t parent) {
  // A block size known here unrolls the hash's rounds and makes the copy four vector moves (a
  // memcpy call a block otherwise).
  const int n = kBlock > 0 ? kBlock : block_size_;
  const auto& table = seq.kv.blocks;
  // The hashes first, each one's index slot fetched as it is known, then the copies and the
  // inserts: the slots are scattered over the index (a cache miss each), and a prefill registers
  // tens of blocks at once.
  for (int i = first; i < n_full; ++i) {
    Block& blk = blocks_[table[i]];
    blk.hash = block_hash(parent, seq.tokens.data() + static_cast<size_t>(i) * n, n);
    by_hash_.prefetch(blk.hash);
    parent = blk.hash;
  }
  for (int i = first; i < n_full; ++i) {
    Block& blk = blocks_[table[i]];
    blk.hashed = true;
    std::copy_n(seq.tokens.data() + static_cast<size_t>(i) * n, n, block_tokens_.data() + size_t(table[i]) * size_t(n));
    blk.indexed = by_hash_.insert_if_absent(blk.hash, table[i]);  // identical content already cached: keep the first
  }
}

std::vector<KvCopy> PagedKvManager::take_pending_copies() { return std::exchange(pending_copies_, {}); }

// ---- accounting ----

KvBreakdown PagedKvManager::breakdown(std::span<const Sequence* const> live, const Sequence*) const {
  KvBreakdown out;
  out.capacity = capacity_slots();
  if (++epoch_ == 0) {  // wrapped: forget every stale mark
    std::fill(seen_epoch_.begin(), seen_epoch_.end(), 0);
    epoch_ = 1;
  }
  int64_t held = 0, fill = 0;
  for (const Sequence* seq : live) {
    if (!seq->kv.allocated) continue;
    const auto& table = seq->kv.blocks;
    // sharing_ is empty unless prefixes or samples are shared: skip the hash lookup then.
    if (sharing_.empty() || !sharing_.contains(seq->id)) {  // every block exclusive: one span
      const HeldSplit s = split_held(*seq, 0, int64_t{block_size_} * static_cast<int64_t>(table.size()));
      out.stored += s.stored;
      fill += s.stored + s.reserved;
      held += s.stored + s.reserved + s.internal_frag;
      continue;
    }
    // Shared blocks count once, with the most any of their holders has stored / will fill.
    for (size_t i = 0; i < table.size(); ++i) {
      const int32_t b = table[i];
      const int64_t begin = static_cast<int64_t>(i) * block_size_;
      const HeldSplit s = split_held(*seq, begin, begin + block_size_);
      const auto st = static_cast<int32_t>(s.stored), fi = static_cast<int32_t>(s.stored + s.reserved);
      if (seen_epoch_[b] != epoch_) {
        seen_epoch_[b] = epoch_;
        seen_stored_[b] = st;
        seen_fill_[b] = fi;
        out.stored += st;
        fill += fi;
        held += block_size_;
      } else {
        if (st > seen_stored_[b]) out.stored += st - std::exchange(seen_stored_[b], st);
        if (fi > seen_fill_[b]) fill += fi - std::exchange(seen_fill_[b], fi);
      }
    }
  }
  out.reserved = fill - out.stored;
  out.internal_frag = held - fill;
  out.external_frag = 0;  // any free block serves any request
  out.free = free_slots();  // includes freed blocks kept only as prefix cache
  return out;
}

void PagedKvManager::check_invariants(std::span<const Sequence* const> live) const {
  const auto fail = [](const std::string& what) { throw std::logic_error("paged KV invariant: " + what); };
  const auto str = [](auto v) { return std::to_string(v); };
  std::vector<int> refs(blocks_.size(), 0);
  std::vector<int> index(blocks_.size(), -1);
  std::unordered_set<uint64_t> ids;
  // allocate_slots answers from held_per_block_ without asking slots_needed: only while nothing
  // is shared may it promise that a held block needs no copy.
  if (held_per_block_ != (sharing_.empty() ? block_size_ : 0))
    fail("held_per_block " + str(held_per_block_) + " with " + str(sharing_.size()) + " sequence(s) sharing blocks");
  for (const Sequence* seq : live) {
    if (!ids.insert(seq->id).second) fail("two live seqs share id " + str(seq->id));
    if (!seq->kv.allocated) fail("live seq " + str(seq->id) + " is not allocated");
    const auto& table = seq->kv.blocks;
    if (int64_t{seq->n_computed} > int64_t{block_size_} * static_cast<int64_t>(table.size()))
      fail("seq " + str(seq->id) + " computed " + str(seq->n_computed) + " tokens but holds " + str(table.size()) + " block(s)");
    const bool tracked = sharing_.contains(seq->id);
    if (seq->kv.n_registered < 0 || static_cast<size_t>(seq->kv.n_registered) > table.size())
      fail("seq " + str(seq->id) + " counts " + str(seq->kv.n_registered) + " registered blocks of " + str(table.size()));
    // after_computed skips on_computed below register_at: it must be where registration resumes.
    if (config_.prefix_caching && seq->kv.register_at != 0 &&
        seq->kv.register_at != (seq->kv.n_registered + 1) * block_size_)
      fail("seq " + str(seq->id) + " skips registration until position " + str(seq->kv.register_at) + " but counts " +
           str(seq->kv.n_registered) + " registered blocks");
    for (size_t i = 0; i < table.size(); ++i) {
      const int32_t b = table[i];
      if (b < 0 || b >= n_blocks()) fail("seq " + str(seq->id) + " holds block " + str(b) + " outside the pool");
      // on_computed resumes registering after the counted blocks: they, and only they, are.
      if (blocks_[b].hashed != (static_cast<int>(i) < seq->kv.n_registered))
        fail("seq " + str(seq->id) + "'s block " + str(b) + " at table index " + str(i) +
             (blocks_[b].hashed ? " is" : " is not") + " registered, but the sequence counts " +
             str(seq->kv.n_registered) + " registered blocks");
      ++refs[b];
      // A shared block sits at the same table index in every holder (prefix hashes chain from
      // block 0; fork copies the table); a repeat elsewhere means a double allocation.
      if (index[b] == -1) index[b] = static_cast<int>(i);
      else if (index[b] != static_cast<int>(i))
        fail("block " + str(b) + " appears at table index " + str(index[b]) + " and " + str(i));
      if (!tracked && blocks_[b].ref > 1)
        fail("seq " + str(seq->id) + " holds shared block " + str(b) + " but is not tracked as sharing");
    }
  }
  int64_t n_unreferenced = 0;
  for (int32_t b = 0; b < n_blocks(); ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref != refs[b])
      fail("block " + str(b) + " has ref " + str(blk.ref) + " but " + str(refs[b]) + " live table reference(s)");
    if (blk.ref == 0) ++n_unreferenced;
    if (blk.indexed != (blk.hashed && by_hash_.find(blk.hash) == b))
      fail("block " + str(b) + (blk.indexed ? " counts itself" : " does not count itself") +
           " as its hash's entry in the prefix cache, which names block " + str(by_hash_.find(blk.hash)));
    if (blk.in_free != (blk.ref == 0)) fail("block " + str(b) + " with ref " + str(blk.ref) + (blk.in_free ? " is" : " is not") + " on the free list");
  }
  std::vector<char> on_list(blocks_.size(), 0);
  if (const std::string e = runs_.check(on_list); !e.empty()) fail("free runs: " + e);
  int64_t n_in_runs = 0;
  for (int32_t b = 0; b < n_blocks(); ++b) {
    if (!on_list[b]) continue;
    ++n_in_runs;
    if (blocks_[b].ref != 0) fail("free runs hold block " + str(b) + " with ref " + str(blocks_[b].ref));
    if (blocks_[b].hashed) fail("free runs hold block " + str(b) + ", which caches a prefix");
  }
  int64_t n_listed = 0;
  int32_t prev = kNone;
  for (int32_t b = free_head_; b != kNone; prev = b, b = blocks_[b].next) {
    if (b < 0 || b >= n_blocks()) fail("free list links to block " + str(b) + " outside the pool");
    if (on_list[b]) fail("block " + str(b) + " is twice on the cached free list, or also in the free runs");
    on_list[b] = 1;
    if (blocks_[b].ref != 0) fail("free list holds block " + str(b) + " with ref " + str(blocks_[b].ref));
    if (!blocks_[b].hashed) fail("cached free list holds block " + str(b) + ", which caches nothing");
    if (blocks_[b].prev != prev) fail("free list back link of block " + str(b) + " is broken");
    ++n_listed;
  }
  if (prev != free_tail_) fail("free list tail is " + str(free_tail_) + ", walk ends at " + str(prev));
  if (n_listed + n_in_runs != n_free_ || n_free_ != n_unreferenced)
    fail("free list has " + str(n_listed) + " cached and " + str(n_in_runs) + " other blocks, count says " + str(n_free_) +
         ", unreferenced blocks " + str(n_unreferenced));
  by_hash_.for_each([&](uint64_t h, int32_t b) {
    if (b < 0 || b >= n_blocks() || !blocks_[b].hashed || blocks_[b].hash != h)
      fail("prefix cache entry points to block " + str(b) + " that does not carry its hash");
  });
}

}  // namespace servelab
