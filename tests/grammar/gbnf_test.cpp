// The GBNF front end and choice: llama.cpp grammars, and the errors for bad ones.
#include <gtest/gtest.h>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/grammar_error.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace {

using testing::full_match;

// llama.cpp's grammars/json.gbnf, in substance.
constexpr const char* kJsonGbnf = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: made greedy (a bounded run of blanks).
ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(GrammarGbnf, LlamaCppJsonGrammar) {
  const Grammar g = grammar_from_gbnf(kJsonGbnf);
  EXPECT_TRUE(full_match(g, R"({"a": [1, 2.5e3, true, null, {"b": "x\"y\u00e9"}]})"));
  EXPECT_TRUE(full_match(g, "{}"));
  EXPECT_TRUE(full_match(g, "{\"k\":\n  \"中文\"}"));
  EXPECT_FALSE(full_match(g, "[1]"));  // root is an object
  EXPECT_FALSE(full_match(g, "{\"a\":01x}"));
  EXPECT_FALSE(full_match(g, "{\"a\" 1}"));
}

TEST(GrammarGbnf, RulesGroupsRepetitionAndEscapes) {
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= \"a\" b{2,3}\nb ::= [xy]"), "axyx"));
  EXPECT_FALSE(full_match(grammar_from_gbnf("root ::= \"a\" b{2,3}\nb ::= [xy]"), "ax"));
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= (\"ab\" | \"c\")+ \"\\n\""), "abcab\n"));
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= \"\\x41\\u00e9\\U0001F600\""), "Aé😀"));
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= [^a]"), "é"));
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= . ."), "中x"));
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= x\nx ::= \"1\" x | \"\""), "111"));  // right recursion
  EXPECT_TRUE(full_match(grammar_from_gbnf("root ::= \"(\" root \")\" | \"\""), "((()))"));
  EXPECT_FALSE(full_match(grammar_from_gbnf("root ::= \"(\" root \")\" | \"\""), "(()"));
  EXPECT_TRUE(full_match(grammar_from_gbnf("root::=a\na::=\"z\"  # comment\n"), "z"));
}

std::string gbnf_error(std::string_view text) {
  try {
    grammar_from_gbnf(text);
    testing::full_match(grammar_from_gbnf(text), "");  // automaton checks (left recursion, empty language)
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(GrammarGbnf, ErrorsNameTheRuleAndPlace) {
  EXPECT_EQ(gbnf_error("root ::= a\n"), "gbnf: rule \"a\" is used but not defined at line 1 column 10");
  EXPECT_EQ(gbnf_error("rot ::= \"a\""), "gbnf: no \"root\" rule");
  EXPECT_EQ(gbnf_error("root ::= \"a\"\nroot ::= \"b\""), "gbnf: rule \"root\" is defined twice at line 2 column 1");
  EXPECT_EQ(gbnf_error("root ::= root \"a\" | \"b\""), "left recursion: rule \"root\" can reach itself without consuming input");
  EXPECT_EQ(gbnf_error("root ::= x? root \"a\" | \"b\"\nx ::= \"q\""), "left recursion: rule \"root\" can reach itself without consuming input");
  EXPECT_EQ(gbnf_error("root ::= \"a\" root"), "grammar matches no string (rule \"root\")");
  EXPECT_NE(gbnf_error("root ::= \"a").find("unterminated string"), std::string::npos);
  EXPECT_NE(gbnf_error("root ::= [a").find("unterminated character class"), std::string::npos);
  EXPECT_NE(gbnf_error("root ::= (\"a\"").find("missing ')'"), std::string::npos);
  EXPECT_NE(gbnf_error("root = \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(gbnf_error("root ::= \"\\q\"").find("unknown escape \\q"), std::string::npos);
  EXPECT_NE(gbnf_error("root ::= \"a\"{5,2}").find("max < min"), std::string::npos);
  EXPECT_NE(gbnf_error("root ::= @").find("unexpected character '@' at line 1 column 10"), std::string::npos);
}

TEST(GrammarChoice, ExactlyOneOfTheStrings) {
  const Grammar g = grammar_from_choices({"yes", "no", "not sure"});
  EXPECT_TRUE(full_match(g, "no"));
  EXPECT_TRUE(full_match(g, "not sure"));
  EXPECT_FALSE(full_match(g, "not"));
  EXPECT_FALSE(full_match(g, "yesno"));
  EXPECT_THROW(grammar_from_choices({}), GrammarError);
}

}  // namespace
}  // namespace servelab::grammar
