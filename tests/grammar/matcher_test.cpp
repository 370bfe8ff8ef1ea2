// The matcher on small vocabularies: exact masks (brute force), rollback, eos, jump-forward.
#include <gtest/gtest.h>

#include <random>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/token_table.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace {

using testing::brute_force_mismatch;

// Tokens that cross rule boundaries: whole words, quotes with punctuation, digits, spaces.
std::vector<std::string> awkward_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* s : {"\"", "\",", "\":", "\"}", "\"]", "\", \"", "{\"", "[\"", "[{", "}]", "}}", "]]", "null", "true",
                        "false", "12", "0.", "e+", "-1", "ab", "abc", "\":\"", "\": ", ", ", ",\"", "name", "\"name\"",
                        "ä", "\xC3", "\xA4x", "\\n", "\\u00", "aa", "aaaa", "  ", "\"\"", "{}", "[]", ":[", "1}", "0,"})
    v.push_back(s);
  return v;
}

void walk_and_check(const Grammar& g, const std::shared_ptr<TokenTable>& table, uint64_t seed, int n_runs) {
  auto compiled = CompiledGrammar::compile(g, table);
  std::mt19937_64 rng(seed);
  for (int run = 0; run < n_runs; ++run) {
    GrammarMatcher m(compiled);
    for (int step = 0; step < 40; ++step) {
      ASSERT_EQ(brute_force_mismatch(m), "") << "run " << run << " step " << step;
      std::vector<uint32_t> words(static_cast<size_t>(m.n_words()));
      m.fill_next_token_bitmask(words.data());
      std::vector<int32_t> allowed;
      for (int i = 0; i < table->n_vocab(); ++i)
        if ((words[static_cast<size_t>(i) >> 5] >> (i & 31)) & 1) allowed.push_back(i);
      if (allowed.empty()) break;
      const int32_t id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.accept_token(id));
      if (m.is_terminated()) break;
    }
  }
}

TEST(GrammarMatcher, BruteForceMasksOnAwkwardVocabulary) {
  auto tok = testing::make_list_tokenizer(awkward_vocab());
  auto table = TokenTable::build(*tok);
  walk_and_check(grammar_from_json_schema_text(R"({"type":"object","properties":{"name":{"type":"string"},
      "n":{"type":"integer","minimum":-5,"maximum":120},"tags":{"type":"array","items":{"enum":["a","b c"]},"maxItems":3},
      "x":{"type":["number","null"]}},"required":["name"]})"), table, 1, 6);
  walk_and_check(grammar_json_object(), table, 2, 6);
  walk_and_check(grammar_from_regex("(ab|a)*c?[0-9]{2,3}"), table, 3, 6);
  walk_and_check(grammar_from_gbnf("root ::= item (\",\" item)*\nitem ::= \"a\" item? | [0-9]+ | \"(\" root \")\""), table, 4, 6);
}

TEST(GrammarMatcher, EosOnlyWhenComplete) {
  auto tok = testing::make_bytes_tokenizer();
  auto table = TokenTable::build(*tok);
  GrammarMatcher m(CompiledGrammar::compile(grammar_from_regex("ab?"), table));
  EXPECT_FALSE(m.is_accepting());
  EXPECT_FALSE(m.accept_token(256));
  EXPECT_TRUE(m.accept_token('a'));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_TRUE(m.accept_token('b'));
  EXPECT_FALSE(m.accept_token('b'));
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('a'));
  EXPECT_EQ(brute_force_mismatch(m), "");
}

TEST(GrammarMatcher, RollbackRestoresMasks) {
  auto tok = testing::make_bytes_tokenizer();
  auto table = TokenTable::build(*tok);
  GrammarMatcher m(CompiledGrammar::compile(grammar_from_json_schema_text(R"({"type":"array","items":{"type":"integer"}})"), table));
  std::vector<uint32_t> before(static_cast<size_t>(m.n_words())), after(before.size());
  m.fill_next_token_bitmask(before.data());
  for (char c : std::string("[12,")) ASSERT_TRUE(m.accept_token(static_cast<unsigned char>(c)));
  EXPECT_FALSE(m.accept_token(']'));
  m.rollback(4);
  EXPECT_EQ(m.n_steps(), 0);
  m.fill_next_token_bitmask(after.data());
  EXPECT_EQ(before, after);
  EXPECT_TRUE(m.accept_bytes("[]"));
  EXPECT_TRUE(m.is_accepting());
}

TEST(GrammarMatcher, JumpForwardFollowsForcedBytes) {
  auto tok = testing::make_bytes_tokenizer();
  auto table = TokenTable::build(*tok);
  GrammarMatcher m(CompiledGrammar::compile(
      grammar_from_json_schema_text(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"), table));
  EXPECT_EQ(m.find_jump_forward_string(), "{\"city\":");
  EXPECT_EQ(m.n_steps(), 0);
}

TEST(GrammarMatcher, RightRecursionKeepsTheStackFlat) {
  auto tok = testing::make_bytes_tokenizer();
  auto table = TokenTable::build(*tok);
  GrammarMatcher m(CompiledGrammar::compile(grammar_from_gbnf("root ::= \"a\" root | \"b\""), table));
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(m.accept_token('a'));
  EXPECT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.is_accepting());
}

}  // namespace
}  // namespace servelab::grammar
