#pragma once
// A rule's shape: its expression tree written out, with each call named by the order in which
// the rule first calls its callee instead of by the callee. Rules of one shape compile to the
// same DFA up to which rules they call (a bounded string's tails are 64 such rules for
// maxLength 64), so build_automaton builds that DFA once per shape.
#include <cstdint>
#include <vector>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

struct RuleShape {
  std::vector<uint64_t> code;  ///< the tree in preorder; equal codes = equal shapes
  std::vector<int> callees;    ///< the rules called, by first call in the same order as the NFA's
  uint64_t hash = 0;           ///< of code
};

RuleShape rule_shape(const Grammar& g, int expr);

}  // namespace servelab::grammar
