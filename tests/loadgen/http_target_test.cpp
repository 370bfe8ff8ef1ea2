// `target:` in a scenario: parsed, defaulted and checked with file:line:col messages.
#include <gtest/gtest.h>

#include "loadgen/scenario.h"

namespace servelab {
namespace {

const std::string kWorkload = "workload: {arrival: {process: poisson}, rates: [2], n_requests: 4}\n";

TEST(HttpTarget, ParsesAndNeedsNoStrategies) {
  const Scenario s = load_scenario_text(kWorkload + R"(target:
  urls: [http://a:8000, http://b:8001/v1]
  model: m
  api: chat
  balance: least_outstanding
  headers: {Authorization: Bearer k}
  timeout_s: 5
)", "t.yaml");
  ASSERT_TRUE(s.target);
  EXPECT_EQ(s.target->urls.size(), 2u);
  EXPECT_EQ(s.target->api, TargetApi::chat);
  EXPECT_EQ(s.target->balance, Balance::least_outstanding);
  EXPECT_EQ(s.target->headers.at("Authorization"), "Bearer k");
  EXPECT_EQ(s.target->timeout_s, 5.0);
  ASSERT_EQ(s.strategies.size(), 1u);
  EXPECT_EQ(s.strategies[0].label, "http");
  EXPECT_EQ(load_scenario_text(kWorkload + "target: http://h:1\n", "t.yaml").target->urls[0], "http://h:1");
  // The description names the server driven, not the unused engine defaults.
  const std::string d = describe(load_scenario_text(kWorkload + "target: http://h:1\n", "t.yaml"));
  EXPECT_NE(d.find("target http://h:1"), std::string::npos) << d;
  EXPECT_EQ(d.find(" on cpu"), std::string::npos) << d;
}

TEST(HttpTarget, ErrorsNameTheKeyAndPlace) {
  try {
    load_scenario_text(kWorkload + "target:\n  url: ftp://x\n  api: grpc\n  colour: red\n", "t.yaml");
    FAIL() << "accepted";
  } catch (const ScenarioError& e) {
    const std::string all = e.what();
    EXPECT_NE(all.find("t.yaml:3:8: target.url must start with http://"), std::string::npos) << all;
    EXPECT_NE(all.find("t.yaml:4:8: target.api must be completions or chat (got 'grpc')"), std::string::npos) << all;
    EXPECT_NE(all.find("t.yaml:5:3: unknown key target.colour"), std::string::npos) << all;
  }
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

TEST(HttpTarget, ModelNamedForItsLengthLimitIsNotCheckedAsLoaded) {
  // scenarios/http/vllm-chat.yaml: its model only bounds the lengths; llama3-70b's 280 GB of fp32 weights
  // must not be checked against this machine's memory (nothing is loaded for a remote server).
  const Scenario s = load_scenario_text(kWorkload + "model: {preset: llama3-70b}\nengine: {max_model_len: 4096}\n"
                                        "target: http://h:1\n", "t.yaml");
  EXPECT_EQ(s.engine.max_model_len, 4096);
  EXPECT_NO_THROW(load_scenario(std::string(SERVELAB_SOURCE_DIR) + "/scenarios/http/vllm-chat.yaml"));
}

}  // namespace
}  // namespace servelab
