// Serve + load over loopback: the same plan in-process and over HTTP gives the same token
// counts, and greedy decoding the same tokens; a scenario with `target:` runs through the sweep.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "loadgen/http/http_driver.h"
#include "loadgen/plan.h"
#include "loadgen/sources.h"
#include "loadgen/sweep.h"
#include "tests/server/server_test_util.h"

namespace servelab::server::test {
namespace {

Scenario e2e_scenario(const std::string& target_url = "") {
  std::string yaml = R"(
name: e2e
seed: 11
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 8, max_model_len: 512}
strategies:
  - {label: cp, batching: continuous, max_num_seqs: 8, max_num_batched_tokens: 1024, kv: {kind: paged}}
workload:
  arrival: {process: poisson}
  rates: [40]
  n_requests: 12
  prompt_tokens: {dist: uniform, min: 8, max: 48}
  output_tokens: {dist: uniform, min: 2, max: 12}
)";
  if (!target_url.empty()) yaml += "target: {url: " + target_url + ", timeout_s: 60}\n";
  return load_scenario_text(yaml, "e2e.yaml");
}

TEST(ServerE2e, SamePlanInProcessAndOverHttpGivesSameCounts) {
  const Scenario sc = e2e_scenario();
  const Plan plan = make_plan(sc, 40);

  std::map<uint64_t, RequestRecord> local, remote;
  {
    Engine engine(engine_config(sc, sc.strategies[0]), tiny_backend(sc.seed));
    OpenLoopSource source(plan);
    SteadyClock clock;
    RecordSinks sinks;
    sinks.on_record = [&](const RequestRecord& r) { local[r.id] = r; };
    drive_in_process(engine, source, clock, "local", sinks);
  }
  TestServer srv({}, {}, engine_config(sc, sc.strategies[0]), sc.seed);
  {
    OpenLoopSource source(plan);
    http_load::HttpDriverOptions o;
    o.target.urls = {"http://127.0.0.1:" + std::to_string(srv.port)};
    RecordSinks sinks;
    sinks.on_record = [&](const RequestRecord& r) { remote[r.id] = r; };
    http_load::drive_http(source, o, "http", sinks);
  }
  ASSERT_EQ(local.size(), plan.requests.size());
  ASSERT_EQ(remote.size(), plan.requests.size());
  for (const auto& [id, l] : local) {
    const RequestRecord& r = remote.at(id);
    EXPECT_EQ(r.status, RecordStatus::ok) << r.error;
    EXPECT_EQ(r.output_tokens, l.output_tokens) << id;
    EXPECT_EQ(r.prompt_tokens, l.prompt_tokens) << id;
    EXPECT_EQ(static_cast<int>(r.token_times_s.size()), r.output_tokens) << id;  // one chunk per token
  }
}

TEST(ServerE2e, GreedyTokensMatchTheEngine) {
  const Scenario sc = e2e_scenario();
  const Plan plan = make_plan(sc, 40);
  TestServer srv({}, {}, engine_config(sc, sc.strategies[0]), sc.seed);
  Engine engine(engine_config(sc, sc.strategies[0]), tiny_backend(sc.seed));
  for (size_t i = 0; i < 4; ++i) {
    const Request req = to_request(plan.requests[i], sc.seed);  // greedy
    ASSERT_FALSE(engine.add(req, 0.0));
    std::vector<TokenId> expected;
    while (engine.has_work())
      for (const FinishedRequest& f : engine.step(0.0).finished) expected = f.outputs[0];
    nlohmann::json body = {{"prompt", req.prompt}, {"max_tokens", req.sampling.max_tokens}, {"temperature", 0},
                           {"ignore_eos", true}};
    const auto full = post(srv.port, "/v1/completions", body.dump());
    ASSERT_EQ(full.status, 200) << full.body;
    EXPECT_EQ(ids_of(nlohmann::json::parse(full.body)["choices"][0]["text"]), expected) << "request " << i;
    body["stream"] = true;
    const auto streamed = post(srv.port, "/v1/completions", body.dump());
    std::string text;
    for (size_t p = 0; (p = streamed.body.find("\"text\":\"", p)) != std::string::npos; p += 8)
      text += streamed.body.substr(p + 8, streamed.body.find('"', p + 8) - p - 8);
    EXPECT_EQ(ids_of(text), expected) << "request " << i << " streamed";
  }
}

TEST(ServerE2e, ScenarioWithTargetRunsThroughTheSweep) {
  TestServer srv;
  const Scenario sc = e2e_scenario("http://127.0.0.1:" + std::to_string(srv.port));
  ASSERT_TRUE(sc.target);
  const std::string dir = ::testing::TempDir() + "/servelab_e2e_sweep";
  std::filesystem::remove_all(dir);
  SweepOptions opts;
  opts.out_dir = dir;
  const SweepOutcome out = run_sweep(sc, opts);
  ASSERT_EQ(out.records.size(), 12u);
  for (const auto& r : out.records) EXPECT_EQ(r.status, RecordStatus::ok) << r.error;
  EXPECT_EQ(read_records(dir + "/records.jsonl").size(), 12u);
  EXPECT_EQ(out.records[0].run, "cp@40");
}

}  // namespace
}  // namespace servelab::server::test
