// Randomized admit / grow / fork / release / preempt traffic against each KV manager. After every
// operation the manager's invariants and breakdown are checked, and a fake arena verifies that
// every computed position's slot holds that sequence's K/V (prefix hits and copy-on-write
// included). At the end everything must be free again.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace {

struct Case {
  std::string name;
  KvConfig config;
  int64_t n_slots;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

/// Independent recount of the breakdown: per physical slot owner, from the tables alone.
KvBreakdown brute_breakdown(const KvManager& kv, const KvConfig& config, std::span<const Sequence* const> live,
                            const Sequence* next) {
  KvBreakdown b;
  b.capacity = kv.capacity_slots();
  if (config.kind == KvKind::paged) {
    const int bs = config.block_size;
    const size_t n_blocks = static_cast<size_t>(b.capacity / bs);
    std::vector<int64_t> max_stored(n_blocks, -1), max_filled(n_blocks, -1);  // -1: not held
    for (const Sequence* s : live) {
      const int64_t computed = std::max(s->n_computed, s->kv.n_cached_prefix);
      const int64_t fin = std::max<int64_t>(s->n_kv_final(), computed);
      for (size_t i = 0; i < s->kv.blocks.size(); ++i) {
        const int64_t lo = static_cast<int64_t>(i) * bs;
        const auto blk = static_cast<size_t>(s->kv.blocks[i]);
        max_stored.at(blk) = std::max(max_stored[blk], std::clamp<int64_t>(computed - lo, 0, bs));
        max_filled[blk] = std::max(max_filled[blk], std::clamp<int64_t>(fin - lo, 0, bs));
      }
    }
    for (size_t blk = 0; blk < n_blocks; ++blk) {
      if (max_stored[blk] < 0) continue;
      b.stored += max_stored[blk];
      b.reserved += max_filled[blk] - max_stored[blk];
      b.internal_frag += bs - max_filled[blk];
    }
    b.free = kv.free_slots();
    return b;
  }
  std::vector<char> used(static_cast<size_t>(b.capacity), 0);
  for (const Sequence* s : live) {
    const int64_t r = s->kv.region_slots;
    const int64_t computed = std::min<int64_t>(s->n_computed, r);
    const int64_t fill = std::min<int64_t>(std::max<int64_t>(s->n_kv_final(), computed), r);
    b.stored += computed;
    b.reserved += fill - computed;
    b.internal_frag += r - fill;
    std::fill_n(used.begin() + s->kv.region_begin, r, 1);
  }
  // External fragmentation: what each free run leaves after holding as many of the next
  // reservation as fit (max_model_len without a next one), the reservation capped at the arena.
  int64_t unit = config.max_model_len;
  if (next && config.reserve != NaiveReserve::max) {
    const int64_t fill = std::max(1, next->n_prompt + next->sampling.max_tokens - 1);
    unit = config.reserve == NaiveReserve::oracle ? fill : std::min<int64_t>(std::bit_ceil(static_cast<uint64_t>(fill)), unit);
  }
  unit = std::min(unit, b.capacity);
  int64_t run = 0, n_free = 0;
  used.push_back(1);  // closes the last run
  for (char u : used) {
    if (u) {
      b.external_frag += run % unit;
      run = 0;
    } else {
      ++run;
      ++n_free;
    }
  }
  b.free = n_free - b.external_frag;
  return b;
}

class Traffic {
 public:
  Traffic(const Case& c, uint64_t seed)
      : config_(c.config), kv_(make_kv_manager(c.config, c.n_slots)), arena_(c.n_slots), rng_(seed) {
    for (auto& family : families_) family = kvtest::iota_tokens(48, static_cast<TokenId>(rng_() % 1000));
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      const int pick = uniform(0, 99);
      if (pick < 15) admit();
      else if (pick < 35) schedule();
      else if (pick < 85) step();
      else if (pick < 91) fork();
      else if (pick < 95) abort_one();
      else preempt(random_running());
      check(op % 64 == 0);
    }
    while (!running_.empty()) abort_one();
    EXPECT_EQ(kv_->free_slots(), kv_->capacity_slots());
    const KvBreakdown b = kv_->breakdown({});
    EXPECT_EQ(b.free + b.external_frag, b.capacity);
    EXPECT_EQ(b.used(), 0);
    kv_->check_invariants({});
    EXPECT_GT(n_steps_, 100);
    EXPECT_GT(n_admitted_, 20);
  }

  int n_preempted() const { return n_preempted_; }
  int n_forks() const { return n_forks_; }
  int64_t n_cached_tokens() const { return n_cached_tokens_; }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void admit() {
    // Prompts open with one of a few shared "system prompts" so the prefix cache gets hits.
    const auto& family = families_[static_cast<size_t>(uniform(0, 3))];
    std::vector<TokenId> prompt(family.begin(), family.begin() + uniform(0, 48));
    const int n_extra = uniform(prompt.empty() ? 1 : 0, 20);
    for (int i = 0; i < n_extra; ++i) prompt.push_back(uniform(0, 30));
    waiting_.push_back(std::make_unique<Sequence>(kvtest::make_seq(next_id_++, prompt, uniform(1, 40))));
  }

  void schedule() {
    if (waiting_.empty()) return;
    Sequence& s = *waiting_.front();
    const int n = uniform(1, s.n_tokens());  // a prefill chunk (recompute after preemption included)
    if (!kv_->can_allocate(s, n)) return;
    kv_->allocate(s, n);
    ASSERT_LT(s.kv.n_cached_prefix, std::max(1, s.n_prompt));
    s.n_computed = s.kv.n_cached_prefix;
    n_cached_tokens_ += s.kv.n_cached_prefix;
    ASSERT_EQ(arena_.first_mismatch(*kv_, s, s.n_computed), -1) << "prefix cache served wrong K/V";
    running_.push_back(std::move(waiting_.front()));
    waiting_.erase(waiting_.begin());
    ++n_admitted_;
  }

  void step() {
    if (running_.empty()) return;
    const size_t i = static_cast<size_t>(uniform(0, static_cast<int>(running_.size()) - 1));
    Sequence& s = *running_[i];
    int target;
    if (s.n_computed < s.n_tokens()) {
      target = std::min(s.n_tokens(), s.n_computed + uniform(1, 24));
    } else {
      s.tokens.push_back(uniform(0, 30));  // sample one token (small vocab: duplicate content)
      if (s.n_output() >= s.sampling.max_tokens) {  // finished: its last token's K/V is never computed
        kv_->release(s);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
      target = s.n_tokens();  // decode: compute the sampled token's K/V
    }
    if (!kv_->can_grow(s, target)) {
      preempt(i);
      return;
    }
    kv_->grow(s, target);
    arena_.apply(kv_->take_pending_copies());
    arena_.write(*kv_, s, s.n_computed, target);
    s.n_computed = target;
    // As the engine does: on_computed only from the manager's register_at on. A direct call
    // right after must find nothing left to register (the skip missed no block).
    kv_->after_computed(s);
    const int n_registered = s.kv.n_registered;
    kv_->on_computed(s);
    ASSERT_EQ(s.kv.n_registered, n_registered) << "seq " << s.id << ": after_computed skipped a block";
    ++n_steps_;
    ASSERT_EQ(arena_.first_mismatch(*kv_, s, s.n_computed), -1) << "seq " << s.id;
  }

  void fork() {
    if (running_.empty()) return;
    const Sequence& parent = *running_[static_cast<size_t>(uniform(0, static_cast<int>(running_.size()) - 1))];
    if (parent.n_computed != parent.n_tokens() || parent.n_output() >= parent.sampling.max_tokens) return;
    auto child = std::make_unique<Sequence>(kvtest::make_seq(next_id_++, parent.tokens, parent.sampling.max_tokens));
    child->n_prompt = parent.n_prompt;
    child->n_computed = parent.n_computed;
    if (config_.kind == KvKind::naive && !kv_->can_allocate(*child, child->n_computed)) return;
    kv_->fork(parent, *child);
    arena_.apply(kv_->take_pending_copies());
    ASSERT_EQ(arena_.first_mismatch(*kv_, *child, child->n_computed), -1);
    running_.push_back(std::move(child));
    ++n_forks_;
  }

  void abort_one() {
    if (running_.empty()) return;
    const size_t i = static_cast<size_t>(uniform(0, static_cast<int>(running_.size()) - 1));
    kv_->release(*running_[i]);
    kv_->release(*running_[i]);  // idempotent
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  size_t random_running() {
    return running_.empty() ? 0 : static_cast<size_t>(uniform(0, static_cast<int>(running_.size()) - 1));
  }

  /// Recompute preemption: drop the KV, keep the tokens, queue again.
  void preempt(size_t i) {
    if (i >= running_.size()) return;
    Sequence& s = *running_[i];
    kv_->release(s);
    EXPECT_FALSE(s.kv.allocated);
    s.n_computed = 0;
    ++s.preemptions;
    ++n_preempted_;
    waiting_.push_back(std::move(running_[i]));
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void check(bool verify_all) {
    std::vector<const Sequence*> live;
    for (const auto& s : running_) live.push_back(s.get());
    ASSERT_NO_THROW(kv_->check_invariants(live));
    const Sequence* next = waiting_.empty() ? nullptr : waiting_.front().get();
    const KvBreakdown b = kv_->breakdown(live, next);
    ASSERT_EQ(b.stored + b.reserved + b.internal_frag + b.external_frag + b.free, b.capacity);
    const KvBreakdown want = brute_breakdown(*kv_, config_, live, next);
    ASSERT_EQ(b.stored, want.stored);
    ASSERT_EQ(b.reserved, want.reserved);
    ASSERT_EQ(b.internal_frag, want.internal_frag);
    ASSERT_EQ(b.external_frag, want.external_frag);
    ASSERT_EQ(b.free, want.free);
    if (!verify_all) return;
    for (const Sequence* s : live) ASSERT_EQ(arena_.first_mismatch(*kv_, *s, s->n_computed), -1) << "seq " << s->id;
  }

  KvConfig config_;
  std::unique_ptr<KvManager> kv_;
  kvtest::FakeArena arena_;
  std::mt19937_64 rng_;
  std::vector<TokenId> families_[4];
  std::vector<std::unique_ptr<Sequence>> running_, waiting_;
  uint64_t next_id_ = 1;
  int n_steps_ = 0, n_admitted_ = 0, n_preempted_ = 0, n_forks_ = 0;
  int64_t n_cached_tokens_ = 0;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (NaiveReserve r : {NaiveReserve::max, NaiveReserve::pow2, NaiveReserve::oracle}) {
    KvConfig c;
    c.kind = KvKind::naive;
    c.reserve = r;
    c.max_model_len = 128;  // prompts + outputs stay below 110
    out.push_back({std::string("naive_") + to_string(r), c, 1000});
  }
  for (int bs : {1, 16})
    for (bool prefix : {true, false}) {
      KvConfig c;
      c.kind = KvKind::paged;
      c.block_size = bs;
      c.prefix_caching = prefix;
      out.push_back({"paged_bs" + std::to_string(bs) + (prefix ? "_prefix" : "_noprefix"), c, 1000});
    }
  return out;
}

class KvRandomized : public ::testing::TestWithParam<Case> {};

TEST_P(KvRandomized, InvariantsHoldAndEverythingIsFreedAtTheEnd) {
  const Case& c = GetParam();
  for (uint64_t seed : {1u, 2u}) {
    Traffic t(c, seed);
    t.run(3000);
    if (HasFatalFailure()) return;
    EXPECT_GT(t.n_preempted(), 0) << "arena too large to exercise preemption";
    EXPECT_GT(t.n_forks(), 0);
    if (c.config.kind == KvKind::paged && c.config.prefix_caching) {
      EXPECT_GT(t.n_cached_tokens(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllManagers, KvRandomized, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace servelab
