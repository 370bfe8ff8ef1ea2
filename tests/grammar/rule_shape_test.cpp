// build_automaton builds one DFA per rule shape (rule_shape.h) and renames the calls of the
// other rules of that shape: each rule still calls its own callees, a rule that calls one callee
// twice is not taken for one that calls two, and the size limits refuse the same grammars as if
// every rule were built.
#include <gtest/gtest.h>

#include <string>

#include "engine/grammar/automaton.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/rule_shape.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace rule_shape_test {  // named: a unity batch shares one translation unit

using testing::full_match;

TEST(GrammarRuleShape, SameShapeOtherCallees) {
  Grammar g;
  const int x = g.declare_rule("x"), y = g.declare_rule("y"), p = g.declare_rule("p"), q = g.declare_rule("q");
  g.define_rule(x, g.literal("xx"));
  g.define_rule(y, g.literal("yy"));
  g.define_rule(p, g.seq({g.byte('('), g.call(x), g.byte(')')}));
  g.define_rule(q, g.seq({g.byte('('), g.call(y), g.byte(')')}));
  const int root = g.declare_rule("root");
  g.define_rule(root, g.seq({g.call(p), g.byte('-'), g.call(q)}));
  g.set_root(root);
  EXPECT_EQ(rule_shape(g, g.rules()[p].expr).code, rule_shape(g, g.rules()[q].expr).code);
  EXPECT_TRUE(full_match(g, "(xx)-(yy)"));
  EXPECT_FALSE(full_match(g, "(xx)-(xx)"));
  EXPECT_FALSE(full_match(g, "(yy)-(yy)"));
}

TEST(GrammarRuleShape, OneCalleeTwiceIsNotTwoCallees) {
  Grammar g;
  const int a = g.declare_rule("a"), b = g.declare_rule("b"), twice = g.declare_rule("twice"), both = g.declare_rule("both");
  g.define_rule(a, g.byte('a'));
  g.define_rule(b, g.byte('b'));
  g.define_rule(twice, g.seq({g.call(a), g.call(a)}));
  g.define_rule(both, g.seq({g.call(a), g.call(b)}));
  const int root = g.declare_rule("root");
  g.define_rule(root, g.seq({g.call(twice), g.byte('|'), g.call(both)}));
  g.set_root(root);
  EXPECT_NE(rule_shape(g, g.rules()[twice].expr).code, rule_shape(g, g.rules()[both].expr).code);
  EXPECT_TRUE(full_match(g, "aa|ab"));
  EXPECT_FALSE(full_match(g, "aa|aa"));
  EXPECT_FALSE(full_match(g, "ab|ab"));
}

// n rules of one shape, each a 20-byte literal then a call of the next: 21 DFA states a rule.
Grammar chain_of_same_shape(int n) {
  Grammar g;
  const int end = g.declare_rule("end");  // first: the rules built last are all reused ones
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = g.declare_rule("r" + std::to_string(i));
  g.define_rule(end, g.byte('.'));
  for (int i = 0; i < n; ++i)
    g.define_rule(r[static_cast<size_t>(i)], g.seq({g.literal(std::string(20, 'a')), g.call(i + 1 < n ? r[static_cast<size_t>(i) + 1] : end)}));
  g.set_root(r[0]);
  return g;
}

TEST(GrammarRuleShape, LimitsCountEveryRule) {
  const Automaton small = build_automaton(chain_of_same_shape(900));  // about 18,900 states: allowed
  EXPECT_GT(small.n_states(), 18'000);
  EXPECT_TRUE(full_match(chain_of_same_shape(3), std::string(60, 'a') + "."));
  EXPECT_FALSE(full_match(chain_of_same_shape(3), std::string(59, 'a') + "."));
  try {
    (void)build_automaton(chain_of_same_shape(1000));  // about 21,000: over GrammarLimits::max_dfa_states
    FAIL() << "accepted";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("grammar too large"), std::string::npos) << e.what();
  }
}

}  // namespace rule_shape_test
}  // namespace servelab::grammar
