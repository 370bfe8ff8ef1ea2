#pragma once
// Test helpers for the backend tests: small model shapes, a test-local KvManager that hands each
// sequence scrambled arena slots (so a backend that ignores kv.slot() fails), relative error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/kv/kv_manager.h"
#include "engine/model/config.h"
#include "engine/request.h"

namespace servelab::testing {

/// hidden 64, 2 layers, 4 heads of 16, ffn 128, vocab 97; n_kv_heads 4 = MHA, 2 or 1 = GQA.
inline ModelConfig small_config(int n_kv_heads, bool attention_bias = false) {
  ModelConfig c;
  c.name = "test-small";
  c.hidden_size = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = n_kv_heads;
  c.intermediate_size = 128;
  c.vocab_size = 97;
  c.max_position = 512;
  c.attention_bias = attention_bias;
  c.dtype = DType::f32;
  return c;
}

/// n standard-normal floats from seed (test operands).
inline std::vector<float> normal_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// ‖a − b‖ / ‖b‖.
inline double rel_error(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

/// A KvManager for backend tests only: each sequence id is given slots drawn from a shuffled
/// arena by assign(), so consecutive positions land on scattered slots.
class ScrambledKv final : public KvManager {
 public:
  ScrambledKv(int64_t n_slots, uint64_t seed) : free_(n_slots), n_slots_(n_slots) {
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
  /// Gives sequence `id` n_positions more slots.
  void assign(uint64_t id, int n_positions) {
    if (static_cast<int64_t>(free_.size()) < n_positions) throw std::runtime_error("ScrambledKv: arena full");
    auto& s = slots_[id];
    for (int i = 0; i < n_positions; ++i) {
      s.push_back(free_.back());
      free_.pop_back();
    }
  }
  /// Maps sequence `id` to exactly these slots.
  void set(uint64_t id, std::vector<int64_t> slots) { slots_[id] = std::move(slots); }
  const std::vector<int64_t>& slots_of(uint64_t id) const { return slots_.at(id); }

  KvKind kind() const override { return KvKind::paged; }
  int64_t capacity_slots() const override { return n_slots_; }
  int64_t free_slots() const override { return static_cast<int64_t>(free_.size()); }
  int64_t slots_needed(const Sequence&, int) const override { return 0; }
  bool can_allocate(const Sequence&, int) const override { return true; }
  void allocate(Sequence&, int) override {}
  bool can_grow(const Sequence&, int) const override { return true; }
  void grow(Sequence&, int) override {}
  void release(Sequence&) override {}
  void fork(const Sequence&, Sequence&) override {}
  int64_t slot(const Sequence& seq, int pos) const override {
    const auto& s = slots_.at(seq.id);
    if (pos < 0 || pos >= static_cast<int>(s.size())) throw std::out_of_range("ScrambledKv: position not held");
    return s[pos];
  }
  KvBreakdown breakdown(std::span<const Sequence* const>, const Sequence* = nullptr) const override {
    KvBreakdown b;
    b.capacity = n_slots_;
    b.free = static_cast<int64_t>(free_.size());
    b.stored = n_slots_ - b.free;
    return b;
  }
  void check_invariants(std::span<const Sequence* const>) const override {}

 private:
  std::vector<int64_t> free_;
  std::map<uint64_t, std::vector<int64_t>> slots_;
  int64_t n_slots_;
};

/// Forwards to a real manager and counts slot() calls (the per-step lookup cost a backend pays).
class CountingKv final : public KvManager {
 public:
  explicit CountingKv(std::unique_ptr<KvManager> inner) : inner_(std::move(inner)) {}
  KvManager& inner() { return *inner_; }
  mutable int64_t n_slot_calls = 0;

  KvKind kind() const override { return inner_->kind(); }
  int64_t capacity_slots() const override { return inner_->capacity_slots(); }
  int64_t free_slots() const override { return inner_->free_slots(); }
  int64_t unit_slots() const override { return inner_->unit_slots(); }
  int64_t slots_needed(const Sequence& s, int n) const override { return inner_->slots_needed(s, n); }
  bool can_allocate(const Sequence& s, int n) const override { return inner_->can_allocate(s, n); }
  void allocate(Sequence& s, int n) override { inner_->allocate(s, n); }
  bool can_grow(const Sequence& s, int n) const override { return inner_->can_grow(s, n); }
  void grow(Sequence& s, int n) override { inner_->grow(s, n); }
  void release(Sequence& s) override { inner_->release(s); }
  void fork(const Sequence& p, Sequence& c) override { inner_->fork(p, c); }
  int64_t slot(const Sequence& s, int pos) const override {
    ++n_slot_calls;
    return inner_->slot(s, pos);
  }
  void on_computed(Sequence& s) override { inner_->on_computed(s); }
  std::vector<KvCopy> take_pending_copies() override { return inner_->take_pending_copies(); }
  KvBreakdown breakdown(std::span<const Sequence* const> live, const Sequence* next) const override {
    return inner_->breakdown(live, next);
  }
  void check_invariants(std::span<const Sequence* const> live) const override { inner_->check_invariants(live); }

 private:
  std::unique_ptr<KvManager> inner_;
};

/// The K/V bytes of `slots`, in order, as the backend swaps them out to a fresh host pool of
/// slots.size() slots (slot i to host slot i): equal bytes mean equal K/V.
inline std::vector<std::byte> read_slots(Backend& backend, std::span<const int64_t> slots) {
  std::unique_ptr<HostKvPool> pool = backend.make_host_pool(static_cast<int64_t>(slots.size()));
  std::vector<KvSwap> runs;
  for (size_t i = 0; i < slots.size(); ++i) runs.push_back({slots[i], static_cast<int64_t>(i), 1});
  backend.swap_out(runs, *pool);
  return {pool->data(), pool->data() + pool->bytes()};
}

/// Random tokens in [0, vocab).
inline std::vector<TokenId> random_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> dist(0, vocab - 1);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

inline Sequence make_sequence(uint64_t id, std::vector<TokenId> prompt) {
  Sequence s;
  s.id = id;
  s.request_id = id;
  s.n_prompt = static_cast<int>(prompt.size());
  s.tokens = std::move(prompt);
  return s;
}

}  // namespace servelab::testing
