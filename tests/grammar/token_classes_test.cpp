// The shortcuts that replace trie walks give exactly the walk's classes: a bounded string tail's
// start (string_tail_start_classes), on the byte tokenizer, an awkward small vocabulary and
// Qwen3's 151k tokens when installed.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/json_schema.h"
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

// Every string_tail rule of a schema's grammar: the shortcut equals the walk at its start.
void check_tails(const std::shared_ptr<TokenTable>& table, int min_length, int max_length) {
  const std::string schema = R"({"type":"string","minLength":)" + std::to_string(min_length) + R"(,"maxLength":)" +
                             std::to_string(max_length) + "}";
  const Automaton a = build_automaton(grammar_from_json_schema_text(schema));
  int n_checked = 0;
  for (int r = 0; r < a.n_rules(); ++r) {
    int left = -1, need = -1;
    if (std::sscanf(a.share_key(r).c_str(), "json:string_tail{%d,%d}", &left, &need) != 2 || left < 0) continue;
    const TokenClasses walked = compute_token_classes(a, *table, a.rule_start(r));
    const TokenClasses fast = string_tail_start_classes(*table, left, need);
    ASSERT_EQ(accepted_ids(fast), accepted_ids(walked)) << a.share_key(r);
    ASSERT_EQ(sorted(fast.uncertain), sorted(walked.uncertain)) << a.share_key(r);
    ++n_checked;
  }
  EXPECT_EQ(n_checked, max_length + 1);
}

TEST(GrammarTokenClasses, StringTailShortcutEqualsTheWalk) {
  check_tails(testing::bytes_table(), 2, 5);
  check_tails(TokenTable::build(*testing::make_list_tokenizer(
                  {"a", "ab", "abc\"", "abcd\",", "\"", "\",", "\\n", "\\", "\\q", "\\\"\"", "\xC3", "\xA9", "\xC3\xA9",
                   "\xC3\xA9\"}", "\xE2\x82", "\xE2\x82\xAC\xE2", "\xED\xA0\x80", "\xF0\x9F\x98\x80\"", "x\x01", "\xC0\xAF",
                   "aaaaaa", "aaaaa\"", "\" ", "é\"\"", "\x7F"})),
              1, 6);
  if (const auto q = testing::qwen_table()) check_tails(q, 1, 9);
}

}  // namespace token_classes_test
}  // namespace servelab::grammar
