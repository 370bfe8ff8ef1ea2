#pragma once
// The adaptive token-mask cache: for one automaton state, the vocabulary split by what each token
// does from that state whatever lies below it on the stack:
//   accepted  - some path consumes all its bytes without leaving the state's rule frame (or
//               leaves it exactly at the token's end): allowed in every context;
//   uncertain - every path that survives leaves the frame with bytes still to consume: allowed
//               or not depending on the stack below, so the matcher checks it at run time;
//   rejected  - all the others (not stored).
// Computed by one walk over the vocabulary trie per state, skipping dead subtrees (a bounded
// string's tail states take a shortcut: string_tail_classes.h).
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/grammar/automaton.h"
#include "engine/grammar/token_table.h"

namespace servelab::grammar {

struct TokenClasses {
  std::vector<uint32_t> accepted_bits;  ///< [n_words] when many are accepted, else empty
  std::vector<int32_t> accepted;        ///< the accepted ids when few (accepted_bits empty)
  /// (token, the byte that must follow the rule's completion): the token is uncertain only if
  /// that byte can follow the rule at all (Automaton::follow), which depends on the grammar.
  std::vector<std::pair<int32_t, unsigned char>> uncertain;
  size_t n_accepted = 0;
  size_t n_nodes_walked = 0;  ///< trie nodes the walk stepped through (its cost)
};

/// The classes of every token from `state` (a state with byte edges).
TokenClasses compute_token_classes(const Automaton& a, const TokenTable& tokens, int32_t state);

/// Sets n_accepted and, when the accepted ids outnumber the mask's words, moves them from the
/// list to bits (the form every class is stored in).
void store_accepted(TokenClasses& out, const TokenTable& tokens);

}  // namespace servelab::grammar
