#pragma once
// A Grammar compiled to one DFA per rule over bytes and calls: a pushdown automaton over bytes.
// States are numbered across all rules; a stack frame is a single state id (the state implies
// its rule). A call edge pushes the callee's start state and continues, when the callee
// completes, at its continuation state. Every state left can still reach a final state of its
// rule (unproductive rules and dead states are removed), so any live stack can complete.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

/// A call edge of a DFA state.
struct Call {
  int32_t callee_start;  ///< the callee rule's start state
  int32_t next;          ///< where the caller continues once the callee completes
};

class Automaton {
 public:
  int32_t n_states() const { return static_cast<int32_t>(final_.size()); }
  /// The state after byte b, -1 when b is not allowed.
  int32_t next(int32_t s, unsigned char b) const {
    const Row& r = rows_[static_cast<size_t>(s)];
    return trans_[r.trans + classes_[r.classes + b]];
  }
  bool is_final(int32_t s) const { return final_[static_cast<size_t>(s)] != 0; }
  bool has_bytes(int32_t s) const { return has_bytes_[static_cast<size_t>(s)] != 0; }
  std::span<const Call> calls(int32_t s) const {
    return {calls_.data() + call_begin_[static_cast<size_t>(s)],
            calls_.data() + call_begin_[static_cast<size_t>(s) + 1]};
  }
  /// Final with nothing else to do: a call whose continuation is such a state is a tail call
  /// (the callee replaces the caller's frame, so right recursion keeps the stack flat).
  bool returns_only(int32_t s) const { return is_final(s) && !has_bytes(s) && calls(s).empty(); }
  /// A state with byte edges only, not final: the common case the token walks take fast.
  bool plain(int32_t s) const { return has_bytes(s) && !is_final(s) && calls(s).empty(); }

  int n_rules() const { return static_cast<int>(rule_start_.size()); }
  int32_t rule_of(int32_t s) const { return state_rule_[static_cast<size_t>(s)]; }
  int32_t rule_start(int rule) const { return rule_start_[static_cast<size_t>(rule)]; }
  int32_t rule_first_state(int rule) const { return rule_first_[static_cast<size_t>(rule)]; }
  int32_t rule_n_states(int rule) const { return rule_first_[static_cast<size_t>(rule) + 1] - rule_first_[static_cast<size_t>(rule)]; }
  const std::string& rule_name(int rule) const { return names_[static_cast<size_t>(rule)]; }
  const std::string& share_key(int rule) const { return share_keys_[static_cast<size_t>(rule)]; }
  int32_t root_start() const { return rule_start(root_); }
  /// Bytes that can come right after the rule completes, in any context (a superset is fine: it
  /// only prunes what the token walks must check against the real stack).
  const ByteSet& follow(int rule) const { return follow_[static_cast<size_t>(rule)]; }

 private:
  friend Automaton build_automaton(const Grammar& grammar);
  // Edges over byte classes: state s's row starts at trans_[rows_[s].trans] and byte b is in
  // class classes_[rows_[s].classes + b] of its rule. Far smaller than 256 edges a state (the
  // table a compile allocates and page-faults in); targets in 16 bits (max_dfa_states fits).
  struct Row {
    uint32_t trans;    ///< offset in trans_
    uint32_t classes;  ///< offset of a 256-byte class map in classes_
  };
  std::vector<Row> rows_;               // [n_states]
  std::vector<unsigned char> classes_;  // [n_maps * 256]
  std::vector<int16_t> trans_;
  std::vector<unsigned char> final_, has_bytes_;
  std::vector<uint32_t> call_begin_;  // [n_states + 1]
  std::vector<Call> calls_;
  std::vector<int32_t> state_rule_;
  std::vector<int32_t> rule_start_, rule_first_;  // rule_first_: [n_rules + 1]
  std::vector<std::string> names_, share_keys_;
  std::vector<ByteSet> follow_;
  int root_ = 0;
};

/// Compiles every rule to a DFA and checks the grammar: all rules defined, the root rule
/// matches something, no left recursion (a rule reaching itself before consuming a byte).
/// Throws GrammarError naming the rule, or when the automaton outgrows GrammarLimits.
Automaton build_automaton(const Grammar& grammar);

}  // namespace servelab::grammar
