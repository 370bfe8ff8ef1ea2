#pragma once
// A grammar compiled against one tokenizer: its automaton and, for every state a stack can rest
// in, the token classes (accepted / uncertain), the uncertain ones already filtered by what can
// follow the state's rule in this grammar. Immutable and shared by all requests using it.
#include <chrono>
#include <memory>
#include <vector>

#include "engine/grammar/automaton.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/token_classes.h"
#include "engine/grammar/token_table.h"

namespace servelab::grammar {

/// What a state's mask is made of at run time.
struct StateMask {
  std::shared_ptr<const TokenClasses> classes;  ///< accepted tokens (maybe shared across grammars)
  std::vector<int32_t> uncertain;               ///< distinct ids to check against the stack
};

/// Compile figures, for benchmarks and logs.
struct CompileStats {
  double automaton_ms = 0;  ///< front end's grammar -> automaton
  double classes_ms = 0;    ///< token classes (walks and shared-cache look-ups)
  int n_states = 0;
  int n_walked = 0;       ///< states whose classes were computed here
  int n_shared_hits = 0;  ///< states whose classes came from the tokenizer's shared cache
  size_t n_uncertain = 0;  ///< uncertain tokens over all states
};

class CompiledGrammar {
 public:
  /// Throws GrammarError (from build_automaton).
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar, std::shared_ptr<TokenTable> tokens);

  const Automaton& automaton() const { return automaton_; }
  const TokenTable& tokens() const { return *tokens_; }
  /// Valid for states with byte edges (the states a matcher's stacks rest in).
  const StateMask& mask(int32_t state) const { return masks_[static_cast<size_t>(state)]; }
  const CompileStats& stats() const { return stats_; }

 private:
  Automaton automaton_;
  std::shared_ptr<TokenTable> tokens_;
  std::vector<StateMask> masks_;
  CompileStats stats_;
};

}  // namespace servelab::grammar
