// The server's own state beside the client's latencies: server_metrics.jsonl and steps.jsonl read
// into one series, drawn on the client's time axis (plots server_state_<strategy>).
#include "analysis/server_state.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/report.h"
#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace server_state_test {  // named, not anonymous: a unity batch shares one translation unit

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("servelab_server_state_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

/// Lines as loadgen/http/server_metrics.cpp writes them: two replicas, the second without a KV
/// gauge, preemption counters that started before the run.
const char* kScrapes =
    R"({"run":"http@4","url":"http://a:8000","t_s":0.25,"engine":"vLLM","running":2,"waiting":0,"kv_usage":0.10,"preemptions":5,"ttft_count":10,"ttft_sum_s":1.0}
{"run":"http@4","url":"http://b:8000","t_s":0.26,"engine":"vLLM","running":1,"waiting":3,"preemptions":0,"ttft_count":0,"ttft_sum_s":0}
{"run":"other@1","url":"http://a:8000","t_s":0.3,"running":99}
{"run":"http@4","url":"http://a:8000","t_s":0.50,"engine":"vLLM","running":4,"waiting":2,"kv_usage":0.30,"preemptions":7,"ttft_count":12,"ttft_sum_s":1.5}
)";

std::vector<ServerSample> scrapes(const std::string& dir) {
  const std::string path = dir + "/server_metrics.jsonl";
  std::ofstream(path) << kScrapes;
  return read_server_samples(path);
}

TEST(ServerState, ScrapesSumReplicasAndCountFromTheRunsStart) {
  const auto samples = scrapes(fresh_dir("scrapes"));
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_TRUE(std::isnan(samples[1].kv_usage));  // not exported: missing, not 0
  const auto s = server_state_from_samples(samples, "http@4");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0].running, 2);
  EXPECT_DOUBLE_EQ(s[0].kv_pct, 10);
  EXPECT_DOUBLE_EQ(s[0].preemptions, 0);  // 5 before the run
  EXPECT_DOUBLE_EQ(s[1].running, 3);      // a's 2 + b's 1
  EXPECT_DOUBLE_EQ(s[1].waiting, 3);
  EXPECT_DOUBLE_EQ(s[1].kv_pct, 10);      // only a exports KV
  EXPECT_DOUBLE_EQ(s[2].t_s, 0.5);
  EXPECT_DOUBLE_EQ(s[2].running, 5);      // a's 4 + b's 1
  EXPECT_DOUBLE_EQ(s[2].waiting, 5);
  EXPECT_NEAR(s[2].kv_pct, 30, 1e-9);
  EXPECT_DOUBLE_EQ(s[2].preemptions, 2);  // 7 − 5
  EXPECT_NEAR(s[2].ttft_ms, 250, 1e-9);   // (1.5 − 1.0) s over 2 new observations
  EXPECT_TRUE(std::isnan(s[0].ttft_ms));  // no interval before the first scrape
}

TEST(ServerState, StepsGiveTheEngineStateAfterEachStep) {
  std::vector<StepRecord> steps(2);
  for (auto& st : steps) st.run = "cp@2";
  steps[0].start_s = 0.1, steps[0].duration_s = 0.02, steps[0].n_running = 3, steps[0].n_waiting = 4;
  steps[0].n_preempted = 1, steps[0].kv_capacity = 1000, steps[0].kv_stored = 200, steps[0].kv_reserved = 100;
  steps[1] = steps[0];
  steps[1].start_s = 0.2, steps[1].n_preempted = 2, steps[1].kv_internal_frag = 100;
  const auto s = server_state_from_steps(steps, "cp@2");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s[0].t_s, 0.12);
  EXPECT_DOUBLE_EQ(s[0].running, 3);
  EXPECT_DOUBLE_EQ(s[0].waiting, 4);
  EXPECT_DOUBLE_EQ(s[0].kv_pct, 30);
  EXPECT_DOUBLE_EQ(s[1].kv_pct, 40);
  EXPECT_DOUBLE_EQ(s[1].preemptions, 3);
}

TEST(ServerState, MalformedLineNamesFileAndLine) {
  const std::string dir = fresh_dir("bad");
  std::ofstream(dir + "/server_metrics.jsonl") << R"({"run":"x","t_s":-1})" << "\n{}\n";
  try {
    read_server_samples(dir + "/server_metrics.jsonl");
    FAIL() << "accepted a negative time";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("server_metrics.jsonl:1"), std::string::npos) << e.what();
  }
}

/// An HTTP run's folder: records of one run, no steps, the scrapes beside them.
ReportInput http_run(const std::string& dir) {
  ReportInput in;
  in.scenario.name = "http";
  in.runs.push_back(testing_data::run_info("", "", 4, 24));
  in.runs.back().label = "http@4";
  in.runs.back().strategy = "http";
  in.runs.back().backend = "http";
  std::vector<StepRecord> unused;
  testing_data::append_run({in.runs.back(), 0.05, 0.02}, 24, 11, in.records, unused);
  in.server_samples = scrapes(dir);
  return in;
}

TEST(ServerState, HttpRunGetsTheFigureFromItsScrapes) {
  const std::string dir = fresh_dir("http_dat");
  ReportOptions o;
  o.plot.gnuplot = "/bin/true";  // data files only
  write_reports(dir, http_run(dir), o);
  std::ifstream in(dir + "/plots/server_state_http.dat");
  ASSERT_TRUE(in) << "no server-state data";
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("(its /metrics)"), std::string::npos) << text;
  EXPECT_NE(text.find("\n0.5 5 5 30 2 250\n"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(dir + "/plots/ttft_time_http.dat"));  // the client panel's data
}

TEST(ServerState, DrawnInTheHtmlAndReadBackFromTheFolder) {
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("http_svg");
  const ReportInput in = http_run(dir);
  write_reports(dir, in);  // in-process runs' figure (from steps) is drawn in Report.PlotsAndSelfContainedHtml
  ASSERT_TRUE(fs::exists(dir + "/plots/server_state_http.svg"));
  EXPECT_NE(read_text_file(dir + "/report.html").find("Client and server over time: http@4"), std::string::npos);
  // `servelab report DIR` reads server_metrics.jsonl back: the same figure on a re-render.
  EXPECT_EQ(load_report_input(dir).server_samples.size(), 4u);
}

TEST(ServerState, SpecCountersAreTheRunsLastScrapeMinusItsFirstSummedOverReplicas) {
  const std::string path = fresh_dir("spec") + "/server_metrics.jsonl";
  // Replica a: 10 drafts before the run, 16 after (per position 0: 5 -> 9, position 1 appears).
  // Replica b: 4 more drafts. Replica c restarted (its counters went down): left out. Another run's
  // lines and a sample without counters in between are ignored.
  std::ofstream(path)
      << R"({"run":"http@4","url":"http://a","t_s":0.0,"spec_drafts":10,"spec_draft_tokens":30,"spec_accepted_tokens":12,"spec_accepted_per_pos":[5]}
{"run":"http@4","url":"http://b","t_s":0.01,"spec_drafts":0,"spec_draft_tokens":0,"spec_accepted_tokens":0}
{"run":"http@4","url":"http://c","t_s":0.02,"spec_drafts":50,"spec_draft_tokens":150,"spec_accepted_tokens":70}
{"run":"http@4","url":"http://a","t_s":0.25,"running":3}
{"run":"other@1","url":"http://a","t_s":0.3,"spec_drafts":999,"spec_draft_tokens":999,"spec_accepted_tokens":999}
{"run":"http@4","url":"http://c","t_s":0.9,"spec_drafts":2,"spec_draft_tokens":6,"spec_accepted_tokens":1}
{"run":"http@4","url":"http://b","t_s":0.95,"spec_drafts":4,"spec_draft_tokens":12,"spec_accepted_tokens":6,"spec_accepted_per_pos":[3,2,1]}
{"run":"http@4","url":"http://a","t_s":1.0,"spec_drafts":16,"spec_draft_tokens":48,"spec_accepted_tokens":20,"spec_accepted_per_pos":[9,4]}
)";
  const auto samples = read_server_samples(path);
  const std::optional<ServerSpecCounters> c = server_spec_counters(samples, "http@4");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->num_drafts, 6 + 4);
  EXPECT_EQ(c->num_draft_tokens, 18 + 12);
  EXPECT_EQ(c->num_accepted_tokens, 8 + 6);
  EXPECT_EQ(c->num_accepted_tokens_per_pos, (std::vector<int64_t>{4 + 3, 4 + 2, 1}));
  EXPECT_FALSE(server_spec_counters(samples, "nobody@1").has_value());
  // A run during which nothing was drafted has no counters to report.
  std::vector<ServerSample> idle(samples.begin(), samples.begin() + 1);
  EXPECT_FALSE(server_spec_counters(idle, "http@4").has_value());
}

}  // namespace server_state_test
}  // namespace servelab::analysis
