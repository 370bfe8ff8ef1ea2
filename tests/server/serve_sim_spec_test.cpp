// `servelab serve` on the sim backend with a speculative strategy: the engine service runs the
// sim's proposer (drafting priced, each draft accepted at the rates --speculative-config's
// sim_acceptance gives) and /metrics counts the drafts as vLLM's spec_decode counters do.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/backend/make_backend.h"
#include "engine/spec/spec_config.h"
#include "loadgen/sources.h"
#include "tests/server/server_test_util.h"

namespace servelab::server::test {
namespace serve_sim_spec_test {  // named, not anonymous: a unity batch shares one translation unit

/// The value of counter `name` (labelled with the model only) in a /metrics body; -1 when absent.
long long counter(const std::string& body, const std::string& name) {
  const std::string line = "\n" + name + "{model_name=\"tiny\"} ";
  const size_t at = body.find(line);
  if (at == std::string::npos) return -1;
  return std::stoll(body.substr(at + line.size()));
}

TEST(ServeSimSpec, SelfSpeculationOnTheSimDraftsAndAcceptsAtTheGivenRates) {
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "tiny";
  const BackendFactory backends(spec);
  auto engine = std::make_unique<Engine>(tiny_engine_config(), backends.make());
  StrategySpec strategy;
  // The first draft always stands, the second never: the counters must say exactly that.
  strategy.speculative = speculative_config_from_json(
      R"({"method": "self", "num_layers": 1, "num_speculative_tokens": 2, "adaptive": false,
          "sim_acceptance": {"per_position": [1.0, 0.0]}})");
  apply_strategy(*engine, strategy, backends);

  ServerMetrics metrics("tiny");
  IdTokenizer tokenizer(engine->backend().config().vocab_size);
  EngineServiceOptions so;
  so.pace_predicted = true;  // as serve runs the sim: each step takes its predicted time
  EngineService service(std::move(engine), metrics, so);
  ServerOptions o;
  o.port = 0;
  o.model_name = "tiny";
  HttpServer server(o, service, tokenizer, metrics);
  server.start();

  const auto r = post(server.port(), "/v1/completions",
                      R"({"prompt":[5,6,7,8,9,10],"max_tokens":20,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
  EXPECT_EQ(ids_of(j["choices"][0]["text"]).size(), 20u);

  const std::string m = get(server.port(), "/metrics").body;
  const long long drafts = counter(m, "servelab:spec_decode_num_drafts_total");
  const long long drafted = counter(m, "servelab:spec_decode_num_draft_tokens_total");
  const long long accepted = counter(m, "servelab:spec_decode_num_accepted_tokens_total");
  ASSERT_GT(drafts, 0) << m;
  EXPECT_EQ(drafted, 2 * drafts) << "k = 2 every verification (adaptive off)";
  EXPECT_EQ(accepted, drafts) << "the first draft of each verification stands, the second never";
  // Each verification yields its accepted draft and one token of its own: 2 tokens a step after
  // the prefill's first, so 20 tokens take about 10 verifications (fewer drafts near the end).
  EXPECT_GE(drafts, 8);
  EXPECT_LE(drafts, 10);
  EXPECT_NE(m.find("servelab:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"1\"} 0"),
            std::string::npos)
      << m;
}

TEST(ServeSimSpec, SelfOnTheSimWithoutAcceptanceIsRefusedNamingIt) {
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "tiny";
  const BackendFactory backends(spec);
  Engine engine(tiny_engine_config(), backends.make());
  StrategySpec strategy;
  strategy.speculative = speculative_config_from_json(R"({"method": "self", "num_layers": 1})");
  try {
    apply_strategy(engine, strategy, backends);
    ADD_FAILURE() << "self on the sim without sim_acceptance was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sim_acceptance"), std::string::npos) << e.what();
  }
}

}  // namespace serve_sim_spec_test
}  // namespace servelab::server::test
