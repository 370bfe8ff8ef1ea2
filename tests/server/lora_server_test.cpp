// Multi-LoRA over HTTP, as vLLM serves it: the request's `model` picks the adapter, /v1/models
// lists each adapter with its parent, /v1/load_lora_adapter and /v1/unload_lora_adapter work at
// run time, and bad adapters get OpenAI-style 400/404s while the server keeps serving.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/lora/peft.h"
#include "tests/server/server_test_util.h"

namespace servelab::server::test {
namespace lora_server_test {  // named, not anonymous: a unity batch shares one translation unit

using nlohmann::json;
namespace fs = std::filesystem;

/// A temp path of this test alone: ctest runs the tests as parallel processes, and a folder one
/// test rewrites while another maps its safetensors file ends in SIGBUS.
std::string test_tmp_path(const std::string& stem) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + (t ? t->name() : "none") + "_" + std::to_string(::getpid())))
      .string();
}

std::string adapter_dir(const std::string& name, int rank, uint64_t seed) {
  const std::string dir = test_tmp_path("server_lora_" + name);
  write_peft_adapter(dir, random_lora(preset("tiny"), name, rank, 2.0f * rank, {LoraTarget::q, LoraTarget::v, LoraTarget::down}, seed));
  return dir;
}

/// Greedy token ids of a completion of `model` (200 expected).
std::vector<TokenId> complete(int port, const std::string& model) {
  const auto r = post(port, "/v1/completions",
                      R"({"model":")" + model + R"(","prompt":[5,6,7,8,9],"max_tokens":6,"temperature":0,"ignore_eos":true})");
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return {};
  const json j = json::parse(r.body);
  EXPECT_EQ(j["model"], model);
  return ids_of(j["choices"][0]["text"]);
}

std::string error_code(const HttpReply& r) {
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"]["code"].get<std::string>() : "(not an error body: " + r.body + ")";
}

TEST(LoraServer, ModelFieldPicksTheAdapterAndAdaptersLoadAndUnloadAtRunTime) {
  EngineConfig ec = tiny_engine_config();
  ec.lora.enabled = true;
  ec.lora.max_loras = 2;
  ec.lora.max_lora_rank = 8;
  ServerOptions o;
  o.loras = std::make_shared<LoraRegistry>(preset("tiny"), ec.lora);
  o.loras->add("sql", adapter_dir("sql", 8, 1));
  TestServer srv({}, o, ec);

  const json models = json::parse(get(srv.port, "/v1/models").body);
  ASSERT_EQ(models["data"].size(), 2u) << models.dump();
  EXPECT_EQ(models["data"][1]["id"], "sql");
  EXPECT_EQ(models["data"][1]["parent"], "tiny");

  const std::vector<TokenId> base = complete(srv.port, "tiny"), sql = complete(srv.port, "sql");
  ASSERT_EQ(sql.size(), 6u);
  EXPECT_NE(sql, base);                       // the adapter changes the output ...
  EXPECT_EQ(complete(srv.port, "sql"), sql);  // ... the same way each time
  EXPECT_EQ(complete(srv.port, "tiny"), base);

  // Load at run time; then three adapters take turns in two slots.
  auto r = post(srv.port, "/v1/load_lora_adapter", json{{"lora_name", "chat"}, {"lora_path", adapter_dir("chat", 4, 2)}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'chat' added successfully.");
  r = post(srv.port, "/v1/load_lora_adapter", json{{"lora_name", "math"}, {"lora_path", adapter_dir("math", 2, 3)}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<TokenId> chat = complete(srv.port, "chat");
  EXPECT_NE(chat, base);
  EXPECT_NE(complete(srv.port, "math"), chat);
  EXPECT_EQ(complete(srv.port, "sql"), sql);
  EXPECT_EQ(json::parse(get(srv.port, "/v1/models").body)["data"].size(), 4u);

  // Bad adapters: clear 400s, nothing registered.
  r = post(srv.port, "/v1/load_lora_adapter", json{{"lora_name", "big"}, {"lora_path", adapter_dir("big", 16, 4)}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_code(r), "invalid_lora_adapter");
  EXPECT_NE(r.body.find("max_lora_rank = 8"), std::string::npos) << r.body;
  r = post(srv.port, "/v1/load_lora_adapter", json{{"lora_name", "gone"}, {"lora_path", "/nonexistent/adapter"}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("no such folder"), std::string::npos) << r.body;
  r = post(srv.port, "/v1/load_lora_adapter", json{{"lora_name", "sql"}, {"lora_path", adapter_dir("sql", 8, 1)}}.dump());
  EXPECT_EQ(error_code(r), "lora_exists");
  r = post(srv.port, "/v1/load_lora_adapter", R"({"lora_name": "x"})");
  EXPECT_EQ(error_code(r), "missing_field");
  r = post(srv.port, "/v1/load_lora_adapter", "not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(get(srv.port, "/v1/load_lora_adapter").status, 405);

  // Unload: the name then is an unknown model.
  r = post(srv.port, "/v1/unload_lora_adapter", R"({"lora_name": "sql"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "Success: LoRA adapter 'sql' removed successfully.");
  r = post(srv.port, "/v1/completions", R"({"model":"sql","prompt":[5,6],"max_tokens":2})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_code(r), "model_not_found");
  EXPECT_EQ(post(srv.port, "/v1/unload_lora_adapter", R"({"lora_name": "sql"})").status, 404);
  EXPECT_EQ(get(srv.port, "/health").status, 200);
  EXPECT_EQ(complete(srv.port, "chat"), chat);
  ASSERT_TRUE(srv.wait_idle());
  srv.service->check_idle_clean();
  // /metrics carries vLLM's lora_requests_info: idle now, nothing running or waiting, max_lora 2.
  const std::string metrics = get(srv.port, "/metrics").body;
  EXPECT_NE(metrics.find("servelab:lora_requests_info{model_name=\"tiny\",max_lora=\"2\",running_lora_adapters=\"\","
                         "waiting_lora_adapters=\"\"}"),
            std::string::npos)
      << metrics;
  // And servelab's per-adapter counters: sql answered 3 completions of 5 prompt and 6 output
  // tokens (before it was unloaded; the counts stay), chat 2; the base model's are not listed.
  EXPECT_NE(metrics.find("servelab:lora_request_success_total{model_name=\"tiny\",lora_name=\"sql\"} 3\n"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("servelab:lora_prompt_tokens_total{model_name=\"tiny\",lora_name=\"sql\"} 15\n"), std::string::npos);
  EXPECT_NE(metrics.find("servelab:lora_generation_tokens_total{model_name=\"tiny\",lora_name=\"sql\"} 18\n"), std::string::npos);
  EXPECT_NE(metrics.find("servelab:lora_request_success_total{model_name=\"tiny\",lora_name=\"chat\"} 2\n"), std::string::npos);
  EXPECT_EQ(metrics.find("lora_name=\"tiny\""), std::string::npos);
  EXPECT_EQ(metrics.find("lora_name=\"\""), std::string::npos);
}

TEST(LoraServer, WithoutEnableLoraTheRoutesSayItIsOff) {
  TestServer srv;
  const auto r = post(srv.port, "/v1/load_lora_adapter", R"({"lora_name": "a", "lora_path": "/tmp"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_code(r), "lora_disabled");
  EXPECT_EQ(post(srv.port, "/v1/completions", R"({"model":"a","prompt":[5],"max_tokens":1})").status, 404);
}

}  // namespace lora_server_test
}  // namespace servelab::server::test
