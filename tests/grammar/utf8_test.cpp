// Every byte sequence the mask lets through inside a character class is exactly one well-formed
// UTF-8 character: no overlong forms, no surrogates, nothing past U+10FFFF, no stray continuation
// bytes (issue 30: a maxLength string came out longer through U+FFFD). Brute force on the byte
// tokenizer: every prefix of every multi-byte character is checked against the mask over all 256
// next bytes, and every completed character must leave the matcher where an ASCII character does.
// Then random generation on Qwen3's vocabulary, biased towards tokens with non-ASCII bytes
// (byte-level BPE splits characters across tokens): every output is valid UTF-8 and satisfies its
// schema, maxLength counted in code points.
#include <gtest/gtest.h>

#include <random>

#include "analysis/json_schema_check.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/token_table.h"
#include "engine/model/tokenizer_unicode.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace {

std::vector<uint32_t> mask_of(GrammarMatcher& m) {
  std::vector<uint32_t> w(static_cast<size_t>(m.n_words()));
  m.fill_next_token_bitmask(w.data());
  return w;
}

bool bit(const std::vector<uint32_t>& w, int i) { return (w[static_cast<size_t>(i) >> 5] >> (i & 31)) & 1; }

// Whether `p` (1..4 bytes, starting with a lead byte >= 0xC2) is a strict prefix of a well-formed
// UTF-8 character, or (complete) the whole of one: RFC 3629's table.
bool utf8_prefix_ok(const std::string& p, bool* complete) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(p[i]); };
  const unsigned char lead = b(0);
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) need = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) need = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
  else if (lead >= 0xF0 && lead <= 0xF4) need = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
  else return false;
  if (p.size() > need) return false;
  for (size_t i = 1; i < p.size(); ++i)
    if (b(i) < (i == 1 ? lo : 0x80) || b(i) > (i == 1 ? hi : 0xBF)) return false;
  *complete = p.size() == need;
  return true;
}

// From the matcher's state (where one character of the class comes next): the high bytes
// allowed first are exactly C2..F4, every prefix allows exactly the bytes that continue a
// well-formed character, and every completed character leaves the mask `after` (the mask after
// an ASCII character of the class). Returns the number of complete characters reached.
size_t check_multibyte(GrammarMatcher& m, const std::vector<uint32_t>& after, std::string& prefix) {
  const std::vector<uint32_t> w = mask_of(m);
  size_t n = 0;
  for (int b = prefix.empty() ? 0x80 : 0; b < 256; ++b) {
    bool complete = false;
    const std::string p = prefix + static_cast<char>(b);
    const bool ok = utf8_prefix_ok(p, &complete);
    EXPECT_EQ(bit(w, b), ok) << "after bytes of size " << prefix.size() << " ending " << std::hex
                             << (prefix.empty() ? 0 : static_cast<unsigned char>(prefix.back())) << ", byte " << b;
    if (!ok || !bit(w, b)) continue;
    // Four-byte characters: every third byte is checked by the mask above, but only its ends
    // are entered (the middle ones behave alike), so the test stays fast under sanitizers.
    if (prefix.size() == 2 && p.size() == 3 && !complete && b != 0x80 && b != 0xBF) continue;
    EXPECT_TRUE(m.accept_token(b));
    if (complete) {
      EXPECT_EQ(mask_of(m), after) << "after a complete character ending " << std::hex << b;
      ++n;
    } else {
      prefix.push_back(static_cast<char>(b));
      n += check_multibyte(m, after, prefix);
      prefix.pop_back();
    }
    m.rollback(1);
    if (::testing::Test::HasFailure()) return n;
  }
  return n;
}

struct Case {
  const char* what;
  Grammar grammar;
  std::string before;  ///< bytes that lead to where one character of the class comes next
};

TEST(GrammarUtf8, EveryAllowedMultibyteSequenceIsOneWellFormedCharacter) {
  std::vector<Case> cases;
  cases.push_back({"json string maxLength 1", grammar_from_json_schema_text(R"({"type":"string","maxLength":1})"), "\""});
  cases.push_back({"json string maxLength 3, 1 written", grammar_from_json_schema_text(R"({"type":"string","minLength":2,"maxLength":3})"), "\"a"});
  cases.push_back({"json string", grammar_from_json_schema_text(R"({"type":"string"})"), "\""});
  cases.push_back({"additional property key",
                   grammar_from_json_schema_text(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})"),
                   "{\"b"});
  cases.push_back({"regex [^a]", grammar_from_regex("[^a]"), ""});
  cases.push_back({"regex .{1,2}", grammar_from_regex(".{1,2}"), "x"});
  cases.push_back({"gbnf [^\"]", grammar_from_gbnf("root ::= [^\"]"), ""});
  // 2-byte: 30 leads x 64; 3-byte: 16 x 64 x 64 minus 2 x 32 x 64 overlong/surrogate forms;
  // 4-byte entered at two third bytes: (48 + 3 x 64 + 16) x 2 x 64.
  const size_t expected = 30 * 64 + (16 * 64 * 64 - 2 * 32 * 64) + (48 + 3 * 64 + 16) * 2 * 64;
  for (Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto compiled = CompiledGrammar::compile(c.grammar, testing::bytes_table());
    GrammarMatcher m(compiled);
    ASSERT_TRUE(c.before.empty() || m.accept_bytes(c.before));
    ASSERT_TRUE(m.accept_token('x'));
    const std::vector<uint32_t> after = mask_of(m);
    m.rollback(1);
    std::string prefix;
    EXPECT_EQ(check_multibyte(m, after, prefix), expected);
  }
}

// One random generation under the mask; with probability 0.6 the pick is among the allowed tokens
// that carry a byte >= 0x80 (Qwen3 has thousands of partial-character tokens), else uniform;
// past half the budget, '"' '}' ']' first so the output ends.
std::string generate_non_ascii(GrammarMatcher& m, const TokenTable& t, std::mt19937_64& rng, int max_tokens, bool* finished) {
  std::string out;
  *finished = false;
  for (int step = 0; step < max_tokens && !m.is_terminated(); ++step) {
    const std::vector<uint32_t> w = mask_of(m);
    std::vector<int32_t> all, high, closing;
    for (int i = 0; i < t.n_vocab(); ++i) {
      if (!bit(w, i)) continue;
      all.push_back(i);
      const std::string_view b = t.bytes(i);
      if (t.eos() && i == *t.eos()) closing.push_back(i);
      else if (b.find_first_not_of("\"}]") == std::string_view::npos) closing.push_back(i);
      for (char c : b)
        if (static_cast<unsigned char>(c) >= 0x80) {
          high.push_back(i);
          break;
        }
    }
    if (all.empty()) return out;
    const std::vector<int32_t>& from = step > max_tokens / 2 && !closing.empty() ? closing
                                       : !high.empty() && std::uniform_real_distribution<>(0, 1)(rng) < 0.6 ? high
                                                                                                            : all;
    const int32_t id = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    EXPECT_TRUE(m.accept_token(id));
    if (!(t.eos() && id == *t.eos())) out += t.bytes(id);
  }
  *finished = m.is_terminated();
  return out;
}

TEST(GrammarUtf8, QwenNonAsciiOutputsAreValidUtf8AndWithinMaxLength) {
  const auto table = testing::qwen_table();
  if (!table) {
    if (testing::under_ci()) FAIL() << testing::qwen_dir() << "/tokenizer.json is missing (CI is set)";
    GTEST_SKIP() << "Qwen3 tokenizer.json not installed: run scripts/install-deps.sh";
  }
  std::mt19937_64 rng(30);
  for (const char* text : {R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
                              "tags":{"type":"array","items":{"type":"string","minLength":1,"maxLength":3},"maxItems":3}},
                              "required":["name","tags"],"additionalProperties":false})",
                           R"({"type":"string","minLength":2,"maxLength":5})"}) {
    const auto schema = nlohmann::ordered_json::parse(text);
    auto compiled = CompiledGrammar::compile(grammar_from_json_schema(schema), table);
    int n_non_ascii = 0;
    for (int k = 0; k < 25; ++k) {
      GrammarMatcher m(compiled);
      bool finished = false;
      const std::string out = generate_non_ascii(m, *table, rng, 120, &finished);
      ASSERT_TRUE(finished) << out;
      EXPECT_EQ(unicode::to_valid_utf8(out), out) << "not valid UTF-8: " << out;
      EXPECT_EQ(analysis::validate_json_text(out, schema), "") << out;
      for (char c : out) n_non_ascii += static_cast<unsigned char>(c) >= 0x80;
    }
    EXPECT_GT(n_non_ascii, 100) << "the generations should be mostly non-ASCII";
  }
}

}  // namespace
}  // namespace servelab::grammar
