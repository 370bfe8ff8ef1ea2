#include "analysis/summary.h"
#include "analysis/text_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace {

using testing_data::append_run;
using testing_data::run_info;

struct Fixture {
  std::vector<RunInfo> infos;
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;
  ScenarioInfo scenario;
  Environment env;
};

Fixture two_runs() {
  Fixture f;
  f.infos = {run_info("continuous", "paged", 2, 20), run_info("static", "naive", 2, 20)};
  append_run({f.infos[0], 0.04, 0.015}, 20, 1, f.records, f.steps);
  append_run({f.infos[1], 0.30, 0.030}, 20, 2, f.records, f.steps);
  f.scenario.name = "unit";
  f.scenario.file = "scenarios/unit.yaml";
  f.scenario.seed = 42;
  f.scenario.details = {{"model", "tiny"}, {"dataset", {{"kind", "synthetic"}}}};
  f.env.device = "sim (cost model)";
  f.env.cpu_model = "Test CPU";
  f.env.n_cores = 2;
  f.env.commit = "0123456789abcdef";
  f.env.date = "2026-01-02T03:04:05Z";
  f.env.servelab_version = "0.1.0";
  return f;
}

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> k;
  for (const auto& [key, v] : j.items()) k.push_back(key);
  return k;
}

TEST(Summary, TopLevelAndRunKeysAreDesignMdsContract) {
  const Fixture f = two_runs();
  const Summary s = build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
  const auto j = nlohmann::ordered_json::parse(summary_text(s));
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"schema", "scenario", "environment", "slo", "runs", "report"}));
  EXPECT_EQ(j["schema"], "servelab.summary/1");
  EXPECT_EQ(keys_of(j["environment"]), (std::vector<std::string>{"device", "cpu_model", "n_cores", "commit",
                                                                 "dirty", "date", "servelab_version"}));
  EXPECT_EQ(j["scenario"]["name"], "unit");
  EXPECT_EQ(j["scenario"]["seed"], 42);
  EXPECT_EQ(j["scenario"]["dataset"]["kind"], "synthetic");
  ASSERT_EQ(j["runs"].size(), 2u);
  const auto& run = j["runs"][0];
  const auto rk = keys_of(run);
  const std::vector<std::string> design = {"label", "batching",   "kv",      "backend",
                                           "rate",  "n_requests", "n_failed"};
  EXPECT_EQ(std::vector<std::string>(rk.begin(), rk.begin() + 7), design);
  EXPECT_EQ(rk.back(), "metrics");
  EXPECT_EQ(run["label"], "continuous-paged@2");
  EXPECT_EQ(run["batching"], "continuous");
  EXPECT_EQ(run["kv"], "paged");
  EXPECT_EQ(run["rate"], 2.0);
  EXPECT_EQ(run["n_requests"], 19);  // 20 minus the warm-up
  EXPECT_EQ(run["n_failed"], 1);
  const auto& m = run["metrics"];
  for (const char* d : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "lateness_ms"})
    EXPECT_EQ(keys_of(m[d]), (std::vector<std::string>{"mean", "p50", "p90", "p95", "p99", "p999", "max"}))
        << d;
  for (const char* k : {"request_throughput_rps", "output_throughput_tok_s", "total_throughput_tok_s",
                        "goodput_tok_s", "request_goodput_rps", "slo_attainment"})
    EXPECT_TRUE(m[k].is_number()) << k;
  EXPECT_EQ(keys_of(m["kv_utilization"]), (std::vector<std::string>{"mean", "max"}));
  EXPECT_TRUE(m["kv_utilization"]["mean"].is_number());
}

TEST(Summary, TextRoundTripsByteForByte) {
  const Fixture f = two_runs();
  const Summary s = build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
  const std::string text = summary_text(s);
  const Summary back = nlohmann::ordered_json::parse(text).get<Summary>();
  EXPECT_EQ(summary_text(back), text);
  EXPECT_EQ(back.runs[1].info.strategy_name(), "static-naive");
  EXPECT_EQ(back.runs[1].metrics.n_requests, 19u);
}

TEST(Summary, DoesNotDependOnRecordOrder) {
  Fixture f = two_runs();
  const std::string a =
      summary_text(build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps));
  std::reverse(f.records.begin(), f.records.end());
  std::reverse(f.steps.begin(), f.steps.end());
  const std::string b =
      summary_text(build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps));
  EXPECT_EQ(a, b);
}

TEST(Summary, LoraRunsGetPerAdapterCountsAndLatencies) {
  Fixture f = two_runs();
  for (RequestRecord& r : f.records)
    if (r.run == f.infos[0].label) r.lora = r.id % 3 == 0 ? "" : r.id % 3 == 1 ? "sql" : "chat";
  const Summary s = build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
  ASSERT_EQ(s.runs[0].by_lora.size(), 3u);
  EXPECT_TRUE(s.runs[1].by_lora.empty());  // no record of it names an adapter
  size_t n = 0;
  for (const auto& [name, m] : s.runs[0].by_lora) n += m.n_requests;
  EXPECT_EQ(n, s.runs[0].metrics.n_requests);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(summary_text(s));
  const auto& lora = j["runs"][0]["lora"];
  EXPECT_EQ(keys_of(lora), (std::vector<std::string>{"(base)", "chat", "sql"}));
  EXPECT_TRUE(lora["sql"]["metrics"].contains("ttft_ms"));
  // 20 records, id 0 a warm-up: ids 1, 4, ..., 19 name sql (7 of them).
  EXPECT_EQ(lora["sql"]["n_requests"], 7);
  EXPECT_FALSE(j["runs"][1].contains("lora"));
  EXPECT_EQ(summary_text(j.get<Summary>()), summary_text(s));  // read back as written
}

TEST(Summary, RecordsOfAnUnlistedRunStillGetARun) {
  Fixture f = two_runs();
  RequestRecord r;
  r.run = "mystery";
  r.arrival_s = r.sent_s = 0.0;
  r.first_token_s = r.end_s = 0.1;
  r.token_times_s = {0.1};
  r.output_tokens = 1;
  f.records.push_back(r);
  const Summary s = build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[2].info.label, "mystery");
  EXPECT_EQ(s.runs[2].metrics.n_ok, 1u);
}

TEST(Summary, BadRunInfoNamesTheField) {
  Fixture f = two_runs();
  f.infos[0].batching = "greedy";
  try {
    build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("batching"), std::string::npos) << e.what();
  }
  f = two_runs();
  f.infos[1].label = f.infos[0].label;
  EXPECT_THROW(build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps),
               std::invalid_argument);
}

TEST(Summary, ReaderRejectsAnotherSchema) {
  const std::string path = ::testing::TempDir() + "wrong_schema.json";
  write_text_file(path, R"({"schema": "other/2", "runs": []})");
  try {
    read_summary(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong_schema.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("servelab.summary/1"), std::string::npos) << e.what();
  }
}

TEST(Summary, InfiniteRateIsWrittenAsNullAndReadBack) {
  Fixture f = two_runs();
  for (auto& r : f.records)
    if (r.run == f.infos[0].label) r.run = "burst";
  for (auto& s : f.steps)
    if (s.run == f.infos[0].label) s.run = "burst";
  f.infos[0].label = "burst";
  f.infos[0].mode = RunMode::max;
  f.infos[0].rate = std::numeric_limits<double>::infinity();
  const Summary s = build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
  const auto j = nlohmann::ordered_json::parse(summary_text(s));
  EXPECT_TRUE(j["runs"][0]["rate"].is_null());
  EXPECT_TRUE(std::isinf(j.get<Summary>().runs[0].info.rate));
}

// Issue 6 item 11: every run carries a `mode`; closed-loop, trace and unknown runs keep rate null
// and read back as what they were, not as an infinite-rate ("max") run.
TEST(Summary, ModeSaysWhatKindOfLoadEachRunHad) {
  Fixture f = two_runs();
  f.infos[0].mode = RunMode::closed;
  f.infos[0].concurrency = 8;
  f.infos[0].rate = std::numeric_limits<double>::quiet_NaN();
  f.infos[1].mode = RunMode::max;
  f.infos[1].rate = std::numeric_limits<double>::infinity();
  RequestRecord r;  // a run no RunInfo names: mode unknown
  r.run = "mystery";
  r.first_token_s = r.end_s = 0.1;
  r.token_times_s = {0.1};
  r.output_tokens = 1;
  f.records.push_back(r);
  const Summary s = build_summary(f.scenario, f.env, SloSpec{}, f.infos, f.records, f.steps);
  const std::string text = summary_text(s);
  const auto j = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(j["runs"][0]["mode"], "closed");
  EXPECT_EQ(j["runs"][0]["concurrency"], 8);
  EXPECT_TRUE(j["runs"][0]["rate"].is_null());
  EXPECT_EQ(j["runs"][1]["mode"], "max");
  EXPECT_EQ(j["runs"][2]["mode"], "unknown");
  const Summary back = j.get<Summary>();
  EXPECT_EQ(back.runs[0].info.mode, RunMode::closed);
  EXPECT_TRUE(std::isnan(back.runs[0].info.rate));
  EXPECT_TRUE(std::isinf(back.runs[1].info.rate));
  EXPECT_TRUE(std::isnan(back.runs[2].info.rate));  // was read back as +inf ("max") before
  EXPECT_EQ(summary_text(back), text);
  EXPECT_EQ(format_run_rate(back.runs[0].info), "c8");
  EXPECT_EQ(format_run_rate(back.runs[1].info), "max");
}

}  // namespace
}  // namespace servelab::analysis
