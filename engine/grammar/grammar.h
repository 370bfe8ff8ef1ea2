#pragma once
// The grammar every front end (JSON Schema, regex, choice, GBNF) compiles to: named rules over
// bytes, each an expression of byte sets, sequences, alternatives, bounded or unbounded
// repetition and calls of other rules (recursion goes through calls). build_automaton() turns it
// into one DFA per rule; the matcher runs those as a pushdown automaton over bytes.
#include <bitset>
#include <string>
#include <string_view>
#include <vector>

namespace servelab::grammar {

/// A set of byte values.
using ByteSet = std::bitset<256>;

enum class ExprKind : unsigned char { bytes, seq, alt, repeat, call };

/// One node of a rule's expression; children index Grammar's expression arena.
struct Expr {
  ExprKind kind = ExprKind::seq;
  ByteSet bytes;              ///< kind bytes: one byte out of this set
  std::vector<int> children;  ///< seq, alt; repeat: exactly one
  int min = 0;                ///< repeat: at least min times
  int max = -1;               ///< repeat: at most max times, -1 = unbounded
  int rule = -1;              ///< call: the rule called
};

/// A named rule. share_key, when set, names the rule's language and construction completely
/// (callees included), so its precomputed token classes can be shared by every grammar of the
/// same tokenizer ("json:string", "json:string{0,64}"); front ends set it only for rules they
/// build the same way every time.
struct Rule {
  std::string name;
  int expr = -1;  ///< -1 until define_rule
  std::string share_key;
};

/// Rules and their expressions. Build with the factory functions; rule 'root' (set_root) is
/// the start.
class Grammar {
 public:
  /// A new rule without a body yet (so rules can call each other before being defined).
  int declare_rule(std::string name);
  void define_rule(int rule, int expr);
  void set_share_key(int rule, std::string key) { rules_.at(rule).share_key = std::move(key); }
  void set_root(int rule) { root_ = rule; }
  int root() const { return root_; }

  int bytes(const ByteSet& set);
  int byte(unsigned char b);
  int literal(std::string_view text);  ///< the bytes of text in order; "" = empty
  int seq(std::vector<int> parts);
  int alt(std::vector<int> options);  ///< {} matches nothing
  int repeat(int expr, int min, int max);
  int opt(int expr) { return repeat(expr, 0, 1); }
  int star(int expr) { return repeat(expr, 0, -1); }
  int plus(int expr) { return repeat(expr, 1, -1); }
  int call(int rule);
  int empty() { return seq({}); }

  const Expr& expr(int id) const { return exprs_[static_cast<size_t>(id)]; }
  size_t n_exprs() const { return exprs_.size(); }
  const std::vector<Rule>& rules() const { return rules_; }

 private:
  int add(Expr e);
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  int root_ = -1;
};

/// Limits that keep a hostile schema or grammar from using unbounded memory or time.
struct GrammarLimits {
  static constexpr size_t max_exprs = 2'000'000;
  static constexpr int max_repeat = 2'000;  ///< {m,n}, minItems/maxItems, maxLength
  static constexpr int max_nesting = 200;   ///< parentheses, schema depth
  static constexpr size_t max_nfa_states = 2'000'000;
  static constexpr size_t max_dfa_states = 20'000;
};

/// A grammar matching exactly one of the strings (vLLM's guided_choice). Throws GrammarError
/// when the list is empty.
Grammar grammar_from_choices(const std::vector<std::string>& choices);

}  // namespace servelab::grammar
