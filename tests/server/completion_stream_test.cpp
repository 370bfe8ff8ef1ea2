#include <gtest/gtest.h>

#include "server/completion_stream.h"

namespace servelab::server {
namespace {

/// One byte per id (ids are bytes), so UTF-8 characters can be split over tokens.
class ByteIds final : public Tokenizer {
 public:
  std::string name() const override { return "b"; }
  std::vector<TokenId> encode(std::string_view t, bool) const override {
    std::vector<TokenId> o;
    for (unsigned char c : t) o.push_back(c);
    return o;
  }
  std::string decode(std::span<const TokenId> ids, bool) const override {
    std::string s;
    for (TokenId i : ids) s += static_cast<char>(i);
    return s;
  }
  int vocab_size() const override { return 256; }
  std::optional<TokenId> token_id(std::string_view) const override { return std::nullopt; }
  std::optional<TokenId> eos_id() const override { return std::nullopt; }
  std::optional<TokenId> bos_id() const override { return std::nullopt; }
};

std::vector<std::pair<int, TokenId>> toks(const std::string& s) {
  std::vector<std::pair<int, TokenId>> o;
  for (unsigned char c : s) o.emplace_back(0, c);
  return o;
}

/// Every text delta of an SSE string, concatenated.
std::string texts(const std::string& sse) {
  std::string out;
  for (size_t i = sse.find("\"text\":\""); i != std::string::npos; i = sse.find("\"text\":\"", i + 1)) {
    const size_t start = i + 8;
    out += sse.substr(start, sse.find('"', start) - start);
  }
  return out;
}

TEST(CompletionStream, StopStringCutsTextAndIsNeverStreamed) {
  ByteIds tok;
  CompletionParams p;
  p.stream = true;
  p.stop = {"END"};
  CompletionStream cs(p, tok, "cmpl-1", "m", 0, 3, "");
  std::string sse;
  for (const auto& t : toks("abcEN")) sse += cs.on_tokens({t});
  EXPECT_FALSE(cs.stopped());
  EXPECT_EQ(texts(sse), "abc");  // "EN" is held back: it may become the stop string
  sse += cs.on_tokens(toks("Dxyz"));
  EXPECT_TRUE(cs.stopped());
  EXPECT_EQ(texts(sse), "abc");
  EXPECT_NE(sse.find("\"finish_reason\":\"stop\""), std::string::npos);
  FinishedRequest f;
  f.reason = FinishReason::aborted;
  const std::string end = cs.on_finished({}, f);
  EXPECT_EQ(end.find("finish_reason\":\"abort"), std::string::npos);
  EXPECT_NE(end.find("data: [DONE]"), std::string::npos);
}

TEST(CompletionStream, SplitUtf8IsHeldUntilComplete) {
  ByteIds tok;
  CompletionParams p;
  p.stream = true;
  CompletionStream cs(p, tok, "cmpl-1", "m", 0, 1, "");
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(texts(cs.on_tokens(toks(euro.substr(0, 1)))), "");
  EXPECT_EQ(texts(cs.on_tokens(toks(euro.substr(1, 1)))), "");
  EXPECT_EQ(texts(cs.on_tokens(toks(euro.substr(2, 1)))), euro);
}

// The real tokenizers' decode() replaces a partial character by U+FFFD, so the stream must join
// raw token bytes before decoding: decoding each token alone turned one "\xC3\xA9" into two
// U+FFFD (a string the grammar kept within maxLength came out longer; issue 30).
TEST(CompletionStream, SplitUtf8IsHeldWithARealByteTokenizer) {
  const auto tok = make_byte_tokenizer(512, 1);
  const std::string text = "a\xC3\xA9" "b\xE2\x82\xAC" "\xF0\x9F\x98\x80" "c";  // split: \x eats hex letters
  for (const bool stream : {true, false}) {
    CompletionParams p;
    p.stream = stream;
    CompletionStream cs(p, *tok, "cmpl-1", "m", 0, 1, "");
    std::string sse;
    for (const auto& t : toks(text)) sse += cs.on_tokens({t});
    FinishedRequest f;
    f.reason = FinishReason::length;
    sse += cs.on_finished({}, f);
    EXPECT_EQ(sse.find("\xEF\xBF\xBD"), std::string::npos) << sse;  // no U+FFFD anywhere
    EXPECT_NE(stream ? texts(sse).find(text) : sse.find(text), std::string::npos) << sse;
  }
}

TEST(CompletionStream, TrulyInvalidBytesStillBecomeReplacementCharacters) {
  const auto tok = make_byte_tokenizer(512, 1);
  CompletionParams p;
  p.stream = true;
  CompletionStream cs(p, *tok, "cmpl-1", "m", 0, 1, "");
  std::string sse = cs.on_tokens(toks("x\x80y\xC3"));  // a stray continuation byte, then a lead
  FinishedRequest f;
  f.reason = FinishReason::length;
  sse += cs.on_finished({}, f);  // the lead never completed
  EXPECT_EQ(texts(sse), "x\xEF\xBF\xBDy\xEF\xBF\xBD") << sse;
}

TEST(CompletionStream, NonStreamedBodyHasUsageAndChoices) {
  ByteIds tok;
  CompletionParams p;
  p.n = 2;
  CompletionStream cs(p, tok, "cmpl-9", "m", 5, 4, "");
  cs.on_tokens({{0, 'h'}, {1, 'y'}});
  FinishedRequest f;
  f.reason = FinishReason::length;
  const std::string body = cs.on_finished({{0, 'i'}, {1, 'o'}}, f);
  EXPECT_NE(body.find("\"text\":\"hi\""), std::string::npos) << body;
  EXPECT_NE(body.find("\"text\":\"yo\""), std::string::npos) << body;
  EXPECT_NE(body.find("\"completion_tokens\":4"), std::string::npos) << body;
  EXPECT_NE(body.find("\"prompt_tokens\":4"), std::string::npos) << body;
}

TEST(CompletionStream, StreamedEventsAreExactOpenAiChunks) {
  // The byte layout clients parse (built without temporaries since the HTTP driver benchmark).
  ByteIds tok;
  CompletionParams p;
  p.stream = true;
  p.include_usage = true;
  FinishedRequest f;
  f.reason = FinishReason::length;
  {
    CompletionStream cs(p, tok, "cmpl-3", "m\"x", 7, 2, "");
    EXPECT_EQ(cs.stream_start(), "");
    const std::string head = R"(data: {"id":"cmpl-3","object":"text_completion","created":7,"model":"m\"x","choices":)";
    EXPECT_EQ(cs.on_tokens(toks("a\n")),
              head + R"([{"index":0,"text":"a","logprobs":null,"finish_reason":null}],"usage":null})" "\n\n" + head +
                  R"([{"index":0,"text":"\n","logprobs":null,"finish_reason":null}],"usage":null})" "\n\n");
    EXPECT_EQ(cs.on_finished(toks("b"), f),
              head + R"([{"index":0,"text":"b","logprobs":null,"finish_reason":"length"}],"usage":null})" "\n\n" + head +
                  R"([],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}})" "\n\n"
                  "data: [DONE]\n\n");
  }
  p.api = ApiKind::chat;
  p.include_usage = false;
  CompletionStream cs(p, tok, "chatcmpl-4", "m", 8, 1, "");
  const std::string head = R"(data: {"id":"chatcmpl-4","object":"chat.completion.chunk","created":8,"model":"m","choices":)";
  EXPECT_EQ(cs.stream_start(),
            head + R"([{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})" "\n\n");
  EXPECT_EQ(cs.on_tokens(toks("h")),
            head + R"([{"index":0,"delta":{"content":"h"},"logprobs":null,"finish_reason":null}]})" "\n\n");
  EXPECT_EQ(cs.on_finished({}, f),
            head + R"([{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]})" "\n\n" "data: [DONE]\n\n");
}

}  // namespace
}  // namespace servelab::server
