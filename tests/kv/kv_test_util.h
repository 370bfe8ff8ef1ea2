#pragma once
// Helpers shared by the KV manager tests: sequences, live lists and a simulated arena that
// stores, per slot, a fingerprint of the prefix whose K/V it holds.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "engine/request.h"

namespace servelab::kvtest {

inline Sequence make_seq(uint64_t id, std::vector<TokenId> prompt, int max_tokens) {
  Sequence s;
  s.id = id;
  s.request_id = id;
  s.n_prompt = static_cast<int>(prompt.size());
  s.tokens = std::move(prompt);
  s.sampling.max_tokens = max_tokens;
  return s;
}

inline std::vector<TokenId> iota_tokens(int n, TokenId first = 1) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

/// A paged KV configuration (blocks of block_size slots; prefix caching on unless said).
inline KvConfig paged_config(int block_size = 16, bool prefix_caching = true) {
  KvConfig c;
  c.kind = KvKind::paged;
  c.block_size = block_size;
  c.prefix_caching = prefix_caching;
  return c;
}

inline std::vector<const Sequence*> live_of(std::initializer_list<const Sequence*> seqs) { return seqs; }

/// The K/V at position p depends on every token up to p: model it by a chained fingerprint.
inline uint64_t chain(uint64_t h, TokenId t) { return (h ^ static_cast<uint64_t>(t + 7)) * 0x100000001b3ull; }
inline constexpr uint64_t kFingerprintSeed = 0x12345;

/// Stand-in for the backend's arena: one fingerprint per slot; 0 = never written.
struct FakeArena {
  std::vector<uint64_t> slot_value;
  explicit FakeArena(int64_t n_slots) : slot_value(static_cast<size_t>(n_slots), 0) {}

  void apply(std::span<const KvCopy> copies) {
    for (const KvCopy& c : copies)
      for (int64_t k = 0; k < c.n_slots; ++k) slot_value.at(c.dst_slot + k) = slot_value.at(c.src_slot + k);
  }
  /// Writes the K/V of positions [begin, end) of seq.
  void write(const KvManager& kv, const Sequence& seq, int begin, int end) {
    uint64_t h = kFingerprintSeed;
    for (int p = 0; p < end; ++p) {
      h = chain(h, seq.tokens[static_cast<size_t>(p)]);
      if (p >= begin) slot_value.at(kv.slot(seq, p)) = h;
    }
  }
  /// First position below end whose slot does not hold seq's K/V, or -1.
  int first_mismatch(const KvManager& kv, const Sequence& seq, int end) const {
    uint64_t h = kFingerprintSeed;
    for (int p = 0; p < end; ++p) {
      h = chain(h, seq.tokens[static_cast<size_t>(p)]);
      if (slot_value.at(kv.slot(seq, p)) != h) return p;
    }
    return -1;
  }
};

}  // namespace servelab::kvtest
