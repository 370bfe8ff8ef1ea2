// Compiling: automaton, then every resting state's token classes (shared ones from the cache).
#include "engine/grammar/compiled_grammar.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "engine/grammar/json_terms.h"

namespace servelab::grammar {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Additional-property keys (JsonTerms::key_except) make one rule per set F of first bytes the
// key may not start with, and the two states a stack rests in before the key's first character
// (before and after its opening quote) each walk nearly the whole vocabulary: about 2 of the 6 ms
// of an average cold compile over the corpus. A token's fate there depends only on whether its
// first key byte (position `pos` in the token) may start the key; past it the rule is the same for
// every F. So those states' classes are those of the rule with F empty, filtered by that byte:
// computed once per tokenizer instead of once per F.
constexpr const char* kKeyFirstNotPrefix = "json:key_first_not:";

std::shared_ptr<const TokenClasses> filter_key_classes(const TokenClasses& all, const TokenTable& tt, size_t pos,
                                                       const Automaton& a, int32_t after_quote) {
  auto keep = [&](int32_t id) {
    const std::string_view b = tt.bytes(id);
    return b.size() <= pos || a.next(after_quote, static_cast<unsigned char>(b[pos])) >= 0;
  };
  TokenClasses out;
  if (!all.accepted_bits.empty()) {
    for (size_t w = 0; w < all.accepted_bits.size(); ++w)
      for (uint32_t bits = all.accepted_bits[w]; bits != 0; bits &= bits - 1) {
        const int32_t id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        if (keep(id)) out.accepted.push_back(id);
      }
  } else {
    for (int32_t id : all.accepted)
      if (keep(id)) out.accepted.push_back(id);
  }
  for (const auto& u : all.uncertain)
    if (keep(u.first)) out.uncertain.push_back(u);
  out.n_accepted = out.accepted.size();
  if (out.accepted.size() > static_cast<size_t>(tt.n_words())) {
    out.accepted_bits.assign(static_cast<size_t>(tt.n_words()), 0);
    for (int32_t id : out.accepted) out.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    out.accepted.clear();
    out.accepted.shrink_to_fit();
  }
  return std::make_shared<const TokenClasses>(std::move(out));
}

// The classes of the key rule with F empty at its start (pos 1) or after its quote (pos 0), from a
// one-rule grammar compiled against the same table (its states are then in the shared cache).
std::shared_ptr<const TokenClasses> generic_key_classes(const std::shared_ptr<TokenTable>& tt, bool after_quote) {
  const std::string key = std::string(kKeyFirstNotPrefix) + (after_quote ? "#quote" : "#0");
  if (auto c = tt->find_shared(key)) return c;
  Grammar g;
  JsonTerms terms(g);
  const int root = g.declare_rule("root");
  g.define_rule(root, terms.key_except({}, "/"));
  g.set_root(root);
  const auto compiled = CompiledGrammar::compile(g, tt);
  const Automaton& a = compiled->automaton();
  int32_t s = a.root_start();
  // root calls the key rule: find its start.
  for (const Call& c : a.calls(s)) s = c.callee_start;
  if (after_quote) s = a.next(s, '"');
  auto classes = compiled->mask(s).classes;
  tt->put_shared(key, classes);
  return classes;
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
    if (!classes && !key.empty() && a.share_key(rule).rfind(kKeyFirstNotPrefix, 0) == 0 &&
        a.share_key(rule) != kKeyFirstNotPrefix) {
      const int32_t start = a.rule_start(rule), quote = a.next(start, '"');
      if (s == start || s == quote) {
        classes = filter_key_classes(*generic_key_classes(g->tokens_, s == quote), *g->tokens_, s == quote ? 0 : 1, a, quote);
        g->tokens_->put_shared(key, classes);
        ++g->stats_.n_walked;
      }
    }
    // A bounded string's tail (one rule per (characters left, characters needed)): its start walks
    // nearly the whole vocabulary, but one pass over the tokens' bytes gives the same classes.
    int tail_left = -1, tail_need = -1;
    if (!classes && s == a.rule_start(rule) &&
        std::sscanf(a.share_key(rule).c_str(), "json:string_tail{%d,%d}", &tail_left, &tail_need) == 2 && tail_left >= 0) {
      classes = std::make_shared<const TokenClasses>(string_tail_start_classes(*g->tokens_, tail_left, tail_need));
      g->tokens_->put_shared(key, classes);
      ++g->stats_.n_walked;
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
