// The report's regex and GBNF checkers on what a server or a user's file may send them: deep
// nesting, huge repetition counts, backreferences and long outputs through recursive rules give a
// verdict or a reason, never a crash (tests/fuzz/constraint_check_fuzz.cc fuzzes the same).
#include <gtest/gtest.h>

#include <string>

#include "analysis/constraint_check.h"

namespace servelab::analysis {
namespace {

TEST(ConstraintCheck, GrammarNestedTooDeepIsAReasonNotACrash) {
  const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  const std::string why = check_gbnf_output("a", deep);
  EXPECT_NE(why.find("nested deeper than 256"), std::string::npos) << why;
  const std::string ok = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')');
  EXPECT_EQ(check_gbnf_output("a", ok), "");
}

TEST(ConstraintCheck, GrammarRepetitionCountsAreBounded) {
  EXPECT_NE(check_gbnf_output("a", "root ::= \"a\"{99999999999999999999}").find("repetition count over 100000"),
            std::string::npos);
  // An item that matches only the empty string under a large count: a fixed point, not a loop.
  EXPECT_EQ(check_gbnf_output("", "root ::= (\"\"){100000}"), "");
  EXPECT_EQ(check_gbnf_output("ab", "root ::= (\"\" | \"a\" | \"b\"){2,100000}"), "");
}

TEST(ConstraintCheck, DeeplyNestedOutputThroughARecursiveRule) {
  // Three nested calls per level: 6,000 levels (18,000 calls) overflow an 8 MiB stack under ASan
  // without call_on_big_stack; 10,000 pass the recognizer's bound (20,000) and get a reason.
  const std::string gbnf = "root ::= \"(\" root \")\" | \"a\"";
  auto nested = [](int n) { return std::string(size_t(n), '(') + "a" + std::string(size_t(n), ')'); };
  EXPECT_EQ(check_gbnf_output(nested(6000), gbnf), "");
  EXPECT_NE(check_gbnf_output(nested(6000) + ")", gbnf), "");
  EXPECT_NE(check_gbnf_output(nested(10000), gbnf).find("too deeply nested"), std::string::npos);
}

TEST(ConstraintCheck, NestedRepetitionStaysPolynomial) {
  const std::string text(200, 'a');
  EXPECT_EQ(check_gbnf_output(text, "root ::= (((\"a\")*)*)*"), "");
  EXPECT_NE(check_gbnf_output(text + "b", "root ::= (((\"a\")*)*)*"), "");
}

TEST(ConstraintCheck, RegexBackreferencesAndHugeCountsAreRefused) {
  EXPECT_NE(check_regex_output("aa", "(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(check_regex_output("a", "a{66666666666666666666}").find("over 1000"), std::string::npos);
  EXPECT_NE(check_regex_output("a", "a{1,5000}").find("over 1000"), std::string::npos);
  EXPECT_EQ(check_regex_output("aaa", "a{1,1000}"), "");
  EXPECT_EQ(check_regex_output("a\\b", "a\\\\b"), "");  // an escaped backslash is no backreference
}

TEST(ConstraintCheck, RegexOnALongOutput) {
  // libstdc++ backtracks recursively, frames per character: on the default 8 MB stack this crashes
  // (from 20,000 characters in a -O2 build, 2026-11-29). 30,000, not 100,000: under ASan each
  // frame is a fake stack frame, and 100,000 took 13 CPU-s.
  const std::string text(30000, 'a');
  EXPECT_EQ(check_regex_output(text, "(a|b)*"), "");
  EXPECT_NE(check_regex_output(text + "c", "(a|b)*"), "");
}

}  // namespace
}  // namespace servelab::analysis
