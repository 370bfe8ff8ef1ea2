#pragma once
// The per-request side: where a generation stands in its grammar, which tokens may come next (a
// bitmask over the vocabulary), and how to undo tokens (speculative drafts checked against the
// grammar and rolled back). One per request; not thread-safe; cheap to create.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/stacks.h"

namespace servelab::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  /// Feeds one token: true and the state moves on when the grammar allows it, false and nothing
  /// changes when it does not. eos is allowed exactly when is_accepting(); after it nothing is.
  bool accept_token(int32_t id);
  /// Feeds raw bytes as one step (tests, jump-forward text); same contract as accept_token.
  bool accept_bytes(std::string_view bytes);
  /// words[n_words()]: bit i (words[i / 32] >> (i % 32) & 1) set = token i is allowed next.
  /// Exact: set iff accept_token(i) would return true.
  void fill_next_token_bitmask(uint32_t* words);
  /// The output so far is a complete match (eos is allowed).
  bool is_accepting() const { return !history_.back().terminated && history_.back().can_end; }
  /// eos was accepted.
  bool is_terminated() const { return history_.back().terminated; }
  /// Undoes the last n accepted steps (tokens or accept_bytes calls); n <= n_steps().
  void rollback(int n);
  int n_steps() const { return static_cast<int>(history_.size()) - 1; }
  /// The bytes the grammar forces next (each step has exactly one possible byte and the grammar
  /// cannot end yet), up to max_bytes; "" when the next byte is not determined. The state is
  /// not changed.
  std::string find_jump_forward_string(size_t max_bytes = 1024);
  int n_words() const { return grammar_->tokens().n_words(); }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct State {
    std::vector<int32_t> nodes;  ///< sorted distinct stacks (their top states take a byte)
    bool can_end = false;
    bool terminated = false;
  };
  void load(const State& st, StackSet& out) const;
  bool run(const State& from, std::string_view bytes, State* to);
  State intern(const StackSet& set);
  const std::vector<int32_t>& allowed_uncertain(int32_t node);

  std::shared_ptr<const CompiledGrammar> grammar_;
  NodeArena arena_;
  Stepper stepper_;
  StackSet x_, y_;
  std::vector<State> history_;  ///< [0] the start; back() the current state
  std::unordered_map<int32_t, std::vector<int32_t>> node_allowed_;  ///< per stack: its uncertain tokens that pass
  std::vector<int32_t> tops_;
};

}  // namespace servelab::grammar
