#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loadgen/http/openai_chunk.h"
#include "loadgen/http/sse_parser.h"

namespace servelab::http_load {
namespace {

std::vector<std::string> parse_pieces(const std::vector<std::string>& pieces) {
  std::vector<std::string> events;
  SseParser p([&](std::string_view d) { events.emplace_back(d); });
  for (const auto& piece : pieces) p.feed(piece);
  p.finish();
  return events;
}

const std::string kStream =
    ": keep-alive comment\r\n"
    "data: {\"a\":1}\r\n\r\n"
    "event: message\n"
    "data: line one\n"
    "data:line two\n\n"
    "id: 7\r"
    "data: cr only\r\r"
    "data: \xE2\x82\xAC euro\n\n"
    "retry: 10\n\n"          // no data: no event
    "data: [DONE]\n\n";
const std::vector<std::string> kEvents = {"{\"a\":1}", "line one\nline two", "cr only", "\xE2\x82\xAC euro", "[DONE]"};

TEST(HttpSseParser, WholeStream) { EXPECT_EQ(parse_pieces({kStream}), kEvents); }

TEST(HttpSseParser, SplitAtEveryBytePosition) {
  for (size_t i = 0; i <= kStream.size(); ++i)
    EXPECT_EQ(parse_pieces({kStream.substr(0, i), kStream.substr(i)}), kEvents) << "split at " << i;
  for (size_t i = 0; i + 1 < kStream.size(); i += 3)
    for (size_t j = i + 1; j <= kStream.size(); j += 5)
      EXPECT_EQ(parse_pieces({kStream.substr(0, i), kStream.substr(i, j - i), kStream.substr(j)}), kEvents)
          << "splits at " << i << ", " << j;
}

TEST(HttpSseParser, ByteByByte) {
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.emplace_back(1, c);
  EXPECT_EQ(parse_pieces(bytes), kEvents);
}

TEST(HttpSseParser, LastEventWithoutBlankLineIsKeptAtEnd) {
  EXPECT_EQ(parse_pieces({"data: x\n\ndata: [DONE]"}), (std::vector<std::string>{"x", "[DONE]"}));
}

TEST(HttpOpenAiChunk, ServerQuirks) {
  // vLLM/SGLang: usage only in the last chunk, with no choices.
  auto u = interpret_chunk(R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13}})");
  EXPECT_FALSE(u.token);
  EXPECT_EQ(*u.completion_tokens, 9);
  EXPECT_EQ(*u.prompt_tokens, 4);
  // Chat opens with a role-only delta: not a token.
  EXPECT_FALSE(interpret_chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})").token);
  // An empty delta before the end is a token the server has not decoded yet.
  EXPECT_TRUE(interpret_chunk(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})").token);
  // A bare finish marker is not.
  auto fin = interpret_chunk(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})");
  EXPECT_FALSE(fin.token);
  EXPECT_EQ(*fin.finish_reason, "length");
  // Several tokens in one chunk (TGI, llama.cpp): one chunk, its bytes counted.
  auto many = interpret_chunk(R"({"choices":[{"index":0,"delta":{"content":"three words here"}}]})");
  EXPECT_TRUE(many.token);
  EXPECT_EQ(many.text_bytes, 16u);
  EXPECT_TRUE(interpret_chunk("[DONE]").done);
  EXPECT_TRUE(interpret_chunk("{\"choices\": [").malformed);
  EXPECT_EQ(interpret_chunk(R"({"error":{"message":"boom","code":500}})").error, "boom");
}

TEST(HttpOpenAiChunk, FastReaderAgreesWithNlohmannOnValidity) {
  const char* cases[] = {
      R"({"choices":[{"text":"a\"b\\c\u00e9","finish_reason":null}]})",
      R"({"choices":[{"text":"x"}],"usage":null,"extra":[1,2.5e3,-0.1,true,false,null,{"k":[]}]})",
      R"(  {"a":{}}  )", R"({})", R"({"choices":[]})",
      R"({"choices":[{"text":"x"}]} trailing)", R"({"choices":[{"text":"x}]})", R"({"choices":[{"text":"\q"}]})",
      R"({"choices":[{"text":"\u12"}]})", R"({"a":01})", R"({"a":1.})", R"({"a":-})", R"({"a":tru})", R"({"a" 1})",
      R"({"a":1,})", R"([1,2])", R"("str")", "{\"a\":\"\x01\"}", R"({"a":[1,]})", R"({"a":1}})", "",
      R"({"a":"\ud83d\ude00"})", R"({"a":"\ud83d"})", R"({"a":"\ude00"})", "{\"a\":\"\xE2\x82\xAC\"}",
      "{\"a\":\"\xE2\x82\"}", "{\"a\":\"\xC0\xAF\"}", "{\"a\":\"\xED\xA0\x80\"}", "{\"in\x9b\x87" "d\":1}",
  };
  for (const char* c : cases) {
    const std::string_view d(c);
    const auto j = nlohmann::json::parse(d.begin(), d.end(), nullptr, false);
    const bool valid = !j.is_discarded() && j.is_object();
    EXPECT_EQ(interpret_chunk(d).malformed, !valid) << c;
  }
}

}  // namespace
}  // namespace servelab::http_load
