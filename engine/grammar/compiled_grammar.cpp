// Compiling: automaton, then every resting state's token classes (shared ones from the cache).
#include "engine/grammar/compiled_grammar.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <string>

#include "engine/grammar/json_terms.h"
#include "engine/grammar/string_tail_classes.h"

namespace servelab::grammar {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Additional-property keys (JsonTerms::key_except) make one rule per set F of first bytes the
// key may not start with, and the two states a stack rests in before the key's first character
// (before and after its opening quote) would each walk nearly the whole vocabulary. A token's fate
// there depends only on whether its first key byte (position `pos` in the token) may start the
// key; past it the rule is the same for every F. So those states' classes are those of the rule
// with F empty, filtered by that byte: walked once per tokenizer instead of once per F.
constexpr const char* kKeyFirstNotPrefix = "json:key_first_not:";

std::shared_ptr<const TokenClasses> filter_key_classes(const TokenClasses& all, const TokenTable& tt, size_t pos,
                                                       const Automaton& a, int32_t after_quote) {
  std::array<bool, 256> allowed{};  // may the key start with this byte
  for (int b = 0; b < 256; ++b) allowed[static_cast<size_t>(b)] = a.next(after_quote, static_cast<unsigned char>(b)) >= 0;
  auto keep = [&](int32_t id) {
    const std::string_view b = tt.bytes(id);
    return b.size() <= pos || allowed[static_cast<unsigned char>(b[pos])];
  };
  TokenClasses out;
  for (const auto& u : all.uncertain)
    if (keep(u.first)) out.uncertain.push_back(u);
  if (all.accepted_bits.empty()) {
    for (int32_t id : all.accepted)
      if (keep(id)) out.accepted.push_back(id);
    store_accepted(out, tt);
    return std::make_shared<const TokenClasses>(std::move(out));
  }
  // Many accepted: clear the bits of whole trie subtrees instead of testing each id. The tokens
  // whose byte `pos` is a given byte are the subtrees of the trie's nodes at depth pos + 1.
  out.accepted_bits = all.accepted_bits;
  const std::span<const int32_t> sorted = tt.sorted_tokens();
  for (size_t i = 0; i < tt.n_nodes();) {
    if (tt.node_depth(i) <= pos) {  // above that depth: go down
      ++i;
      continue;
    }
    if (!allowed[tt.node_byte(i)])
      for (uint32_t k = tt.node_tok(i); k < tt.node_tok(tt.node_end(i)); ++k)
        out.accepted_bits[static_cast<size_t>(sorted[k]) >> 5] &= ~(1u << (sorted[k] & 31));
    i = tt.node_end(i);
  }
  for (uint32_t w : out.accepted_bits) out.n_accepted += static_cast<size_t>(__builtin_popcount(w));
  if (out.n_accepted <= static_cast<size_t>(tt.n_words())) {  // few left: a list, as the walk stores them
    for (size_t w = 0; w < out.accepted_bits.size(); ++w)
      for (uint32_t bits = out.accepted_bits[w]; bits != 0; bits &= bits - 1)
        out.accepted.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
    out.accepted_bits.clear();
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
  std::map<std::string, std::unique_ptr<StringTailScan>> tail_scans;  // by pending bytes
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
    // A bounded string's tail (one rule per (characters left, characters needed)): one pass over
    // the tokens' bytes per sub-state serves that sub-state in every tail of the grammar
    // (string_tail_classes.h), instead of a walk of the trie per state.
    int tail_left = -1, tail_need = -1;
    if (!classes && !key.empty() &&
        std::sscanf(a.share_key(rule).c_str(), "json:string_tail{%d,%d}", &tail_left, &tail_need) == 2 && tail_left >= 0) {
      const std::string pending = bytes_from_rule_start(a, s);
      std::unique_ptr<StringTailScan>& scan = tail_scans[pending];
      if (!scan) scan = std::make_unique<StringTailScan>(*g->tokens_, pending);
      classes = std::make_shared<const TokenClasses>(scan->classes(tail_left, tail_need));
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
