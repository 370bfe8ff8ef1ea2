#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/request_parse.h"

namespace servelab::server {
namespace {

/// The param an invalid body is rejected with.
std::string rejected_param(const std::string& body, ApiKind api = ApiKind::completions) {
  try {
    parse_completion_request(body, api);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.param.empty() ? "<none>" : e.param;
  }
  return "<accepted>";
}

TEST(RequestParse, CompletionFields) {
  const auto p = parse_completion_request(
      R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0,"top_p":0.5,"top_k":-1,"seed":3,"n":2,
          "stop":["a","bc"],"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"user":"x"})",
      ApiKind::completions);
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(*p.prompt_text, "hi");
  EXPECT_EQ(*p.max_tokens, 5);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(*p.seed, 3u);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(p.ignore_eos && p.stream && p.include_usage);
}

TEST(RequestParse, PromptForms) {
  EXPECT_EQ(*parse_completion_request(R"({"prompt":[1,2,3]})", ApiKind::completions).prompt_ids,
            (std::vector<TokenId>{1, 2, 3}));
  EXPECT_EQ(*parse_completion_request(R"({"prompt":[[4,5]]})", ApiKind::completions).prompt_ids,
            (std::vector<TokenId>{4, 5}));
  EXPECT_EQ(*parse_completion_request(R"({"prompt":["x"]})", ApiKind::completions).prompt_text, "x");
  const auto chat = parse_completion_request(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})",
      ApiKind::chat);
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[1].content, "ab");
  EXPECT_EQ(parse_completion_request(R"({"messages":[{"role":"user","content":"q"}],"max_completion_tokens":7})",
                                     ApiKind::chat).max_tokens, 7);
}

TEST(RequestParse, ErrorsNameTheField) {
  EXPECT_EQ(rejected_param("{not json"), "<none>");
  EXPECT_EQ(rejected_param("[1]"), "<none>");
  EXPECT_EQ(rejected_param("{}"), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt":5})"), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt":[]})"), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt":["a","b"]})"), "prompt");
  EXPECT_EQ(rejected_param(R"({"prompt":[1,-2]})"), "prompt[1]");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","max_tokens":0})"), "max_tokens");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","max_tokens":1.5})"), "max_tokens");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","max_tokens":"5"})"), "max_tokens");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","temperature":-1})"), "temperature");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","top_p":0})"), "top_p");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","n":0})"), "n");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","n":1000})"), "n");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","stop":[1]})"), "stop[0]");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","stream":"yes"})"), "stream");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","stream_options":{"include_usage":true}})"), "stream_options");
  EXPECT_EQ(rejected_param(R"({"prompt":"x","model":3})"), "model");
  EXPECT_EQ(rejected_param(R"({"messages":[]})", ApiKind::chat), "messages");
  EXPECT_EQ(rejected_param(R"({"messages":[{"content":"x"}]})", ApiKind::chat), "messages[0].role");
  EXPECT_EQ(rejected_param(R"({"messages":[{"role":"robot","content":"x"}]})", ApiKind::chat), "messages[0].role");
  EXPECT_EQ(rejected_param(R"({"messages":[{"role":"user"}]})", ApiKind::chat), "messages[0].content");
  EXPECT_EQ(rejected_param(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", ApiKind::chat),
            "messages[0].content[0].type");
}

TEST(RequestParse, ErrorBodyIsOpenAiShaped) {
  try {
    parse_completion_request(R"({"prompt":"x","max_tokens":-3})", ApiKind::completions);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(error_body(e),
              R"J({"error":{"code":"invalid_value","message":"max_tokens: must be an integer in [1, 16777216] (got -3)","param":"max_tokens","type":"invalid_request_error"}})J");
  }
}

}  // namespace
}  // namespace servelab::server
