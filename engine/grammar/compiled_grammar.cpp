// Compiling: automaton, then every resting state's token classes (shared ones from the cache).
#include "engine/grammar/compiled_grammar.h"

#include <algorithm>
#include <string>

namespace servelab::grammar {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar, std::shared_ptr<TokenTable> tokens) {
  auto g = std::make_shared<CompiledGrammar>();
  auto t0 = std::chrono::steady_clock::now();
  g->automaton_ = build_automaton(grammar);
  g->tokens_ = std::move(tokens);
  g->stats_.automaton_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  const Automaton& a = g->automaton_;
  const int32_t n = a.n_states();
  g->masks_.resize(static_cast<size_t>(n));
  g->stats_.n_states = n;
  for (int32_t s = 0; s < n; ++s) {
    if (!a.has_bytes(s)) continue;
    const int rule = a.rule_of(s);
    std::shared_ptr<const TokenClasses> classes;
    std::string key;
    if (!a.share_key(rule).empty()) {
      key = a.share_key(rule) + "#" + std::to_string(s - a.rule_first_state(rule));
      classes = g->tokens_->find_shared(key);
      if (classes) ++g->stats_.n_shared_hits;
    }
    if (!classes) {
      classes = std::make_shared<const TokenClasses>(compute_token_classes(a, *g->tokens_, s));
      ++g->stats_.n_walked;
      if (!key.empty()) g->tokens_->put_shared(key, classes);
    }
    StateMask& m = g->masks_[static_cast<size_t>(s)];
    const ByteSet& follow = a.follow(rule);
    for (auto [id, b] : classes->uncertain)
      if (follow.test(b)) m.uncertain.push_back(id);
    std::sort(m.uncertain.begin(), m.uncertain.end());
    m.uncertain.erase(std::unique(m.uncertain.begin(), m.uncertain.end()), m.uncertain.end());
    g->stats_.n_uncertain += m.uncertain.size();
    m.classes = std::move(classes);
  }
  g->stats_.classes_ms = ms_since(t0);
  return g;
}

}  // namespace servelab::grammar
