#pragma once
// The pushdown automaton's stacks and the one step that moves them over a byte. A stack is an
// interned base (a NodeArena node, or one of the two sentinels) plus a few frames on top; the
// matcher keeps its stacks as interned nodes so that equal stacks are equal ids, and the token
// walks (token_classes.cpp) run on a kBaseLocal base, where popping the base means "the rest of
// the token depends on what lies below".
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/grammar/automaton.h"

namespace servelab::grammar {

inline constexpr int32_t kBaseEnd = -1;    ///< below the root rule: popping it completes the grammar
inline constexpr int32_t kBaseLocal = -2;  ///< below a token walk's first frame

/// Interned stack nodes: node = (state, parent node or a sentinel). One per matcher.
class NodeArena {
 public:
  int32_t intern(int32_t state, int32_t parent);
  int32_t state(int32_t node) const { return nodes_[static_cast<size_t>(node)].first; }
  int32_t parent(int32_t node) const { return nodes_[static_cast<size_t>(node)].second; }
  size_t size() const { return nodes_.size(); }

 private:
  std::vector<std::pair<int32_t, int32_t>> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
};

/// A set of distinct stacks whose top state takes a byte next, plus whether some path completed.
struct StackSet {
  struct Stack {
    int32_t base;
    uint32_t begin, len;  ///< frames in pool[begin, begin + len), bottom first; len >= 1
  };
  std::vector<Stack> stacks;
  std::vector<int32_t> pool;
  bool ended = false;         ///< a path popped kBaseEnd (the grammar is complete here)
  bool popped_local = false;  ///< a path popped kBaseLocal

  void clear() {
    stacks.clear();
    pool.clear();
    ended = popped_local = false;
  }
  bool empty() const { return stacks.empty(); }
  std::span<const int32_t> frames(const Stack& s) const { return {pool.data() + s.begin, s.len}; }
  int32_t top(const Stack& s) const { return pool[s.begin + s.len - 1]; }
  void add(int32_t base, std::span<const int32_t> frames);
};

/// Moves stacks: one instance per thread of work (it holds scratch space).
class Stepper {
 public:
  Stepper(const Automaton& a, const NodeArena* arena) : a_(a), arena_(arena) {}
  /// out = the closure of one stack (calls entered, completed rules returned from).
  void close_one(int32_t base, std::span<const int32_t> frames, StackSet& out);
  /// out = every stack of `in` after byte b, closed. Returns !out.empty() || out.ended.
  bool step(const StackSet& in, unsigned char b, StackSet& out);

 private:
  void begin(StackSet& out);
  void close(int32_t base, std::span<const int32_t> frames, StackSet& out);
  bool seen(int32_t base, std::span<const int32_t> frames);

  const Automaton& a_;
  const NodeArena* arena_;
  std::vector<int32_t> work_pool_, tmp_, cur_;
  std::vector<std::pair<int32_t, uint32_t>> work_;  // (base, length) of frames at the pool's end
  // The stacks met in this step: (hash, base, index in seen_pool_). Scanned linearly while few
  // (the usual case, and clearing costs nothing); indexed by hash once there are many.
  struct Seen {
    uint64_t hash;
    int32_t base;
    uint32_t at;
  };
  std::vector<Seen> seen_;
  std::unordered_multimap<uint64_t, uint32_t> seen_index_;  // hash -> index in seen_
  std::vector<int32_t> seen_pool_;
};

}  // namespace servelab::grammar
