#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/lora/lora_adapter.h"
#include "loadgen/http/request_body.h"

namespace servelab::http_load {
namespace {

/// The body as an nlohmann object would dump it (how request_body built it before it wrote the
/// bytes directly for speed).
std::string reference_body(const Request& r, const TargetSpec& t, const Tokenizer* tokenizer) {
  nlohmann::json j;
  if (!t.model.empty()) j["model"] = t.model;
  if (t.api == TargetApi::chat)
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt_text(r.prompt, tokenizer)}}});
  else if (tokenizer) j["prompt"] = prompt_text(r.prompt, tokenizer);
  else j["prompt"] = r.prompt;
  const SamplingParams& sp = r.sampling;
  j["max_tokens"] = sp.max_tokens;
  j["ignore_eos"] = sp.ignore_eos;
  j["temperature"] = sp.temperature;
  if (sp.top_p < 1.0f) j["top_p"] = sp.top_p;
  if (sp.top_k > 0) j["top_k"] = sp.top_k;
  j["seed"] = sp.seed & 0x7fffffffffffffffull;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TEST(HttpRequestBody, SameBytesAsTheJsonObject) {
  Request r;
  r.prompt = {0, 5, 63, 64, 1000, -1};
  TargetSpec t;
  for (int k = 0; k < 16; ++k) {
    r.sampling.max_tokens = 1 + k * 17;
    r.sampling.ignore_eos = k % 2;
    r.sampling.temperature = k % 3 == 0 ? 0.0f : 0.7f * static_cast<float>(k);
    r.sampling.top_p = k % 4 == 0 ? 1.0f : 0.95f;
    r.sampling.top_k = k % 5 == 0 ? 0 : 40;
    r.sampling.seed = k % 2 ? 0xfedcba9876543210ull * static_cast<uint64_t>(k) : static_cast<uint64_t>(k);
    t.api = k % 2 ? TargetApi::chat : TargetApi::completions;
    t.model = k % 3 == 1 ? "" : k % 3 == 2 ? "meta-llama/Llama-3.1-8B" : "m\"odel\xE2\x82\xAC\n";
    r.prompt.push_back(k * 7);
    EXPECT_EQ(request_body(r, t, nullptr), reference_body(r, t, nullptr)) << "case " << k;
  }
}

TEST(HttpRequestBody, ALoraRequestNamesItsAdapterAsTheModel) {
  Request r;
  r.prompt = {5, 6};
  TargetSpec t;
  t.model = "meta-llama/Llama-2-7b-hf";
  auto a = std::make_shared<LoraAdapter>();
  a->name = "sql-lora";
  EXPECT_EQ(nlohmann::json::parse(request_body(r, t, nullptr))["model"], "meta-llama/Llama-2-7b-hf");
  r.lora = a;
  EXPECT_EQ(nlohmann::json::parse(request_body(r, t, nullptr))["model"], "sql-lora");
  t.model.clear();
  EXPECT_EQ(nlohmann::json::parse(request_body(r, t, nullptr))["model"], "sql-lora");
}

}  // namespace
}  // namespace servelab::http_load
