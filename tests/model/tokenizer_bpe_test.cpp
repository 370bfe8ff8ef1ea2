// Byte-level BPE on a small hand-made tokenizer.json (no download needed): merge order, both
// merge forms, added tokens and their flags, tokenizer_config.json, and the errors for what is
// not supported.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/hf_config.h"
#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_bpe.h"
#include "engine/model/tokenizer_pretok.h"
#include "tests/model/temp_dir.h"

namespace servelab {
namespace {

using nlohmann::json;

std::string byte_name(unsigned char b) {
  std::string s;
  const char32_t cp = byte_to_unicode(b);
  if (cp < 0x80) s += char(cp);
  else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  return s;
}

// Ids 0..255 are the bytes in order; then the merged tokens.
json tiny_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_name(static_cast<unsigned char>(b))] = b;
  const std::vector<std::string> merged = {"ab", "abc", "Ġa", "Ġab", "bc", "aa", "aaaa"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[merged[i]] = 256 + int(i);
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|end|>"}, {"special", true}},
        {{"id", 301}, {"content", "<tag>"}, {"special", false}, {"lstrip", true}, {"rstrip", true}},
        {{"id", 302}, {"content", "<|end|>x"}, {"special", true}},
        {{"id", 303}, {"content", "word"}, {"special", false}, {"single_word", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        // "a b" and ["a", "b"] forms mixed; rank order: a+b first, then ab+c, Ġ+a, Ġa+b, b+c, a+a, aa+aa.
        {"merges", {"a b", json::array({"ab", "c"}), "Ġ a", json::array({"Ġa", "b"}), "b c", "a a", "aa aa"}}}},
  };
}

std::string write(const testing_util::TempDir& dir, const std::string& name, const json& j) {
  const std::string path = dir.file(name);
  std::ofstream(path) << j.dump();
  return path;
}

TEST(BpeTokenizer, MergesByRankBothForms) {
  testing_util::TempDir dir;
  const auto tok = load_bpe_tokenizer(write(dir, "tokenizer.json", tiny_tokenizer()));
  EXPECT_EQ(tok->vocab_size(), 304);
  // "abc": a+b (rank 0) before b+c (rank 4), then ab+c.
  EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{257}));
  EXPECT_EQ(tok->encode(" ab"), (std::vector<TokenId>{' ', 256}));  // a+b outranks Ġ+a; no "Ġ ab" merge
  EXPECT_EQ(tok->encode(" a"), (std::vector<TokenId>{258}));
  EXPECT_EQ(tok->encode("bc"), (std::vector<TokenId>{260}));
  // "aaaaa": leftmost a+a pairs first: aa aa a -> aaaa a.
  EXPECT_EQ(tok->encode("aaaaa"), (std::vector<TokenId>{262, 'a'}));
  // A word longer than the rescanning limit takes the heap path: same answer as pieces.
  const std::string long_word(203, 'a');
  std::vector<TokenId> expected(50, 262);
  expected.push_back(261);
  expected.push_back('a');
  EXPECT_EQ(tok->encode(long_word), expected);
  EXPECT_EQ(tok->decode(tok->encode(long_word)), long_word);
  EXPECT_EQ(tok->token_id("Ġab"), 259);
  EXPECT_EQ(tok->token_id("<|end|>"), 300);
}

// Keys named vocab or merges elsewhere in the file are ordinary data, not the model's.
TEST(BpeTokenizer, OnlyTheModelsVocabAndMergesAreSpecial) {
  testing_util::TempDir dir;
  json j = tiny_tokenizer();
  j["post_processor"] = {{"type", "ByteLevel"}, {"vocab", {{"x", 1}}}, {"merges", json::array({1, 2})}};
  j["model"]["extra"] = {{"vocab", "not the vocab"}};
  j["truncation"] = nullptr;
  const auto tok = load_bpe_tokenizer(write(dir, "tokenizer.json", j));
  EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{257}));
}

TEST(BpeTokenizer, AddedTokensLongestFirstWithFlags) {
  testing_util::TempDir dir;
  const auto tok = load_bpe_tokenizer(write(dir, "tokenizer.json", tiny_tokenizer()));
  EXPECT_EQ(tok->encode("a<|end|>xb"), (std::vector<TokenId>{'a', 302, 'b'}));  // the longest match wins
  EXPECT_EQ(tok->encode("a<|end|>b"), (std::vector<TokenId>{'a', 300, 'b'}));
  // lstrip/rstrip: the spaces around <tag> belong to it.
  EXPECT_EQ(tok->encode("a  <tag>  b"), (std::vector<TokenId>{'a', 301, 'b'}));
  // single_word: only where no letter or digit touches it.
  EXPECT_EQ(tok->encode("a word b"), (std::vector<TokenId>{'a', ' ', 303, ' ', 'b'}));
  EXPECT_NE(tok->encode("swordfish")[0], 303);
  // parse_special=false: special ones are text, non-special ones still match.
  const std::vector<TokenId> plain = tok->encode("<|end|><tag>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 300), 0);
  EXPECT_EQ(plain.back(), 301);
  EXPECT_EQ(tok->decode(plain), "<|end|><tag>");
  EXPECT_EQ(tok->decode(std::vector<TokenId>{'a', 300, 'b'}, true), "ab");
}

TEST(BpeTokenizer, FromDirWithConfig) {
  testing_util::TempDir dir;
  EXPECT_EQ(load_tokenizer_from_dir(dir.path()), nullptr);
  write(dir, "tokenizer.json", tiny_tokenizer());
  auto tok = load_tokenizer_from_dir(dir.path());
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->eos_id());
  EXPECT_EQ(tok->chat_template(), "");
  write(dir, "tokenizer_config.json",
        {{"eos_token", {{"__type", "AddedToken"}, {"content", "<|end|>"}}},
         {"bos_token", "Ġa"},
         {"chat_template", {{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", "[INST]"}}}}});
  tok = load_tokenizer_from_dir(dir.path());
  EXPECT_EQ(tok->eos_id(), 300);
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->chat_template(), "[INST]");
  write(dir, "tokenizer_config.json", {{"eos_token", "<|nope|>"}});
  try {
    load_tokenizer_from_dir(dir.path());
    FAIL() << "expected a throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: eos_token \"<|nope|>\""), std::string::npos)
        << e.what();
  }
}

void expect_error(const json& j, const std::string& needle) {
  testing_util::TempDir dir;
  const std::string path = write(dir, "tokenizer.json", j);
  try {
    load_bpe_tokenizer(path);
    ADD_FAILURE() << "expected an error containing: " << needle;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;  // names the file first
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(BpeTokenizer, ErrorsNameFileAndFeature) {
  json j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model.type \"WordPiece\" is not supported");
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j, "normalizer NFKC is not supported");
  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_error(j, "pre_tokenizer Split pattern");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(j, "pre_tokenizer Metaspace is not supported");
  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error(j, "Split behavior \"Removed\"");
  j = tiny_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "decoder WordPiece is not supported");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back("x yz");
  expect_error(j, "model.merges[7] \"x yz\" names a token missing from model.vocab");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back(42);
  expect_error(j, "model.merges[7] must be");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back(json::array({"a", "b", "c"}));
  expect_error(j, "model.merges[7] must be \"left right\" or [left, right] (got an array of 3)");
  j = tiny_tokenizer();
  j["model"]["merges"][2] = json::array({"Ġ", json::array({"a"})});
  expect_error(j, "model.merges[2] must be");
  j = tiny_tokenizer();
  j["model"]["merges"] = "a b";
  expect_error(j, "model.merges must be an array");
  j = tiny_tokenizer();
  j["model"].erase("merges");
  expect_error(j, "model.merges must be an array");
  j = tiny_tokenizer();
  j["model"]["vocab"] = json::array({"a"});
  expect_error(j, "model.vocab must be an object");
  j = tiny_tokenizer();
  j["model"]["vocab"]["zz"] = {{"id", 3}};
  expect_error(j, "model.vocab[\"zz\"] must be an id");
  j = tiny_tokenizer();
  j["model"]["vocab"]["zz"] = -4;
  expect_error(j, "model.vocab[\"zz\"] must be an id in [0, 2^30) (got -4)");
  j = tiny_tokenizer();
  j["model"]["vocab"]["zz"] = 97;  // "a" has 97 too: two names for one id are allowed, as in HF
  j["model"]["vocab"].erase("a");
  expect_error(j, "model.vocab lacks the byte-level token \"a\" for byte 97");
  j = tiny_tokenizer();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_error(j, "model.continuing_subword_prefix");
  j = tiny_tokenizer();
  j["added_tokens"][0].erase("content");
  expect_error(j, "added_tokens[0] must have");
  testing_util::TempDir dir;
  std::ofstream(dir.file("bad.json")) << "{ not json";
  EXPECT_THROW(load_bpe_tokenizer(dir.file("bad.json")), std::runtime_error);
  EXPECT_THROW(load_bpe_tokenizer(dir.file("missing.json")), std::runtime_error);
}

// `servelab model synth --tokenizer`: the files land beside the weights, the vocabulary covers
// the tokenizer's ids and eos follows its config.
TEST(BpeTokenizer, ModelSynthWritesTokenizer) {
  const std::string exe = std::string(SERVELAB_BINARY_DIR) + "/servelab";
  if (!std::filesystem::exists(exe)) GTEST_SKIP() << exe << " not built";
  testing_util::TempDir dir;
  const auto run = [&](const std::string& args) {
    const std::string log = dir.file("log.txt");
    const int status = std::system((exe + " " + args + " > " + log + " 2>&1").c_str());
    std::stringstream ss;
    ss << std::ifstream(log).rdbuf();
    return std::pair{WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
  };
  json big = tiny_tokenizer();
  big["added_tokens"].push_back({{"id", 4999}, {"content", "<|last|>"}, {"special", true}});
  std::filesystem::create_directories(dir.file("src"));
  const std::string src = write(dir, "src/tokenizer.json", big);

  auto [code, out] = run("model synth --preset tiny --out " + dir.file("m1") + " --tokenizer " + src);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("vocab_size 5000"), std::string::npos) << out;  // raised from tiny's 2048
  ModelConfig c = read_hf_config(dir.file("m1/config.json"));
  EXPECT_EQ(c.vocab_size, 5000);
  EXPECT_EQ(c.eos_token, -1) << out;  // no config beside it and no known eos name
  auto tok = load_tokenizer_from_dir(dir.file("m1"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 5000);

  write(dir, "src/tokenizer_config.json", {{"eos_token", "<|end|>"}, {"chat_template", "<|start_header_id|>"}});
  std::tie(code, out) = run("model synth --preset tiny --out " + dir.file("m2") + " --tokenizer " + src);
  ASSERT_EQ(code, 0) << out;
  c = read_hf_config(dir.file("m2/config.json"));
  EXPECT_EQ(c.eos_token, 300) << out;
  tok = load_tokenizer_from_dir(dir.file("m2"));
  EXPECT_EQ(tok->eos_id(), 300);
  EXPECT_EQ(detect_chat_format(tok->chat_template()), ChatFormat::llama3);

  write(dir, "src/tokenizer_config.json", {{"eos_token", "<|missing|>"}});
  std::tie(code, out) = run("model synth --preset tiny --out " + dir.file("m3") + " --tokenizer " + src);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("<|missing|>"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m3/config.json")));  // checked before writing weights
  std::tie(code, out) = run("model synth --preset tiny --out " + dir.file("m4") + " --tokenizer " + dir.file("nope.json"));
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("nope.json: no such file"), std::string::npos) << out;
}

// Hand-derived splits for the regex corners (the reference files cover them at scale).
TEST(PreTokenizer, RegexCorners) {
  const auto split = [](const std::string& text, const PreTokenizerSpec& spec) {
    std::vector<std::pair<size_t, size_t>> r;
    split_words(text, spec, r);
    std::vector<std::string> words;
    for (const auto& [b, e] : r) words.push_back(text.substr(b, e - b));
    return words;
  };
  const PreTokenizerSpec llama3{SplitPattern::llama3, 3, false}, qwen{SplitPattern::llama3, 1, false},
      gpt2{SplitPattern::gpt2, 3, false};
  using W = std::vector<std::string>;
  EXPECT_EQ(split("I'M here", llama3), (W{"I", "'M", " here"}));
  EXPECT_EQ(split("I'M here", gpt2), (W{"I", "'", "M", " here"}));  // GPT-2's contractions are case-sensitive
  EXPECT_EQ(split("12345", llama3), (W{"123", "45"}));
  EXPECT_EQ(split("12345", qwen), (W{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("  x", llama3), (W{" ", " x"}));                    // \s+(?!\S) leaves the last space
  EXPECT_EQ(split("a  \n\n  b", llama3), (W{"a", "  \n\n", " ", " b"}));  // \s*[\r\n]+ ends at the last newline
  EXPECT_EQ(split("x  ", llama3), (W{"x", "  "}));                    // at the end the run stays whole
  EXPECT_EQ(split("\tword", llama3), (W{"\tword"}));                  // any non-letter may lead a word
  EXPECT_EQ(split("!!\n\nx", llama3), (W{"!!\n\n", "x"}));
  EXPECT_EQ(split(" \xFF\xFE", llama3), (W{" \xFF\xFE"}));            // invalid bytes count as punctuation
  PreTokenizerSpec spec;
  EXPECT_FALSE(parse_split_regex("\\w+", &spec));
}

}  // namespace
}  // namespace servelab
