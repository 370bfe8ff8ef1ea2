// Plans: seeded and reproducible, with independent streams for times, lengths and token ids.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "loadgen/backend_spec.h"
#include "loadgen/plan.h"
#include "loadgen/sources.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::load_yaml;
using testing_util::write_temp;

Scenario scenario(const std::vector<std::string>& overrides = {}) {
  return load_yaml(
      "seed: 5\n"
      "engine: {max_model_len: 512}\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  arrival: {process: poisson}\n"
      "  rates: [1, 4]\n"
      "  n_requests: 40\n"
      "  warmup_requests: 3\n"
      "  prompt_tokens: {dist: uniform, min: 8, max: 64}\n"
      "  output_tokens: {dist: normal, mean: 30, std: 10, min: 1, max: 60}\n"
      "  shared_prefix_tokens: 6\n",
      overrides);
}

void expect_same_requests(const Plan& a, const Plan& b, bool same_times) {
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].prompt, b.requests[i].prompt) << i;
    EXPECT_EQ(a.requests[i].output_tokens, b.requests[i].output_tokens) << i;
    EXPECT_EQ(a.requests[i].warmup, b.requests[i].warmup) << i;
    if (same_times) {
      EXPECT_EQ(a.requests[i].intended_s, b.requests[i].intended_s) << i;
    }
  }
}

TEST(Plan, SameScenarioSeedAndRateGiveTheSamePlan) {
  const Scenario s = scenario();
  const Plan a = make_plan(s, 4.0), b = make_plan(s, 4.0);
  expect_same_requests(a, b, true);
  const Plan c = make_plan(scenario({"seed=6"}), 4.0);
  EXPECT_NE(a.requests[5].intended_s, c.requests[5].intended_s);
  EXPECT_NE(a.requests[5].prompt, c.requests[5].prompt);
}

TEST(Plan, RateChangesOnlyTheTimes) {
  const Scenario s = scenario();
  const Planner planner(s);
  const Plan slow = planner.make(1.0), fast = planner.make(4.0);
  expect_same_requests(slow, fast, false);
  for (size_t i = 0; i < slow.requests.size(); ++i)
    EXPECT_NEAR(fast.requests[i].intended_s, slow.requests[i].intended_s / 4.0, 1e-9);
  // Another arrival process: again only the times move.
  const Plan gamma = make_plan(scenario({"workload.arrival={process: gamma, cv: 3}"}), 4.0);
  expect_same_requests(gamma, fast, false);
  EXPECT_NE(gamma.requests[5].intended_s, fast.requests[5].intended_s);
}

TEST(Plan, OutputDistributionDoesNotMovePromptsAndViceVersa) {
  const Plan a = make_plan(scenario(), 1.0);
  const Plan b = make_plan(scenario({"workload.output_tokens=7"}), 1.0);
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].prompt, b.requests[i].prompt);
    EXPECT_EQ(b.requests[i].output_tokens, 7);
  }
  const Plan c = make_plan(scenario({"workload.prompt_tokens=9"}), 1.0);
  for (size_t i = 0; i < a.requests.size(); ++i) EXPECT_EQ(a.requests[i].output_tokens, c.requests[i].output_tokens);
}

TEST(Plan, TokensInVocabSharedPrefixAndWarmup) {
  const Scenario s = scenario();
  const Plan p = make_plan(s, 2.0);
  ASSERT_EQ(p.requests.size(), 43u);
  EXPECT_EQ(p.n_warmup, 3);
  EXPECT_EQ(p.n_measured(), 40);
  const std::vector<TokenId> prefix(p.requests[0].prompt.begin(), p.requests[0].prompt.begin() + 6);
  for (const PlannedRequest& r : p.requests) {
    EXPECT_EQ(r.id < 3, r.warmup);
    EXPECT_EQ(p.is_warmup(r.id), r.warmup);
    ASSERT_GE(r.prompt.size(), 6u + 8u);
    ASSERT_LE(r.prompt.size(), 6u + 64u);
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), r.prompt.begin())) << r.id;
    for (TokenId t : r.prompt) {
      ASSERT_GE(t, 2);
      ASSERT_LT(t, s.model.vocab_size);
    }
    EXPECT_GE(r.output_tokens, 1);
    EXPECT_LE(r.output_tokens, 60);
  }
  // The part after the prefix differs between requests.
  EXPECT_NE(std::vector<TokenId>(p.requests[1].prompt.begin() + 6, p.requests[1].prompt.begin() + 14),
            std::vector<TokenId>(p.requests[2].prompt.begin() + 6, p.requests[2].prompt.begin() + 14));
}

TEST(Plan, LengthsThatDoNotFitAreClippedPromptFirst) {
  const Plan p = make_plan(scenario({"engine.max_model_len=50", "workload.output_tokens=30"}), 1.0);
  EXPECT_GT(p.n_clipped, 0);
  for (const PlannedRequest& r : p.requests) {
    EXPECT_LE(static_cast<int>(r.prompt.size()) + r.output_tokens, 50);
    EXPECT_EQ(r.output_tokens, 30);  // the prompt gave way, not the output
  }
}

TEST(Plan, DurationBoundsTheMeasuredRequests) {
  const Scenario s = scenario({"workload.n_requests=null", "workload.duration_s=20"});
  const Plan p = make_plan(s, 5.0);
  ASSERT_GT(p.n_measured(), 60);  // ≈ 100 expected
  ASSERT_LT(p.n_measured(), 140);
  const double t0 = p.requests[3].intended_s;
  for (size_t i = 3; i < p.requests.size(); ++i) EXPECT_LT(p.requests[i].intended_s - t0, 20.0);
}

TEST(Plan, ClosedLoopAndTrace) {
  const Plan c = make_plan(scenario({"workload.arrival=null", "workload.rates=null", "workload.concurrency=4"}), 0.0);
  EXPECT_EQ(c.mode, LoadMode::closed_loop);
  EXPECT_EQ(c.concurrency, 4);
  for (const auto& r : c.requests) EXPECT_EQ(r.intended_s, 0.0);

  write_temp("plan_trace.jsonl",
             "{\"timestamp\": 10, \"prompt_tokens\": 5, \"output_tokens\": 6}\n"
             "{\"timestamp\": 10.25, \"prompt_tokens\": 7, \"output_tokens\": 8}\n"
             "{\"timestamp\": 12, \"prompt_tokens\": 9, \"output_tokens\": 10}\n");
  const Scenario s = load_yaml("strategies: [{batching: continuous}]\nworkload: {trace: plan_trace.jsonl}\n");
  const Plan t = make_plan(s, 123.0);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[1].intended_s, 0.25);
  EXPECT_EQ(t.requests[2].prompt.size(), 9u);
  EXPECT_EQ(t.requests[2].output_tokens, 10);
  const Plan t2 = make_plan(load_yaml("strategies: [{batching: continuous}]\nworkload: {trace: plan_trace.jsonl, duration_s: 1}\n"), 0);
  EXPECT_EQ(t2.requests.size(), 2u);
}

TEST(Plan, DatasetLengthsInPairsLongOnesDropped) {
  write_temp("plan_ds.jsonl",
             "{\"prompt_tokens\": 10, \"output_tokens\": 20}\n"
             "{\"prompt_tokens\": 30, \"output_tokens\": 40}\n"
             "{\"prompt_tokens\": 900, \"output_tokens\": 900}\n");
  const Scenario s = load_yaml(
      "engine: {max_model_len: 512}\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  rates: [1]\n"
      "  n_requests: 20\n"
      "  prompt_tokens: {dataset: plan_ds.jsonl}\n"
      "  output_tokens: {dataset: plan_ds.jsonl}\n");
  const Plan p = make_plan(s, 1.0);
  EXPECT_EQ(p.n_dataset_dropped, 1);
  int seen10 = 0, seen30 = 0;
  for (const auto& r : p.requests) {
    if (r.prompt.size() == 10u) {
      EXPECT_EQ(r.output_tokens, 20);
      ++seen10;
    } else if (r.prompt.size() == 30u) {
      EXPECT_EQ(r.output_tokens, 40);
      ++seen30;
    } else {
      ADD_FAILURE() << "prompt " << r.prompt.size();
    }
  }
  EXPECT_EQ(seen10, 10);  // the shuffled entries are cycled
  EXPECT_EQ(seen30, 10);
}

TEST(Plan, SummaryAndJson) {
  const Scenario s = scenario();
  const Plan p = make_plan(s, 4.0);
  const PlanSummary sum = summarize(p);
  EXPECT_EQ(sum.n_requests, 43);
  EXPECT_EQ(sum.n_warmup, 3);
  EXPECT_NEAR(sum.gaps_s.mean, 0.25, 0.1);
  EXPECT_GE(sum.prompt_tokens.min, 14);
  EXPECT_LE(sum.prompt_tokens.max, 70);
  EXPECT_EQ(sum.duration_s, p.requests.back().intended_s);
  const std::string text = format_plan_summary(p, s.name);
  EXPECT_NE(text.find("@ 4 req/s"), std::string::npos) << text;
  EXPECT_NE(text.find("requests  40 (+3 warm-up)"), std::string::npos) << text;
  EXPECT_EQ(text.find("trace"), std::string::npos) << "an open-loop plan is not a trace replay: " << text;
  const nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j["requests"].size(), 43u);
  EXPECT_EQ(j["requests"][2]["prompt"].get<std::vector<TokenId>>(), p.requests[2].prompt);
  EXPECT_EQ(j["mode"], "open_loop");
}

TEST(PlanLora, ZipfPopularityIsSeededAndSessionsKeepTheirAdapter) {
  const std::string base =
      "seed: 9\n"
      "engine: {max_model_len: 512}\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  rates: [4]\n"
      "  n_requests: 2000\n"
      "  prompt_tokens: {dist: fixed, value: 8}\n"
      "  output_tokens: {dist: fixed, value: 4}\n";
  const Scenario sc = load_yaml(base + "  lora: {count: 4, distribution: zipf, zipf_s: 1.0, base_fraction: 0.2}\n");
  const Plan a = make_plan(sc, 4.0), b = make_plan(sc, 8.0);
  std::map<std::string, int> n;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    ++n[a.requests[i].lora];
    EXPECT_EQ(a.requests[i].lora, b.requests[i].lora) << i;  // the rate moves times only
  }
  // Zipf s = 1 over 4: 1, 1/2, 1/3, 1/4 of 25/12, times 0.8 (the rest is the base model).
  const double expect[4] = {0.384, 0.192, 0.128, 0.096};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(n["lora-" + std::to_string(i)] / 2000.0, expect[i], 0.03) << i;
  EXPECT_NEAR(n[""] / 2000.0, 0.2, 0.03);
  EXPECT_EQ(plan_to_json(a)["requests"][0].value("lora", std::string("(base)")),
            a.requests[0].lora.empty() ? "(base)" : a.requests[0].lora);

  const Scenario ss = load_yaml(base + "  sessions: {turns: 3}\n  lora: {adapters: [sql, chat]}\n");
  const Plan p = make_plan(ss, 4.0);
  std::map<int, std::string> of_session;
  for (const PlannedRequest& r : p.requests) {
    EXPECT_TRUE(r.lora == "sql" || r.lora == "chat") << r.lora;
    auto [it, fresh] = of_session.emplace(r.session, r.lora);
    EXPECT_EQ(it->second, r.lora) << "session " << r.session;
  }

  using testing_util::scenario_errors;
  auto first = [&](const std::string& lora) {
    const auto e = scenario_errors(base + "  lora: " + lora + "\n");
    return e.empty() ? std::string() : e.front();
  };
  EXPECT_NE(first("{adapters: [a], count: 2}").find("needs adapters: [names] or count: N (one of them)"), std::string::npos);
  EXPECT_NE(first("{count: 2, zipf_s: 2}").find("workload.lora.zipf_s applies to distribution: zipf"), std::string::npos);
  EXPECT_NE(first("{adapters: [a, a]}").find("names 'a' twice"), std::string::npos);
  EXPECT_NE(first("{count: 2, max_loras: 4, max_cpu_loras: 2}").find("must be 0 or >= max_loras (4)"), std::string::npos);
  EXPECT_NE(first("{count: 2, distribution: pareto}").find("workload.lora.distribution"), std::string::npos);
  EXPECT_NE(first("{count: 2, group_prompts: maybe}").find("workload.lora.group_prompts"), std::string::npos);
  EXPECT_TRUE(sc.workload.lora.engine_config().group_prompts);  // on by default
  EXPECT_FALSE(load_yaml(base + "  lora: {count: 2, group_prompts: false}\n").workload.lora.engine_config().group_prompts);
  EXPECT_NE(first("{count: 2, admit_when_packed: 1.5}").find("workload.lora.admit_when_packed"), std::string::npos);
  EXPECT_TRUE(sc.workload.lora.engine_config().admit_when_packed);  // on by default
  EXPECT_FALSE(
      load_yaml(base + "  lora: {count: 2, admit_when_packed: false}\n").workload.lora.engine_config().admit_when_packed);
  EXPECT_DOUBLE_EQ(sc.workload.lora.engine_config().admit_wait_s, 0.5);  // the default
  EXPECT_DOUBLE_EQ(load_yaml(base + "  lora: {count: 2, admit_wait_s: 0.05}\n").workload.lora.engine_config().admit_wait_s,
                   0.05);
  EXPECT_NE(first("{count: 2, admit_wait_s: -1}").find("workload.lora.admit_wait_s"), std::string::npos);
  EXPECT_NE(first("{count: 2, admit_wait_s: -1}").find("must be in [0, 3600] seconds"), std::string::npos);
}

TEST(PlanLora, AStrategysOwnLoraDrawsOverThePlansRequests) {
  const std::string head =
      "seed: 9\n"
      "engine: {max_model_len: 512}\n";
  const std::string work =
      "workload:\n"
      "  rates: [4]\n"
      "  n_requests: 300\n"
      "  prompt_tokens: {dist: fixed, value: 8}\n"
      "  output_tokens: {dist: fixed, value: 4}\n"
      "  lora: {count: 4, distribution: zipf}\n";
  const Scenario sc = load_yaml(head +
                                "strategies:\n"
                                "  - {label: none, batching: continuous, lora: none}\n"
                                "  - {label: own, batching: continuous, lora: {count: 4, distribution: zipf}}\n"
                                "  - {label: many, batching: continuous, lora: {count: 64, base_fraction: 0.5}}\n"
                                "  - {label: workload, batching: continuous}\n" +
                                work);
  const Plan p = make_plan(sc, 4.0);
  EXPECT_EQ(&strategy_lora(sc, sc.strategies[3]), &sc.workload.lora);
  EXPECT_FALSE(strategy_lora(sc, sc.strategies[0]).enabled());
  // the same spec as the workload's draws the same adapters: the planner draws with it too
  const Plan own = strategy_plan(p, sc.strategies[1]), none = strategy_plan(p, sc.strategies[0]);
  const Plan many = strategy_plan(p, sc.strategies[2]), same = strategy_plan(p, sc.strategies[3]);
  int base_in_many = 0;
  for (size_t i = 0; i < p.requests.size(); ++i) {
    EXPECT_EQ(own.requests[i].lora, p.requests[i].lora) << i;
    EXPECT_EQ(same.requests[i].lora, p.requests[i].lora) << i;
    EXPECT_TRUE(none.requests[i].lora.empty()) << i;
    EXPECT_EQ(many.requests[i].intended_s, p.requests[i].intended_s) << i;  // only the adapters differ
    base_in_many += many.requests[i].lora.empty();
  }
  EXPECT_NEAR(base_in_many / 300.0, 0.5, 0.1);

  using testing_util::scenario_errors;
  auto first = [&](const std::string& lora) {
    const auto e = scenario_errors(head + "strategies: [{batching: continuous, lora: " + lora + "}]\n" + work);
    return e.empty() ? std::string() : e.front();
  };
  EXPECT_NE(first("maybe").find("strategies[0].lora must be none or a map of workload.lora's keys (got 'maybe')"),
            std::string::npos) << first("maybe");
  EXPECT_NE(first("{count: 0}").find("strategies[0].lora.count"), std::string::npos) << first("{count: 0}");
  EXPECT_NE(first("{count: 2, colour: red}").find("strategies[0].lora"), std::string::npos);
  // adapters need continuous batching; the default label names a strategy's own adapters
  const auto e = scenario_errors(head + "strategies: [{batching: static, lora: {count: 2}}]\n" + work);
  ASSERT_FALSE(e.empty());
  EXPECT_NE(e.front().find("strategies[0].lora"), std::string::npos) << e.front();
  EXPECT_NE(e.front().find("strategies[0].lora needs continuous batching (strategy static-paged-lora2 is static)"),
            std::string::npos) << e.front();
  const auto w = scenario_errors(head + "strategies: [{batching: static}]\n" + work);
  ASSERT_FALSE(w.empty());
  EXPECT_NE(w.front().find("workload.lora"), std::string::npos) << w.front();
  EXPECT_NE(w.front().find("give it lora: none"), std::string::npos) << w.front();
  EXPECT_TRUE(scenario_errors(head + "strategies: [{batching: static, lora: none}]\n" + work).empty());
  const Scenario labelled = load_yaml(head + "strategies: [{batching: continuous, lora: none}, "
                                      "{batching: continuous, lora: {count: 8}}]\n" + work);
  EXPECT_EQ(labelled.strategies[0].label, "continuous-paged-base");
  EXPECT_EQ(labelled.strategies[1].label, "continuous-paged-lora8");
}

}  // namespace
}  // namespace servelab
