// Other tools' result files read as runs: each fixture (tests/data/imports/, written from the
// formats' documented keys) maps onto our metrics, and compare / the report show them beside ours.
#include "analysis/import_results.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/compare.h"
#include "analysis/report.h"
#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace import_results_test {  // named, not anonymous: a unity batch shares one translation unit

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(SERVELAB_SOURCE_DIR) + "/tests/data/imports/" + name; }

RunSummary only_run(const std::string& name) {
  const auto runs = import_result_file(fixture(name));
  EXPECT_EQ(runs.size(), 1u);
  return runs.at(0);
}

TEST(ImportResults, VllmBenchServe) {
  const RunSummary r = only_run("vllm-bench-serve.json");
  EXPECT_EQ(r.info.label, "vllm-bench@4");
  EXPECT_EQ(r.info.mode, RunMode::open);
  EXPECT_DOUBLE_EQ(r.info.rate, 4.0);
  EXPECT_EQ(r.info.config["tool"], "vllm-bench");
  EXPECT_EQ(r.info.config["model"], "Qwen/Qwen3-0.6B");
  const auto& m = r.metrics;
  EXPECT_EQ(m.n_ok, 198u);
  EXPECT_EQ(m.n_failed, 2u);
  EXPECT_EQ(m.n_requests, 200u);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 41.7);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 35.2);  // median
  EXPECT_DOUBLE_EQ(m.ttft_ms.p90, 58.3);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p99, 97.6);
  EXPECT_DOUBLE_EQ(m.tpot_ms.p99, 15.3);
  EXPECT_DOUBLE_EQ(m.itl_ms.p50, 10.9);
  EXPECT_DOUBLE_EQ(m.e2e_ms.p99, 1911.8);  // e2el
  EXPECT_TRUE(std::isnan(m.e2e_ms.p95));  // not asked for: null, not 0
  EXPECT_DOUBLE_EQ(m.request_throughput, 3.8194);
  EXPECT_DOUBLE_EQ(m.output_throughput, 488.89);
  EXPECT_DOUBLE_EQ(m.total_throughput, 2444.44);
  EXPECT_TRUE(std::isnan(m.goodput));
  EXPECT_EQ(m.n_output_tokens, 25344);
}

TEST(ImportResults, GenAiPerfProfileExport) {
  const RunSummary r = only_run("profile_export_genai_perf.json");
  EXPECT_EQ(r.info.label, "genai-perf@4");
  const auto& m = r.metrics;
  EXPECT_EQ(m.n_ok, 200u);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 44.2);  // avg
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 36.8);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p99, 101.3);
  EXPECT_DOUBLE_EQ(m.ttft_ms.max, 130.9);
  ASSERT_FALSE(m.ttft_ms.extra.empty());   // p25, p75 kept as extra percentiles
  EXPECT_DOUBLE_EQ(m.ttft_ms.extra.front().first, 25.0);
  EXPECT_DOUBLE_EQ(m.tpot_ms.p50, 11.3);   // its inter_token_latency is a per-request TPOT
  EXPECT_TRUE(m.itl_ms.empty());
  EXPECT_DOUBLE_EQ(m.e2e_ms.p95, 1790.0);  // request_latency
  EXPECT_DOUBLE_EQ(m.request_throughput, 3.91);
  EXPECT_DOUBLE_EQ(m.output_throughput, 500.48);
}

TEST(ImportResults, GuidellmBenchmarksOnePerStrategy) {
  const auto runs = import_result_file(fixture("guidellm-benchmarks.json"));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].info.label, "guidellm@2");
  EXPECT_EQ(runs[1].info.label, "guidellm@c8");
  EXPECT_EQ(runs[1].info.mode, RunMode::closed);
  EXPECT_EQ(runs[1].info.concurrency, 8);
  const auto& m = runs[0].metrics;
  EXPECT_EQ(m.n_ok, 60u);
  EXPECT_EQ(m.n_failed, 1u);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 30.5);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p999, 79.0);
  EXPECT_DOUBLE_EQ(m.tpot_ms.p99, 13.8);          // inter_token_latency_ms
  EXPECT_NEAR(m.e2e_ms.p99, 1770.0, 1e-9);        // request_latency is in seconds
  EXPECT_NEAR(m.e2e_ms.extra.front().first, 0.1, 1e-12);  // p001 = the 0.1th percentile
  EXPECT_DOUBLE_EQ(m.output_throughput, 252.1);
  EXPECT_DOUBLE_EQ(m.total_throughput, 1260.5);
  EXPECT_EQ(runs[1].metrics.n_failed, 2u);  // incomplete counts as failed
}

TEST(ImportResults, LlmperfSummary) {
  const RunSummary r = only_run("llmperf_summary.json");
  EXPECT_EQ(r.info.label, "llmperf@c4");
  const auto& m = r.metrics;
  EXPECT_EQ(m.n_ok, 98u);
  EXPECT_EQ(m.n_failed, 2u);
  EXPECT_NEAR(m.ttft_ms.p50, 34.2, 1e-9);  // seconds -> ms
  EXPECT_NEAR(m.ttft_ms.p99, 89.3, 1e-9);
  EXPECT_NEAR(m.tpot_ms.mean, 11.4, 1e-9);
  EXPECT_NEAR(m.e2e_ms.p90, 1610.0, 1e-9);
  EXPECT_DOUBLE_EQ(m.output_throughput, 341.7);
  EXPECT_NEAR(m.request_throughput, 160.2 / 60.0, 1e-12);
}

TEST(ImportResults, UnrecognizedFilesSayWhatWasLookedFor) {
  const fs::path dir = fs::path(::testing::TempDir()) / "servelab_import_bad";
  fs::create_directories(dir);
  std::ofstream(dir / "other.json") << R"({"accuracy": 0.9})";
  std::ofstream(dir / "broken.json") << "{not json";
  try {
    import_result_file((dir / "other.json").string());
    FAIL() << "accepted an unknown file";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("other.json: not a result of vLLM bench serve"), std::string::npos) << m;
    EXPECT_NE(m.find("GenAI-Perf"), std::string::npos) << m;
    EXPECT_NE(m.find("LLMPerf"), std::string::npos) << m;
  }
  EXPECT_THROW(import_result_file((dir / "broken.json").string()), std::runtime_error);
  EXPECT_THROW(read_any_summary((dir / "other.json").string()), std::runtime_error);
}

/// A servelab run at 4 req/s (records), as `servelab run` leaves it.
ReportInput our_run() {
  ReportInput in;
  in.scenario.name = "ours";
  in.runs.push_back(testing_data::run_info("continuous", "paged", 4, 16));
  std::vector<StepRecord> steps;
  testing_data::append_run({in.runs.back(), 0.05, 0.02}, 16, 5, in.records, steps);
  return in;
}

TEST(ImportResults, CompareShowsAnotherToolsRunBesideOurs) {
  const Summary ours = build_summary({}, {}, {}, our_run().runs, our_run().records, {});
  const Summary theirs = read_any_summary(fixture("vllm-bench-serve.json"));
  ASSERT_EQ(theirs.runs.size(), 1u);
  const Comparison c = compare_summaries(theirs, ours, 10.0, {"ttft_ms.p50", "output_throughput_tok_s"}, true);
  ASSERT_EQ(c.runs.size(), 1u);  // paired by their load (4 req/s), not their labels
  EXPECT_EQ(c.runs[0].label, "vllm-bench@4 vs continuous-paged@4");
  EXPECT_DOUBLE_EQ(c.runs[0].deltas[0].base, 35.2);
  EXPECT_NEAR(c.runs[0].deltas[0].current, ours.runs[0].metrics.ttft_ms.p50, 1e-6);  // summary.json's rounding
  std::ostringstream out;
  print_comparison(out, c);
  EXPECT_NE(out.str().find("vllm-bench@4 vs continuous-paged@4"), std::string::npos) << out.str();
}

TEST(ImportResults, ReportHoldsImportedRunsAndReRendersThem) {
  const fs::path dir = fs::path(::testing::TempDir()) / "servelab_import_report";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ReportInput in = our_run();
  for (const char* f : {"vllm-bench-serve.json", "llmperf_summary.json"})
    for (auto& r : import_result_file(fixture(f))) in.imported.push_back(r);
  std::ofstream rec(dir / "records.jsonl");
  for (const auto& r : in.records) rec << record_line(r);
  rec.close();
  ReportOptions o;
  o.plots = false;
  const ReportOutcome out = write_reports(dir.string(), in, o);
  ASSERT_EQ(out.summary.runs.size(), 3u);
  EXPECT_EQ(out.summary.runs[1].info.label, "vllm-bench@4");
  for (const auto& w : out.warnings) EXPECT_EQ(w.find("vllm-bench"), std::string::npos) << w;
  const std::string md = read_text_file((dir / "report.md").string());
  EXPECT_NE(md.find("| vllm-bench | 4 |"), std::string::npos) << md;
  EXPECT_NE(md.find("imported from"), std::string::npos);
  EXPECT_EQ(md.find("vllm-bench none"), std::string::npos);  // no capacity claimed for another tool's run
  // runs.json keeps them: `servelab report DIR` gives the same summary.json, byte for byte.
  const std::string first = read_text_file((dir / "summary.json").string());
  render_reports(dir.string(), o);
  EXPECT_EQ(read_text_file((dir / "summary.json").string()), first);
  EXPECT_EQ(read_summary((dir / "summary.json").string()).runs[2].metrics.ttft_ms.p50,
            out.summary.runs[2].metrics.ttft_ms.p50);
}

}  // namespace import_results_test
}  // namespace servelab::analysis
