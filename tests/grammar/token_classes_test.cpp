// The shortcuts that replace trie walks give exactly the walk's classes: every resting state of a
// bounded string's tails (StringTailScan, one pass per sub-state shared by all tails), on the
// byte tokenizer, an awkward small vocabulary and Qwen3's 151k tokens when installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/string_tail_classes.h"
#include "engine/grammar/token_classes.h"
#include "engine/grammar/token_table.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace token_classes_test {  // named: a unity batch shares one translation unit

std::vector<int32_t> accepted_ids(const TokenClasses& c) {
  std::vector<int32_t> out = c.accepted;
  for (size_t w = 0; w < c.accepted_bits.size(); ++w)
    for (int b = 0; b < 32; ++b)
      if ((c.accepted_bits[w] >> b) & 1) out.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(b)));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<int32_t, unsigned char>> sorted(std::vector<std::pair<int32_t, unsigned char>> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void expect_same(const TokenClasses& fast, const TokenClasses& walked, const std::string& where) {
  ASSERT_EQ(accepted_ids(fast), accepted_ids(walked)) << where;
  ASSERT_EQ(fast.n_accepted, walked.n_accepted) << where;
  ASSERT_EQ(fast.accepted_bits.empty(), walked.accepted_bits.empty()) << where;  // the same form
  ASSERT_EQ(sorted(fast.uncertain), sorted(walked.uncertain)) << where;
}

// Every resting state of every string_tail rule of a schema's grammar: the scan equals the walk,
// with one scan per state, and with one scan per sub-state shared by all tails in ascending and
// then descending order of `left` (the second order restarts its running bits).
void check_tails(const std::shared_ptr<TokenTable>& table, int min_length, int max_length) {
  const std::string schema = R"({"type":"string","minLength":)" + std::to_string(min_length) + R"(,"maxLength":)" +
                             std::to_string(max_length) + "}";
  const Automaton a = build_automaton(grammar_from_json_schema_text(schema));
  struct TailState {
    int left, need;
    int32_t state;
    std::string pending;
    TokenClasses walked;
  };
  std::vector<TailState> states;
  for (int r = 0; r < a.n_rules(); ++r) {
    int left = -1, need = -1;
    if (std::sscanf(a.share_key(r).c_str(), "json:string_tail{%d,%d}", &left, &need) != 2 || left < 0) continue;
    for (int32_t s = a.rule_first_state(r); s < a.rule_first_state(r) + a.rule_n_states(r); ++s)
      if (a.has_bytes(s)) states.push_back({left, need, s, bytes_from_rule_start(a, s), compute_token_classes(a, *table, s)});
  }
  std::sort(states.begin(), states.end(), [](const TailState& x, const TailState& y) { return x.left < y.left; });
  std::map<std::string, std::unique_ptr<StringTailScan>> shared;
  for (int pass = 0; pass < 2; ++pass) {
    for (const TailState& t : states) {
      const std::string where = "tail{" + std::to_string(t.left) + "," + std::to_string(t.need) + "} after \"" + t.pending + "\"";
      auto& scan = shared[t.pending];
      if (!scan) scan = std::make_unique<StringTailScan>(*table, t.pending);
      expect_same(scan->classes(t.left, t.need), t.walked, where + " (shared scan)");
      if (pass == 0) expect_same(StringTailScan(*table, t.pending).classes(t.left, t.need), t.walked, where);
    }
    std::reverse(states.begin(), states.end());
  }
  // left = 0: only the quote; from 1 on: the start and the eight sub-states inside a character.
  EXPECT_EQ(static_cast<int>(states.size()), 1 + 9 * max_length);
  EXPECT_EQ(shared.size(), 9u);
}

TEST(GrammarTokenClasses, StringTailScanEqualsTheWalkInEveryState) {
  check_tails(testing::bytes_table(), 2, 5);
  check_tails(TokenTable::build(*testing::make_list_tokenizer(
                  {"a", "ab", "abc\"", "abcd\",", "\"", "\",", "\\n", "\\", "\\q", "\\\"\"", "\xC3", "\xA9", "\xC3\xA9",
                   "\xC3\xA9\"}", "\xE2\x82", "\xE2\x82\xAC\xE2", "\xED\xA0\x80", "\xF0\x9F\x98\x80\"", "x\x01", "\xC0\xAF",
                   "aaaaaa", "aaaaa\"", "\" ", "é\"\"", "\x7F"})),
              1, 6);
  if (const auto q = testing::qwen_table()) check_tails(q, 1, 9);
}

TEST(GrammarTokenClasses, StringTailPendingBytes) {
  const Automaton a = build_automaton(grammar_from_json_schema_text(R"({"type":"string","maxLength":1})"));
  std::vector<std::string> pending;
  for (int r = 0; r < a.n_rules(); ++r)
    if (a.share_key(r) == "json:string_tail{1,0}")
      for (int32_t s = a.rule_first_state(r); s < a.rule_first_state(r) + a.rule_n_states(r); ++s)
        if (a.has_bytes(s)) pending.push_back(bytes_from_rule_start(a, s));
  std::sort(pending.begin(), pending.end());
  EXPECT_EQ(pending, (std::vector<std::string>{"", "\\", "\xC2", "\xE0", "\xE1", "\xED", "\xF0", "\xF1", "\xF4"}));
  // Not the start of one character: refused, by name.
  for (const char* bad : {"a", "\\n", "\x80", "\xC2\xA9", "\xF5"})
    EXPECT_THROW(StringTailScan(*testing::bytes_table(), bad), std::invalid_argument) << bad;
}

}  // namespace token_classes_test
}  // namespace servelab::grammar
