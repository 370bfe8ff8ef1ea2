// Grammar -> per-rule DFAs: Thompson NFA per rule, subset construction over byte classes and call
// symbols, then the whole-grammar checks (productive rules, left recursion) and FOLLOW sets.
#include "engine/grammar/automaton.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/rule_shape.h"

namespace servelab::grammar {
namespace {

struct NfaState {
  std::vector<int> eps;
  std::vector<std::pair<const ByteSet*, int>> bytes;
  std::vector<std::pair<int, int>> calls;  // (symbol, target)
};

// One rule's Thompson NFA. Call symbols are numbered by the callee's first appearance in the
// expression, so the same expression gives the same DFA numbering in any grammar (share keys
// rely on it).
class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, size_t* budget) : g_(g), budget_(budget) {}

  std::vector<NfaState> states;
  std::vector<int> callees;  // symbol -> rule

  int add() {
    if (*budget_ == 0) throw GrammarError("grammar too large (over " + std::to_string(GrammarLimits::max_nfa_states) + " automaton states)");
    --*budget_;
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }

  // Adds expr between two new states; returns (start, end).
  std::pair<int, int> build(int id) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::bytes: {
        const int s = add(), t = add();
        states[static_cast<size_t>(s)].bytes.push_back({&e.bytes, t});
        return {s, t};
      }
      case ExprKind::call: {
        const int s = add(), t = add();
        states[static_cast<size_t>(s)].calls.push_back({symbol(e.rule), t});
        return {s, t};
      }
      case ExprKind::seq: {
        const int s = add();
        int cur = s;
        for (int c : e.children) {
          auto [a, b] = build(c);
          states[static_cast<size_t>(cur)].eps.push_back(a);
          cur = b;
        }
        return {s, cur};
      }
      case ExprKind::alt: {
        const int s = add(), t = add();
        for (int c : e.children) {
          auto [a, b] = build(c);
          states[static_cast<size_t>(s)].eps.push_back(a);
          states[static_cast<size_t>(b)].eps.push_back(t);
        }
        return {s, t};
      }
      case ExprKind::repeat: {
        const int s = add(), t = add();
        int cur = s;
        for (int i = 0; i < e.min; ++i) {
          auto [a, b] = build(e.children[0]);
          states[static_cast<size_t>(cur)].eps.push_back(a);
          cur = b;
        }
        if (e.max < 0) {
          auto [a, b] = build(e.children[0]);
          states[static_cast<size_t>(cur)].eps.push_back(a);
          states[static_cast<size_t>(b)].eps.push_back(cur);
          states[static_cast<size_t>(cur)].eps.push_back(t);
        } else {
          for (int i = e.min; i < e.max; ++i) {  // x{0,k} as (x (x ...)?)?
            auto [a, b] = build(e.children[0]);
            states[static_cast<size_t>(cur)].eps.push_back(a);
            states[static_cast<size_t>(cur)].eps.push_back(t);
            cur = b;
          }
          states[static_cast<size_t>(cur)].eps.push_back(t);
        }
        return {s, t};
      }
    }
    return {add(), add()};
  }

 private:
  int symbol(int rule) {
    for (size_t i = 0; i < callees.size(); ++i)
      if (callees[i] == rule) return static_cast<int>(i);
    callees.push_back(rule);
    return static_cast<int>(callees.size()) - 1;
  }
  const Grammar& g_;
  size_t* budget_;
};

static_assert(GrammarLimits::max_dfa_states <= 32767, "Automaton::trans_ holds states in 16 bits");

struct VecHash {
  size_t operator()(const std::vector<int>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};


struct AutomatonPendingCall {
  int32_t state;
  int rule;
  int32_t next;
};

/// One rule's DFA while it is built: states numbered from 0, transitions per byte class.
struct RuleDfa {
  int n_cls = 0;
  std::vector<unsigned char> final_flags;  ///< per state
  std::vector<int32_t> trans;              ///< [state * n_cls + class] -> state, or -1
  std::vector<AutomatonPendingCall> calls; ///< state and next local to the rule
  int32_t n_states() const { return static_cast<int32_t>(final_flags.size()); }
};

// Moore's partition refinement: merges the states of a rule's DFA that no byte string and no call
// can tell apart, and renumbers the blocks in order of their first state, so the start stays
// state 0 and the same expression still gets the same numbering (share keys rely on it).
// Subset construction leaves many equal states behind (every state of an unanchored pattern's
// `.*` tail after a match is one), and each resting state costs a walk over the vocabulary.
void minimize_rule_dfa(RuleDfa& d) {
  const int32_t m = d.n_states();
  std::vector<std::vector<std::pair<int, int32_t>>> calls(static_cast<size_t>(m));  // (callee, next)
  for (const AutomatonPendingCall& c : d.calls) calls[static_cast<size_t>(c.state)].push_back({c.rule, c.next});
  std::vector<int32_t> block(d.final_flags.begin(), d.final_flags.end());
  int32_t n_blocks = -1;
  std::vector<int32_t> sig;
  std::vector<std::pair<int, int32_t>> cs;
  for (;;) {
    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
    std::vector<int32_t> nb(static_cast<size_t>(m));
    for (int32_t i = 0; i < m; ++i) {
      sig.assign(1, block[static_cast<size_t>(i)]);
      for (int c = 0; c < d.n_cls; ++c) {
        const int32_t t = d.trans[static_cast<size_t>(i) * static_cast<size_t>(d.n_cls) + static_cast<size_t>(c)];
        sig.push_back(t < 0 ? -1 : block[static_cast<size_t>(t)]);
      }
      cs.clear();
      for (auto [callee, nx] : calls[static_cast<size_t>(i)]) cs.push_back({callee, block[static_cast<size_t>(nx)]});
      std::sort(cs.begin(), cs.end());
      cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
      for (auto [callee, bx] : cs) {
        sig.push_back(-2 - callee);
        sig.push_back(bx);
      }
      nb[static_cast<size_t>(i)] = ids.try_emplace(sig, static_cast<int32_t>(ids.size())).first->second;
    }
    const bool stable = static_cast<int32_t>(ids.size()) == n_blocks;  // a refinement: same count, same partition
    n_blocks = static_cast<int32_t>(ids.size());
    block.swap(nb);
    if (stable) break;
  }
  if (n_blocks == m) return;
  // Block ids were given in state order, so block k's first state represents it.
  RuleDfa out;
  out.n_cls = d.n_cls;
  out.final_flags.resize(static_cast<size_t>(n_blocks));
  out.trans.assign(static_cast<size_t>(n_blocks) * static_cast<size_t>(d.n_cls), -1);
  std::vector<char> done(static_cast<size_t>(n_blocks), 0);
  for (int32_t i = 0; i < m; ++i) {
    const int32_t k = block[static_cast<size_t>(i)];
    if (done[static_cast<size_t>(k)]) continue;
    done[static_cast<size_t>(k)] = 1;
    out.final_flags[static_cast<size_t>(k)] = d.final_flags[static_cast<size_t>(i)];
    for (int c = 0; c < d.n_cls; ++c) {
      const int32_t t = d.trans[static_cast<size_t>(i) * static_cast<size_t>(d.n_cls) + static_cast<size_t>(c)];
      out.trans[static_cast<size_t>(k) * static_cast<size_t>(d.n_cls) + static_cast<size_t>(c)] = t < 0 ? -1 : block[static_cast<size_t>(t)];
    }
  }
  std::vector<char> kept(static_cast<size_t>(m), 0);
  std::fill(done.begin(), done.end(), 0);
  for (int32_t i = 0; i < m; ++i)
    if (!done[static_cast<size_t>(block[static_cast<size_t>(i)])]) done[static_cast<size_t>(block[static_cast<size_t>(i)])] = 1, kept[static_cast<size_t>(i)] = 1;
  for (const AutomatonPendingCall& c : d.calls) {
    if (!kept[static_cast<size_t>(c.state)]) continue;  // a merged state's copy
    const AutomatonPendingCall x{block[static_cast<size_t>(c.state)], c.rule, block[static_cast<size_t>(c.next)]};
    bool dup = false;
    for (const AutomatonPendingCall& y : out.calls) dup = dup || (y.state == x.state && y.rule == x.rule && y.next == x.next);
    if (!dup) out.calls.push_back(x);
  }
  d = std::move(out);
}

// One rule's DFA over its byte classes (cls), minimized: Thompson NFA, then subset construction.
// n_states_before: the states of the rules before it, for GrammarLimits::max_dfa_states.
struct BuiltRuleDfa {
  RuleDfa dfa;
  std::array<int, 256> cls{};
  std::vector<int> callees;  // the NFA's call symbols -> rules
  size_t n_nfa = 0;          // NFA states made (charged to GrammarLimits::max_nfa_states)
  int32_t n_unminimized = 0;
};

BuiltRuleDfa build_rule_dfa(const Grammar& g, const Rule& rule, size_t* nfa_budget, int32_t n_states_before) {
  const size_t budget_before = *nfa_budget;
  NfaBuilder nb(g, nfa_budget);
  const std::pair<int, int> ends = nb.build(rule.expr);
  const int start = ends.first, end = ends.second;  // not a structured binding: lambdas capture end
  std::vector<NfaState>& nfa = nb.states;

  // Byte classes: bytes no byte set of this rule tells apart.
  std::array<int, 256> cls{};
  int n_cls = 1;
  {
    std::vector<const ByteSet*> sets;
    for (const NfaState& s : nfa)
      for (auto& [set, t] : s.bytes) sets.push_back(set);
    std::sort(sets.begin(), sets.end());
    sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
    for (const ByteSet* set : sets) {
      std::unordered_map<int, int> split;  // (old class * 2 + in set) -> new class
      int n = 0;
      std::array<int, 256> next{};
      for (int b = 0; b < 256; ++b) {
        const int key = cls[static_cast<size_t>(b)] * 2 + (set->test(static_cast<size_t>(b)) ? 1 : 0);
        auto [it, fresh] = split.try_emplace(key, n);
        if (fresh) ++n;
        next[static_cast<size_t>(b)] = it->second;
      }
      cls = next;
      n_cls = n;
    }
  }
  std::vector<int> rep(static_cast<size_t>(n_cls), -1);
  for (int b = 255; b >= 0; --b) rep[static_cast<size_t>(cls[static_cast<size_t>(b)])] = b;

  std::vector<char> seen(nfa.size(), 0);
  auto closure = [&](std::vector<int> set) {
    std::vector<int> stack = set, out;
    for (int s : set) seen[static_cast<size_t>(s)] = 1;
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      out.push_back(s);
      for (int t : nfa[static_cast<size_t>(s)].eps)
        if (!seen[static_cast<size_t>(t)]) {
          seen[static_cast<size_t>(t)] = 1;
          stack.push_back(t);
        }
    }
    for (int s : out) seen[static_cast<size_t>(s)] = 0;
    std::sort(out.begin(), out.end());
    return out;
  };

  std::unordered_map<std::vector<int>, int32_t, VecHash> ids;
  std::vector<std::vector<int>> work;
  RuleDfa dfa;
  dfa.n_cls = n_cls;
  auto intern = [&](std::vector<int> set) -> int32_t {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (static_cast<size_t>(n_states_before) + dfa.final_flags.size() >= GrammarLimits::max_dfa_states)
      throw GrammarError("grammar too large (over " + std::to_string(GrammarLimits::max_dfa_states) +
                         " automaton states; rule \"" + rule.name + "\")");
    const int32_t id = dfa.n_states();
    dfa.final_flags.push_back(std::binary_search(set.begin(), set.end(), end) ? 1 : 0);
    dfa.trans.resize(dfa.trans.size() + static_cast<size_t>(n_cls), -1);
    ids.emplace(set, id);
    work.push_back(std::move(set));
    return id;
  };
  intern(closure({start}));  // state 0
  std::vector<std::vector<int>> per_call;
  std::vector<int> set, targets;
  for (size_t k = 0; k < work.size(); ++k) {
    const int32_t id = static_cast<int32_t>(k);
    set = work[k];  // a copy: work grows
    for (int c = 0; c < n_cls; ++c) {
      targets.clear();
      const size_t b = static_cast<size_t>(rep[static_cast<size_t>(c)]);
      for (int s : set)
        for (auto& [bs, t] : nfa[static_cast<size_t>(s)].bytes)
          if (bs->test(b)) targets.push_back(t);
      if (targets.empty()) continue;
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      const int32_t to = intern(closure(targets));
      dfa.trans[static_cast<size_t>(id) * static_cast<size_t>(n_cls) + static_cast<size_t>(c)] = to;
    }
    per_call.assign(nb.callees.size(), {});
    for (int s : set)
      for (auto& [sym, t] : nfa[static_cast<size_t>(s)].calls) per_call[static_cast<size_t>(sym)].push_back(t);
    for (size_t sym = 0; sym < per_call.size(); ++sym) {
      if (per_call[sym].empty()) continue;
      std::sort(per_call[sym].begin(), per_call[sym].end());
      per_call[sym].erase(std::unique(per_call[sym].begin(), per_call[sym].end()), per_call[sym].end());
      dfa.calls.push_back({id, nb.callees[sym], intern(closure(per_call[sym]))});
    }
  }
  BuiltRuleDfa out;
  out.n_unminimized = dfa.n_states();
  minimize_rule_dfa(dfa);
  out.dfa = std::move(dfa);
  out.cls = cls;
  out.callees = std::move(nb.callees);
  out.n_nfa = budget_before - *nfa_budget;
  return out;
}

}  // namespace

Automaton build_automaton(const Grammar& g) {
  const std::vector<Rule>& rules = g.rules();
  if (g.root() < 0 || g.root() >= static_cast<int>(rules.size())) throw GrammarError("grammar has no root rule");
  for (const Rule& r : rules)
    if (r.expr < 0) throw GrammarError("rule \"" + r.name + "\" is used but not defined");

  Automaton a;
  a.root_ = g.root();
  size_t nfa_budget = GrammarLimits::max_nfa_states;
  // Per rule: the DFA's call edges name callee rules; starts are resolved once all rules exist.
  std::vector<AutomatonPendingCall> pending;
  // Every rule's minimized DFA over its byte classes, kept until all are built so that the
  // edge table is allocated once at its final size (grown rule by rule, it was copied and
  // page-faulted in again and again).
  struct BuiltRule {
    RuleDfa dfa;
    std::array<int, 256> cls;
    int32_t first;
  };
  std::vector<BuiltRule> built(rules.size());
  int32_t n_states_before = 0;  // states of the rules built so far
  struct BuiltShape {
    RuleShape shape;
    size_t rule;  // the rule whose DFA was built
    size_t n_nfa;
    int32_t n_unminimized;
  };
  std::vector<BuiltShape> shapes;
  std::unordered_multimap<uint64_t, size_t> shape_index;  // hash -> index in shapes
  for (size_t r = 0; r < rules.size(); ++r) {
    const int32_t first = n_states_before;
    a.rule_first_.push_back(first);
    // A rule of a shape built before reuses that DFA, its calls renamed; else it is built.
    RuleShape shape = rule_shape(g, rules[r].expr);
    const BuiltShape* same = nullptr;
    for (auto [it, last] = shape_index.equal_range(shape.hash); it != last && !same; ++it)
      if (shapes[it->second].shape.code == shape.code) same = &shapes[it->second];
    RuleDfa dfa;
    std::array<int, 256> cls{};
    if (same) {
      // Charged as if built, so the limits refuse the same grammars either way.
      if (nfa_budget < same->n_nfa)
        throw GrammarError("grammar too large (over " + std::to_string(GrammarLimits::max_nfa_states) + " automaton states)");
      nfa_budget -= same->n_nfa;
      if (static_cast<size_t>(n_states_before) + static_cast<size_t>(same->n_unminimized) - 1 >= GrammarLimits::max_dfa_states)
        throw GrammarError("grammar too large (over " + std::to_string(GrammarLimits::max_dfa_states) +
                           " automaton states; rule \"" + rules[r].name + "\")");
      dfa = built[same->rule].dfa;
      cls = built[same->rule].cls;
      for (AutomatonPendingCall& c : dfa.calls) {
        const size_t k = static_cast<size_t>(std::find(same->shape.callees.begin(), same->shape.callees.end(), c.rule) - same->shape.callees.begin());
        c.rule = shape.callees[k];
      }
    } else {
      BuiltRuleDfa b = build_rule_dfa(g, rules[r], &nfa_budget, n_states_before);
      dfa = std::move(b.dfa);
      cls = b.cls;
      // Reused only when the shape numbers the callees as the NFA did (it always should).
      if (b.callees == shape.callees) {
        shape_index.emplace(shape.hash, shapes.size());
        shapes.push_back({std::move(shape), r, b.n_nfa, b.n_unminimized});
      }
    }
    a.rule_start_.push_back(first);
    for (const AutomatonPendingCall& c : dfa.calls) pending.push_back({first + c.state, c.rule, first + c.next});
    a.names_.push_back(rules[r].name);
    a.share_keys_.push_back(rules[r].share_key);
    n_states_before += dfa.n_states();
    built[r] = {std::move(dfa), cls, first};
  }
  const size_t n = static_cast<size_t>(n_states_before);
  a.rule_first_.push_back(static_cast<int32_t>(n));
  // Each state's edges over its rule's byte classes, and each state's distinct successors, over
  // which the fixpoints below run. A compile used to write 256 edges a state; on this VM the
  // page faults of that table were the larger part of a compile. Class maps are shared (the
  // rules of one shape have one), and states without byte edges share one empty row.
  a.final_.reserve(n);
  a.state_rule_.reserve(n);
  a.rows_.assign(n, Automaton::Row{0, 0});
  a.classes_.assign(256, 0);  // map 0: every byte in class 0 ...
  a.trans_.assign(1, -1);     // ... whose row 0 has no edge
  {
    size_t n_trans = 1;
    for (const BuiltRule& b : built) n_trans += static_cast<size_t>(b.dfa.n_states()) * static_cast<size_t>(b.dfa.n_cls);
    a.trans_.reserve(n_trans);
  }
  std::map<std::array<unsigned char, 256>, uint32_t> class_maps;  // map -> offset in classes_
  std::vector<uint32_t> succ_begin(n + 1, 0);
  std::vector<int32_t> succ;
  std::vector<ByteSet> first_bytes(n);  // FIRST through byte edges alone
  for (size_t r = 0; r < built.size(); ++r) {
    const RuleDfa& dfa = built[r].dfa;
    const std::array<int, 256>& cls = built[r].cls;
    const int32_t first = built[r].first;
    std::array<unsigned char, 256> map{};
    for (size_t x = 0; x < 256; ++x) map[x] = static_cast<unsigned char>(cls[x]);
    const auto [it, fresh] = class_maps.try_emplace(map, static_cast<uint32_t>(a.classes_.size()));
    if (fresh) a.classes_.insert(a.classes_.end(), map.begin(), map.end());
    std::vector<ByteSet> class_bytes(static_cast<size_t>(dfa.n_cls));
    for (size_t x = 0; x < 256; ++x) class_bytes[static_cast<size_t>(cls[x])].set(x);
    a.final_.insert(a.final_.end(), dfa.final_flags.begin(), dfa.final_flags.end());
    a.state_rule_.resize(a.state_rule_.size() + static_cast<size_t>(dfa.n_states()), static_cast<int32_t>(r));
    for (size_t k = 0; k < static_cast<size_t>(dfa.n_states()); ++k) {
      const size_t i = static_cast<size_t>(first) + k;
      const int32_t* row = dfa.trans.data() + k * static_cast<size_t>(dfa.n_cls);
      const size_t from = succ.size();
      for (int c = 0; c < dfa.n_cls; ++c) {
        if (row[c] < 0) continue;
        first_bytes[i] |= class_bytes[static_cast<size_t>(c)];
        if (std::find(succ.begin() + static_cast<std::ptrdiff_t>(from), succ.end(), first + row[c]) == succ.end()) succ.push_back(first + row[c]);
      }
      succ_begin[i + 1] = static_cast<uint32_t>(succ.size());
      if (succ.size() == from) continue;  // no byte edge: the shared empty row
      a.rows_[i] = {static_cast<uint32_t>(a.trans_.size()), it->second};
      for (int c = 0; c < dfa.n_cls; ++c) a.trans_.push_back(static_cast<int16_t>(row[c] < 0 ? -1 : first + row[c]));
    }
  }
  built.clear();
  a.has_bytes_.assign(n, 0);
  // Call edges per state, in the order they were made (the same for the same expression).
  std::vector<std::vector<Call>> calls(n);
  for (const AutomatonPendingCall& p : pending) calls[static_cast<size_t>(p.state)].push_back({a.rule_start_[static_cast<size_t>(p.rule)], p.next});

  // Productive states: can reach a final state of their rule through bytes and calls of
  // productive rules. Iterated to a fixpoint (rules depend on each other).
  std::vector<char> prod(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n; i-- > 0;) {
      if (prod[i]) continue;
      bool p = a.final_[i] != 0;
      for (uint32_t k = succ_begin[i]; k < succ_begin[i + 1] && !p; ++k) p = prod[static_cast<size_t>(succ[k])] != 0;
      for (const Call& c : calls[i])
        if (!p) p = prod[static_cast<size_t>(c.callee_start)] && prod[static_cast<size_t>(c.next)];
      if (p) prod[i] = changed = 1;
    }
  }
  if (!prod[static_cast<size_t>(a.root_start())])
    throw GrammarError("grammar matches no string (rule \"" + rules[static_cast<size_t>(a.root_)].name + "\")");
  a.call_begin_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    bool dead_edge = false;  // an edge into an unproductive state: cut it (rare: a full row pass)
    for (uint32_t k = succ_begin[i]; k < succ_begin[i + 1]; ++k) {
      if (prod[static_cast<size_t>(succ[k])]) a.has_bytes_[i] = 1;
      else dead_edge = true;
    }
    if (dead_edge) {  // the state's own row (only the empty row is shared)
      const Automaton::Row& row = a.rows_[i];
      for (size_t b = 0; b < 256; ++b) {
        const int16_t t = a.trans_[row.trans + a.classes_[row.classes + b]];
        if (t >= 0 && !prod[static_cast<size_t>(t)]) first_bytes[i].reset(b);
      }
      for (size_t b = 0; b < 256; ++b) {
        int16_t& t = a.trans_[row.trans + a.classes_[row.classes + b]];
        if (t >= 0 && !prod[static_cast<size_t>(t)]) t = -1;
      }
    }
    a.call_begin_[i] = static_cast<uint32_t>(a.calls_.size());
    if (!prod[i]) continue;
    for (const Call& c : calls[i])
      if (prod[static_cast<size_t>(c.callee_start)] && prod[static_cast<size_t>(c.next)]) a.calls_.push_back(c);
  }
  a.call_begin_[n] = static_cast<uint32_t>(a.calls_.size());

  // Nullable completion: from s the rule can complete through calls of nullable rules only.
  const int n_rules = a.n_rules();
  std::vector<char> nz(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n; i-- > 0;) {
      if (nz[i]) continue;
      bool z = a.final_[i] != 0;
      for (const Call& c : a.calls(static_cast<int32_t>(i)))
        if (!z) z = nz[static_cast<size_t>(c.callee_start)] && nz[static_cast<size_t>(c.next)];
      if (z) nz[i] = changed = 1;
    }
  }
  // Left recursion: the rules a rule can call before consuming a byte must not lead back to it.
  std::vector<std::vector<int>> left(static_cast<size_t>(n_rules));
  for (int r = 0; r < n_rules; ++r) {
    std::vector<int32_t> stack = {a.rule_start(r)};
    std::vector<int32_t> visited = stack;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (const Call& c : a.calls(s)) {
        left[static_cast<size_t>(r)].push_back(a.rule_of(c.callee_start));
        if (nz[static_cast<size_t>(c.callee_start)] && std::find(visited.begin(), visited.end(), c.next) == visited.end()) {
          visited.push_back(c.next);
          stack.push_back(c.next);
        }
      }
    }
  }
  {
    std::vector<char> color(static_cast<size_t>(n_rules), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int, size_t>> path;
    for (int r0 = 0; r0 < n_rules; ++r0) {
      if (color[static_cast<size_t>(r0)]) continue;
      path.push_back({r0, 0});
      color[static_cast<size_t>(r0)] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i == left[static_cast<size_t>(r)].size()) {
          color[static_cast<size_t>(r)] = 2;
          path.pop_back();
          continue;
        }
        const int x = left[static_cast<size_t>(r)][i++];
        if (color[static_cast<size_t>(x)] == 1)
          throw GrammarError("left recursion: rule \"" + a.names_[static_cast<size_t>(x)] +
                             "\" can reach itself without consuming input");
        if (color[static_cast<size_t>(x)] == 0) {
          color[static_cast<size_t>(x)] = 1;
          path.push_back({x, 0});
        }
      }
    }
  }

  // FIRST of each state, then FOLLOW of each rule.
  std::vector<ByteSet>& first = first_bytes;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n; i-- > 0;) {
      ByteSet f = first[i];
      for (const Call& c : a.calls(static_cast<int32_t>(i))) {
        f |= first[static_cast<size_t>(c.callee_start)];
        if (nz[static_cast<size_t>(c.callee_start)]) f |= first[static_cast<size_t>(c.next)];
      }
      if (f != first[i]) first[i] = f, changed = true;
    }
  }
  a.follow_.assign(static_cast<size_t>(n_rules), ByteSet());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      for (const Call& c : a.calls(static_cast<int32_t>(i))) {
        ByteSet& f = a.follow_[static_cast<size_t>(a.rule_of(c.callee_start))];
        ByteSet add = first[static_cast<size_t>(c.next)];
        if (nz[static_cast<size_t>(c.next)]) add |= a.follow_[static_cast<size_t>(a.state_rule_[i])];
        if ((f | add) != f) f |= add, changed = true;
      }
    }
  }
  return a;
}

}  // namespace servelab::grammar
