// The regex front end: what a pattern matches (text and JSON-string modes) and what it refuses.
#include <gtest/gtest.h>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/regex.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace {

using testing::full_match;

bool re(std::string_view pattern, std::string_view text) { return full_match(grammar_from_regex(pattern), text); }

TEST(GrammarRegex, LiteralsClassesAndQuantifiers) {
  EXPECT_TRUE(re("abc", "abc"));
  EXPECT_FALSE(re("abc", "ab"));
  EXPECT_TRUE(re("a|bc", "bc"));
  EXPECT_TRUE(re("(ab)+", "ababab"));
  EXPECT_FALSE(re("(ab)+", ""));
  EXPECT_TRUE(re("x(?:ab)*y", "xy"));
  EXPECT_TRUE(re("(?<name>[0-9]{2,3})", "123"));
  EXPECT_FALSE(re("[0-9]{2,3}", "1234"));
  EXPECT_TRUE(re("[0-9]{2,}", "123456"));
  EXPECT_TRUE(re("a{3}", "aaa"));
  EXPECT_TRUE(re("a{,3}", "a{,3}"));  // not a quantifier: literal braces
  EXPECT_TRUE(re("\\d+\\.\\d*", "12."));
  EXPECT_TRUE(re("[^a-c]", "d"));
  EXPECT_FALSE(re("[^a-c]", "b"));
  EXPECT_TRUE(re("[^a-c]", "é"));  // negation includes every other code point, UTF-8 encoded
  EXPECT_FALSE(re("[^a-c]", "\xC3"));
  EXPECT_TRUE(re("\\w\\W\\s\\S", "a- x"));
  EXPECT_TRUE(re(".", "中"));
  EXPECT_FALSE(re(".", "\n"));
  EXPECT_TRUE(re("[é-ü]+", "éñü"));
  EXPECT_TRUE(re("[\\u4e00-\\u9fff]{2}", "中文"));
  EXPECT_TRUE(re("a+?b??", "aa"));  // lazy forms: same language
  EXPECT_TRUE(re("^ab$", "ab"));    // anchors at the ends are implied
  EXPECT_TRUE(re("[]a]", "]"));
  EXPECT_TRUE(re("[a\\-z]", "-"));
  EXPECT_TRUE(re("\\x41\\u00e9", "Aé"));
  EXPECT_TRUE(re("", ""));
}

TEST(GrammarRegex, JsonStringModeEscapesAndSearches) {
  Grammar g;
  const int r = g.declare_rule("root");
  g.define_rule(r, add_regex(g, "^a\"b\\\\c$", RegexMode::json_string, "test"));
  g.set_root(r);
  EXPECT_TRUE(full_match(g, "a\\\"b\\\\c"));  // a\"b\\c: the quote and the backslash escaped
  EXPECT_FALSE(full_match(g, "a\"b\\c"));
  Grammar h;
  const int q = h.declare_rule("root");
  h.define_rule(q, add_regex(h, "[0-9]{2}", RegexMode::json_string, "test"));  // unanchored: contains
  h.set_root(q);
  EXPECT_TRUE(full_match(h, "ab12cd"));
  EXPECT_TRUE(full_match(h, "\\n12\\u0001"));
  EXPECT_FALSE(full_match(h, "a1b2"));
}

TEST(GrammarRegex, RefusedConstructsNameThemselves) {
  auto message = [](std::string_view p) {
    try {
      grammar_from_regex(p);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("(a)\\1"), "regex: backreferences are not supported at offset 4 of pattern \"(a)\\1\"");
  EXPECT_NE(message("a(?=b)").find("lookahead is not supported"), std::string::npos);
  EXPECT_NE(message("a(?<!b)").find("lookbehind is not supported"), std::string::npos);
  EXPECT_NE(message("\\bword").find("word boundaries"), std::string::npos);
  EXPECT_NE(message("a^b").find("anchors inside the pattern"), std::string::npos);
  EXPECT_NE(message("(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(message("ab)").find("unbalanced ')'"), std::string::npos);
  EXPECT_NE(message("*a").find("quantifier without anything to repeat"), std::string::npos);
  EXPECT_NE(message("a{3,1}").find("max < min"), std::string::npos);
  EXPECT_NE(message("a{99999}").find("repetition count over"), std::string::npos);
  EXPECT_NE(message("[z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(message("\\p{L}").find("unsupported escape \\p"), std::string::npos);
  EXPECT_NE(message("(?i)abc").find("inline flags"), std::string::npos);
  EXPECT_NE(message("[abc").find("unterminated character class"), std::string::npos);
  EXPECT_NE(message(std::string(300, '(')).find("nesting deeper than"), std::string::npos);
}

TEST(GrammarRegex, StateExplosionIsRefusedNotHung) {
  // (a|b)*a(a|b){N}: the DFA needs 2^N states; the automaton limit refuses it.
  try {
    full_match(grammar_from_regex("(a|b)*a(a|b){15}"), "a");
    FAIL() << "accepted";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("grammar too large"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab::grammar
