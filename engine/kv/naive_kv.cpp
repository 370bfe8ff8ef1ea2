#include "engine/kv/naive_kv.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

#include "engine/kv/held_split.h"
#include "engine/kv/kv_checks.h"

namespace servelab {
namespace {

constexpr kv_checks::Checks kNaive{"naive"};  // messages name the manager

}  // namespace

NaiveKvManager::NaiveKvManager(const KvConfig& config, int64_t n_slots)
    : config_(config), n_slots_(n_slots), n_free_(n_slots) {
  config_.validate();
  if (n_slots < 1)
    throw std::invalid_argument("naive KV arena must hold at least 1 slot (got " + std::to_string(n_slots) + ")");
  extents_.emplace(0, n_slots);
}

int64_t NaiveKvManager::reservation_slots(const Sequence& seq) const {
  const int64_t final_len = seq.n_kv_final();  // the last sampled token never takes a slot
  const int64_t cap = config_.max_model_len;
  switch (config_.reserve) {
    case NaiveReserve::max: return cap;
    case NaiveReserve::pow2: return std::min<int64_t>(std::bit_ceil(static_cast<uint64_t>(final_len)), cap);
    case NaiveReserve::oracle: return final_len;
  }
  return cap;
}

int64_t NaiveKvManager::largest_free_extent() const {
  int64_t best = 0;
  for (const auto& [begin, len] : extents_) best = std::max(best, len);
  return best;
}

std::map<int64_t, int64_t>::const_iterator NaiveKvManager::first_fit(int64_t n) const {
  return std::find_if(extents_.begin(), extents_.end(), [n](const auto& e) { return e.second >= n; });
}

int64_t NaiveKvManager::take(int64_t n) {
  auto it = first_fit(n);
  if (it == extents_.end())
    throw std::logic_error("naive KV: no free extent of " + std::to_string(n) + " slots (largest " +
                           std::to_string(largest_free_extent()) + "); call can_allocate first");
  const int64_t begin = it->first, len = it->second;
  extents_.erase(it);
  if (len > n) extents_.emplace(begin + n, len - n);
  regions_.emplace(begin, n);
  n_free_ -= n;
  return begin;
}

void NaiveKvManager::give_back(int64_t begin, int64_t n) {
  regions_.erase(begin);
  n_free_ += n;
  auto next = extents_.lower_bound(begin);
  if (next != extents_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {  // merge into the extent just before
      begin = prev->first;
      n += prev->second;
      extents_.erase(prev);
    }
  }
  if (next != extents_.end() && begin + n == next->first) {  // absorb the extent just after
    n += next->second;
    extents_.erase(next);
  }
  extents_.emplace(begin, n);
}

int64_t NaiveKvManager::slots_needed(const Sequence& seq, int n_tokens) const {
  kNaive.require_tokens(seq, n_tokens);
  if (!seq.kv.allocated) return reservation_slots(seq);
  return std::max<int64_t>(0, n_tokens - seq.kv.region_slots);
}

bool NaiveKvManager::can_allocate(const Sequence& seq, int n_tokens) const {
  kNaive.require_tokens(seq, n_tokens);
  kNaive.require_allocated(seq, false);
  const int64_t n = reservation_slots(seq);
  return n_tokens <= n && first_fit(n) != extents_.end();
}

void NaiveKvManager::allocate(Sequence& seq, int n_tokens) {
  kNaive.require_tokens(seq, n_tokens);
  kNaive.require_allocated(seq, false);
  const int64_t n = reservation_slots(seq);
  if (n_tokens > n)
    throw std::logic_error(kNaive.label(seq) + ": " + std::to_string(n_tokens) + " tokens exceed its reservation of " +
                           std::to_string(n) + " slots");
  seq.kv = KvHandle{};
  seq.kv.region_begin = take(n);
  seq.kv.region_slots = n;
  seq.kv.allocated = true;
}

bool NaiveKvManager::can_grow(const Sequence& seq, int n_tokens) const {
  kNaive.require_tokens(seq, n_tokens);
  kNaive.require_allocated(seq, true);
  return n_tokens <= seq.kv.region_slots;
}

void NaiveKvManager::grow(Sequence& seq, int n_tokens) {
  if (!can_grow(seq, n_tokens))
    throw std::logic_error(kNaive.label(seq) + ": cannot grow to " + std::to_string(n_tokens) +
                           " tokens beyond its region of " + std::to_string(seq.kv.region_slots) + " slots");
}

void NaiveKvManager::release(Sequence& seq) {
  if (!seq.kv.allocated) return;
  auto it = regions_.find(seq.kv.region_begin);
  if (it == regions_.end() || it->second != seq.kv.region_slots)
    throw std::logic_error(kNaive.label(seq) + ": region [" + std::to_string(seq.kv.region_begin) + ", +" +
                           std::to_string(seq.kv.region_slots) + ") is not held by this manager");
  give_back(seq.kv.region_begin, seq.kv.region_slots);
  seq.kv = KvHandle{};
}

void NaiveKvManager::fork(const Sequence& parent, Sequence& child) {
  kNaive.require_allocated(parent, true);
  kNaive.require_allocated(child, false);
  const int n_copy = static_cast<int>(std::min<int64_t>(parent.n_computed, reservation_slots(child)));
  allocate(child, n_copy);
  if (n_copy > 0) pending_copies_.push_back({parent.kv.region_begin, child.kv.region_begin, n_copy});
}

int64_t NaiveKvManager::slot(const Sequence& seq, int pos) const {
  if (pos < 0 || pos >= seq.kv.region_slots)
    throw std::out_of_range(kNaive.label(seq) + ": position " + std::to_string(pos) + " outside its region of " +
                            std::to_string(seq.kv.region_slots) + " slots");
  return seq.kv.region_begin + pos;
}

std::vector<KvCopy> NaiveKvManager::take_pending_copies() { return std::exchange(pending_copies_, {}); }

int64_t NaiveKvManager::unusable_free(const Sequence* next) const {
  // The size the next reservation takes: a free extent holds floor(extent / unit) of them and
  // the rest of it is lost to fragmentation. A unit larger than the arena is never admitted.
  const int64_t unit = std::min<int64_t>(next ? reservation_slots(*next) : config_.max_model_len, n_slots_);
  if (unit <= 0) return 0;
  int64_t lost = 0;
  for (const auto& [begin, len] : extents_) lost += len % unit;
  return lost;
}

KvBreakdown NaiveKvManager::breakdown(std::span<const Sequence* const> live, const Sequence* next) const {
  KvBreakdown b;
  b.capacity = n_slots_;
  for (const Sequence* seq : live) {
    if (!seq->kv.allocated) continue;
    const HeldSplit s = split_held(*seq, 0, seq->kv.region_slots);
    b.stored += s.stored;
    b.reserved += s.reserved;
    b.internal_frag += s.internal_frag;
  }
  b.external_frag = unusable_free(next);
  b.free = n_free_ - b.external_frag;
  return b;
}

void NaiveKvManager::check_invariants(std::span<const Sequence* const> live) const {
  const auto fail = [](const std::string& what) { throw std::logic_error("naive KV invariant: " + what); };
  std::unordered_set<int64_t> seen;
  for (const Sequence* seq : live) {
    if (!seq->kv.allocated) fail("live seq " + std::to_string(seq->id) + " is not allocated");
    auto it = regions_.find(seq->kv.region_begin);
    if (it == regions_.end() || it->second != seq->kv.region_slots)
      fail("seq " + std::to_string(seq->id) + " region at " + std::to_string(seq->kv.region_begin) +
           " is not a region this manager handed out");
    if (!seen.insert(seq->kv.region_begin).second)
      fail("two live seqs hold the region at slot " + std::to_string(seq->kv.region_begin));
    if (seq->n_computed > seq->kv.region_slots)
      fail("seq " + std::to_string(seq->id) + " computed " + std::to_string(seq->n_computed) +
           " tokens beyond its region of " + std::to_string(seq->kv.region_slots));
  }
  if (seen.size() != regions_.size())
    fail(std::to_string(regions_.size() - seen.size()) + " region(s) held by no live seq (leaked)");
  // Free extents and regions, merged by address, must tile [0, n_slots) exactly.
  int64_t cursor = 0, n_free = 0;
  auto e = extents_.begin();
  auto r = regions_.begin();
  bool last_was_free = false;
  while (e != extents_.end() || r != regions_.end()) {
    const bool take_free = r == regions_.end() || (e != extents_.end() && e->first < r->first);
    const auto [begin, len] = take_free ? *e++ : *r++;
    if (len <= 0) fail("empty " + std::string(take_free ? "free extent" : "region") + " at " + std::to_string(begin));
    if (begin != cursor)
      fail((begin < cursor ? "overlap" : "gap") + std::string(" at slot ") + std::to_string(std::min(begin, cursor)));
    if (take_free && last_was_free) fail("adjacent free extents at " + std::to_string(begin) + " were not merged");
    last_was_free = take_free;
    if (take_free) n_free += len;
    cursor = begin + len;
  }
  if (cursor != n_slots_) fail("extents and regions end at " + std::to_string(cursor) + ", arena has " + std::to_string(n_slots_));
  if (n_free != n_free_) fail("free count " + std::to_string(n_free_) + " != free extents' total " + std::to_string(n_free));
}

}  // namespace servelab
