// The byte tokenizer and chat rendering.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_unicode.h"

namespace servelab {
namespace {

TEST(ByteTokenizer, RoundTripsAnyText) {
  const auto tok = make_byte_tokenizer(1000, 999);
  const std::string text = "héllo 世界 🙂 <|im_end|>\n\t";
  const std::vector<TokenId> ids = tok->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'h');
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->vocab_size(), 1000);
  EXPECT_EQ(tok->eos_id(), 999);
  EXPECT_FALSE(tok->bos_id());
  EXPECT_EQ(tok->token_id("a"), 97);
  EXPECT_FALSE(tok->token_id("ab"));
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->chat_template(), "");
}

TEST(ByteTokenizer, DecodesSplitBytesAndForeignIds) {
  const auto tok = make_byte_tokenizer(300, std::nullopt);
  // "世" is E4 B8 96: whole it decodes, cut it is one replacement character.
  const std::vector<TokenId> whole = {0xE4, 0xB8, 0x96};
  EXPECT_EQ(tok->decode(whole), "世");
  const std::vector<TokenId> cut = {'a', 0xE4, 0xB8, 'b'};
  EXPECT_EQ(tok->decode(cut), "a\xEF\xBF\xBD" "b");
  const std::vector<TokenId> foreign = {'a', 299, 'b'};
  EXPECT_EQ(tok->decode(foreign), "a<|299|>b");
  EXPECT_EQ(tok->decode(foreign, /*skip_special=*/true), "ab");
}

// A model whose eos is a byte id (tiny's is 1): eos is special, so a finished stream's text does not
// end in that byte (structured outputs would not parse).
TEST(ByteTokenizer, EosInTheByteRangeIsSpecial) {
  const auto tok = make_byte_tokenizer(300, 1);
  const std::vector<TokenId> ids = {'{', '}', 1};
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/true), "{}");
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/false), "{}<|1|>");
  EXPECT_EQ(tok->token_bytes(1, /*skip_special=*/true), "");
}

TEST(ByteTokenizer, RejectsSmallVocab) {
  EXPECT_THROW(make_byte_tokenizer(255, std::nullopt), std::invalid_argument);
  EXPECT_THROW(make_byte_tokenizer(256, 256), std::invalid_argument);
  EXPECT_NO_THROW(make_byte_tokenizer(256, 255));
}

// Streaming: every delta is valid UTF-8 and the deltas add up to decode(ids), whatever the bytes.
TEST(StreamDecoder, DeltasAreValidAndAddUpToDecode) {
  const auto tok = make_byte_tokenizer(300, 299);
  std::mt19937 rng(11);
  const std::string seed_text = "héllo 世界 🙂 ok";
  for (int round = 0; round < 300; ++round) {
    std::vector<TokenId> ids;
    const int n = int(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const unsigned r = rng() % 10;
      if (r < 6) ids.push_back(static_cast<unsigned char>(seed_text[rng() % seed_text.size()]));  // mostly real text
      else if (r < 9) ids.push_back(TokenId(rng() % 256));                                        // any byte
      else ids.push_back(299);                                                                    // special
    }
    StreamDecoder stream(*tok);
    std::string joined;
    for (const TokenId id : ids) {
      const std::string delta = stream.push(id);
      EXPECT_EQ(unicode::to_valid_utf8(delta), delta);
      joined += delta;
    }
    joined += stream.finish();
    EXPECT_EQ(joined, tok->decode(ids, /*skip_special=*/true)) << "round " << round;
  }
  // A split character waits for its last byte.
  StreamDecoder s(*tok);
  EXPECT_EQ(s.push(0xE4), "");
  EXPECT_EQ(s.push(0xB8), "");
  EXPECT_EQ(s.push(0x96), "世");
  EXPECT_EQ(s.push(0xE4), "");
  EXPECT_EQ(s.push('a'), "\xEF\xBF\xBD" "a");  // broken off: one replacement character
  EXPECT_EQ(s.push(0xF0), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
  StreamDecoder keep(*tok, /*skip_special=*/false);
  EXPECT_EQ(keep.push(299), "<|299|>");
}

const std::vector<ChatMessage> kChat = {
    {"system", "You are terse."}, {"user", "Hi!"}, {"assistant", " Hello. "}, {"user", "2+2?"}};

TEST(RenderChat, ChatMlIsTheDefault) {
  const std::string expected =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
      "<|im_start|>assistant\n Hello. <|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(render_chat(kChat, ""), expected);
  EXPECT_EQ(render_chat(kChat, "{{ something unknown }}"), expected);
  EXPECT_EQ(render_chat(kChat, "{% for m in messages %}<|im_start|>{{ m.role }}..."), expected);
  EXPECT_EQ(render_chat(std::span(kChat).first(2), "", /*add_generation_prompt=*/false),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
  EXPECT_EQ(detect_chat_format(""), ChatFormat::chatml);
}

TEST(RenderChat, Llama3Headers) {
  const std::string tmpl = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}";
  EXPECT_EQ(detect_chat_format(tmpl), ChatFormat::llama3);
  EXPECT_EQ(render_chat(kChat, tmpl),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(RenderChat, Llama2Inst) {
  const std::string tmpl = "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}";
  EXPECT_EQ(detect_chat_format(tmpl), ChatFormat::llama2);
  EXPECT_EQ(render_chat(kChat, tmpl),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
  const std::vector<ChatMessage> no_system = {{"user", "a"}};
  EXPECT_EQ(render_chat(no_system, tmpl), "<s>[INST] a [/INST]");
  const std::vector<ChatMessage> tool = {{"user", "a"}, {"tool", "b"}};
  try {
    render_chat(tool, tmpl);
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].role"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab
