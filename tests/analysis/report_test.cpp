#include "analysis/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/compare.h"
#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace {

namespace fs = std::filesystem;

/// A fresh, empty folder under the test temp dir.
std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("servelab_analysis_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

/// Two strategies × three rates of synthetic records, written to DIR/records.jsonl and
/// DIR/steps.jsonl as the driver would, and returned in memory as the lead's `run` holds them.
ReportInput sweep_input(const std::string& dir, int n_per_run = 24) {
  ReportInput in;
  in.scenario.name = "sweep";
  in.scenario.file = "scenarios/sweep.yaml";
  in.scenario.seed = 7;
  in.environment.device = "sim (cost model)";
  in.environment.cpu_model = "Test CPU";
  in.environment.n_cores = 2;
  in.environment.commit = "abcdef0123456789";
  in.environment.date = "2026-01-02T03:04:05Z";
  in.environment.servelab_version = "0.1.0";
  in.slo.ttft_ms = 200;
  in.slo.tpot_ms = 30;
  uint64_t seed = 100;
  for (const auto& [batching, kv, ttft, tpot] :
       {std::tuple{"continuous", "paged", 0.04, 0.015}, std::tuple{"static", "naive", 0.25, 0.03}}) {
    for (double rate : {2.0, 4.0, 8.0}) {
      in.runs.push_back(testing_data::run_info(batching, kv, rate, n_per_run));
      testing_data::append_run({in.runs.back(), ttft * rate / 2, tpot}, n_per_run, seed++, in.records,
                               in.steps);
    }
  }
  Gate g;
  g.metric = "slo_attainment";
  g.min = 0.5;
  g.strategy = "continuous-paged";
  in.gates.push_back(g);
  std::ofstream rec(fs::path(dir) / "records.jsonl");
  for (const auto& r : in.records) rec << record_line(r);
  std::ofstream st(fs::path(dir) / "steps.jsonl");
  for (const auto& s : in.steps) st << step_line(s);
  return in;
}

ReportOptions no_plots() {
  ReportOptions o;
  o.plots = false;
  return o;
}

TEST(Report, ReRenderReproducesSummaryByteForByte) {
  const std::string dir = fresh_dir("rerender");
  const ReportInput in = sweep_input(dir);
  const ReportOutcome first = write_reports(dir, in, no_plots());
  const std::string summary = read_text_file(dir + "/summary.json");
  const std::string csv = read_text_file(dir + "/results.csv");
  const std::string md = read_text_file(dir + "/report.md");
  fs::remove(dir + "/summary.json");
  const ReportOutcome again = render_reports(dir, no_plots());
  EXPECT_EQ(read_text_file(dir + "/summary.json"), summary);
  EXPECT_EQ(read_text_file(dir + "/results.csv"), csv);
  EXPECT_EQ(read_text_file(dir + "/report.md"), md);
  EXPECT_EQ(again.summary.runs.size(), 6u);
  EXPECT_EQ(first.passed(), again.passed());
  // The environment (date included) comes from runs.json, not from now().
  EXPECT_NE(summary.find("\"date\": \"2026-01-02T03:04:05Z\""), std::string::npos);
}

TEST(Report, TablesCsvAndJunitHaveARowPerRunAndGate) {
  const std::string dir = fresh_dir("tables");
  ReportInput in = sweep_input(dir);
  Gate fail;
  fail.metric = "ttft_ms.p99";
  fail.max = 1;  // no run is that fast
  in.gates.push_back(fail);
  const ReportOutcome out = write_reports(dir, in, no_plots());
  EXPECT_FALSE(out.passed());
  EXPECT_EQ(out.exit_code(), 1);

  const std::string csv = read_text_file(dir + "/results.csv");
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("label,strategy,batching,kv,backend,rate,n_requests,n_failed,ttft_p50_ms", 0), 0u)
      << header;
  int n_rows = 0;
  while (std::getline(lines, line)) ++n_rows;
  EXPECT_EQ(n_rows, 6);
  EXPECT_NE(csv.find("\ncontinuous-paged@2,continuous-paged,continuous,paged,sim,2,23,1,"), std::string::npos)
      << csv;

  const std::string md = read_text_file(dir + "/report.md");
  EXPECT_NE(md.find("| strategy | rate (req/s) | n | failed | TTFT p50 (ms) |"), std::string::npos);
  EXPECT_NE(md.find("| static-naive | 8 | 23 | 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| **FAIL** | ttft_ms.p99 <= 1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("1 of 2 gates failed"), std::string::npos);

  const std::string junit = read_text_file(dir + "/junit.xml");
  EXPECT_NE(junit.find("tests=\"2\" failures=\"1\""), std::string::npos) << junit;
}

TEST(Report, MissingBaselineIsAFailingGateNotACrash) {
  const std::string dir = fresh_dir("baseline");
  ReportInput in = sweep_input(dir, 12);
  in.baseline = BaselineSpec{dir + "/no_such_baseline.json", 10.0, {}};
  const ReportOutcome out = write_reports(dir, in, no_plots());
  ASSERT_EQ(out.gates.size(), 2u);
  EXPECT_FALSE(out.gates[1].passed);
  EXPECT_NE(out.gates[1].message.find("cannot open"), std::string::npos) << out.gates[1].message;

  // Against itself as the baseline every metric is unchanged.
  in.baseline->path = dir;  // a run folder holding summary.json
  const ReportOutcome self = write_reports(dir, in, no_plots());
  EXPECT_TRUE(self.passed()) << self.gates.back().message;
  EXPECT_EQ(self.gates.size(), 1u + default_compare_metrics().size());
}

TEST(Report, LoadErrorsNameTheFile) {
  const std::string dir = fresh_dir("load_errors");
  try {
    render_reports(dir, no_plots());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("runs.json: missing"), std::string::npos) << e.what();
  }
  const ReportInput in = sweep_input(dir, 8);
  write_reports(dir, in, no_plots());
  std::ofstream(fs::path(dir) / "records.jsonl", std::ios::app) << "{broken\n";
  try {
    render_reports(dir, no_plots());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("records.jsonl:" + std::to_string(in.records.size() + 1) + ":"),
              std::string::npos)
        << e.what();
  }
}

/// Rewrites line `line` (1-based) of a JSON-lines file through `edit`.
void edit_jsonl_line(const std::string& path, int line, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  in.close();
  nlohmann::json j = nlohmann::json::parse(lines.at(line - 1));
  edit(j);
  lines[line - 1] = j.dump();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : lines) out << l << "\n";
}

// Issue 6 item 12: records and steps that cannot be right are rejected with file:line and the
// field, not silently averaged into the figures.
TEST(Report, ImpossibleRecordsAndStepsAreRejectedWithFileAndLine) {
  const std::string dir = fresh_dir("bad_records");
  const ReportInput in = sweep_input(dir, 8);
  write_reports(dir, in, no_plots());
  const std::string records = (fs::path(dir) / "records.jsonl").string();
  const std::string steps = (fs::path(dir) / "steps.jsonl").string();
  const std::string good_records = read_text_file(records);
  const std::string good_steps = read_text_file(steps);
  struct Case {
    std::string file;
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  const nlohmann::json first = nlohmann::json::parse(good_records.substr(0, good_records.find('\n')));
  const std::vector<Case> cases = {
      {records, [](nlohmann::json& j) { j["arrival_s"] = -1.0; }, "arrival_s"},
      {records, [](nlohmann::json& j) { j["sent_s"] = -0.5; }, "sent_s"},
      {records, [](nlohmann::json& j) { j["first_token_s"] = j["arrival_s"].get<double>() - 0.01; }, "first_token_s"},
      {records, [](nlohmann::json& j) { j["end_s"] = j["arrival_s"].get<double>() - 0.01; }, "end_s"},
      {records, [](nlohmann::json& j) { std::swap(j["token_times_s"][0], j["token_times_s"][1]); }, "token_times_s"},
      {records, [](nlohmann::json& j) { j["output_tokens"] = -3; }, "output_tokens"},
      {records, [](nlohmann::json& j) { j["prompt_tokens"] = -1; }, "prompt_tokens"},
      {records, [](nlohmann::json& j) { j["preemptions"] = -1; }, "preemptions"},
      {records, [&](nlohmann::json& j) { j["id"] = first["id"]; j["run"] = first["run"]; }, "duplicate id"},
      {steps, [](nlohmann::json& j) { j["duration_s"] = -0.001; }, "duration_s"},
      {steps, [](nlohmann::json& j) { j["kv"]["free"] = -5; }, "kv.free"},
  };
  // runs.json: a planned count beyond kMaxRequestsPerRun (it would wrap in an int).
  const std::string runs = (fs::path(dir) / "runs.json").string();
  const std::string good_runs = read_text_file(runs);
  nlohmann::ordered_json rj = nlohmann::ordered_json::parse(good_runs);
  rj["runs"][0]["n_requests"] = 4294967297ull;
  write_text_file(runs, rj.dump(2));
  try {
    load_report_input(dir);
    ADD_FAILURE() << "accepted n_requests 4294967297";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("10000000"), std::string::npos) << e.what();
  }
  write_text_file(runs, good_runs);
  for (const auto& c : cases) {
    write_text_file(records, good_records);
    write_text_file(steps, good_steps);
    edit_jsonl_line(c.file, 3, c.edit);
    try {
      load_report_input(dir);
      ADD_FAILURE() << "accepted a record with a bad " << c.expect;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.file + ":3: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

TEST(Report, ConsoleTableAndTerminalPlot) {
  const std::string dir = fresh_dir("console");
  const ReportOutcome out = write_reports(dir, sweep_input(dir, 12), no_plots());
  std::ostringstream table;
  print_console_summary(table, out.summary);
  std::istringstream rows(table.str());
  std::string header, rule, row;
  std::getline(rows, header);
  std::getline(rows, rule);
  EXPECT_EQ(header.rfind("strategy", 0), 0u);
  EXPECT_EQ(rule.find_first_not_of('-'), std::string::npos);
  int n = 0;
  while (std::getline(rows, row) && row.rfind("rate in req/s", 0) != 0) {
    ++n;
    EXPECT_LE(row.size(), header.size() + 2) << "columns misaligned: " << row;
  }
  EXPECT_EQ(n, 6);
  EXPECT_NE(table.str().find("TTFT <= 200 ms, TPOT <= 30 ms"), std::string::npos) << table.str();
  // Issue 6 item 2: TTFT's two parts are columns of the console table and report.md.
  EXPECT_NE(header.find("queue"), std::string::npos) << header;
  EXPECT_NE(header.find("prefill"), std::string::npos) << header;
  const std::string md = read_text_file(dir + "/report.md");
  EXPECT_NE(md.find("queue p50 (ms)"), std::string::npos);
  EXPECT_NE(md.find("prefill p50 (ms)"), std::string::npos);

  std::ostringstream plot;
  print_terminal_plot(plot, out.summary, "ttft_ms.p50", 40, 10);
  const std::string p = plot.str();
  EXPECT_NE(p.find("p50 TTFT (ms) vs request rate (req/s)"), std::string::npos) << p;
  EXPECT_NE(p.find("A = continuous-paged"), std::string::npos) << p;
  EXPECT_NE(p.find("B = static-naive"), std::string::npos) << p;
  EXPECT_NE(p.find('A'), std::string::npos);
  EXPECT_NE(p.find("+----"), std::string::npos);
  // static-naive has the higher TTFT at 8 req/s: its marker sits on the top row.
  const auto first_line_end = p.find('\n');
  const std::string top_row =
      p.substr(first_line_end + 1, p.find('\n', first_line_end + 1) - first_line_end - 1);
  EXPECT_NE(top_row.find('B'), std::string::npos) << p;
}

TEST(Report, PlotsAndSelfContainedHtml) {
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("plots");
  const ReportOutcome out = write_reports(dir, sweep_input(dir, 12));
  for (const char* f : {"ttft_vs_rate.svg", "tpot_vs_rate.svg", "throughput_vs_rate.svg", "kv_breakdown.svg",
                        "timeline_continuous-paged.svg", "timeline_static-naive.svg", "cdf_ttft.svg",
                        "cdf_tpot.svg", "cdf_itl.svg", "cdf_e2e.svg", "ttft_queue_continuous-paged.svg",
                        "ttft_queue_static-naive.svg", "goodput_vs_rate.svg", "server_state_continuous-paged.svg",
                        "server_state_static-naive.svg"})
    EXPECT_TRUE(fs::exists(fs::path(dir) / "plots" / f)) << f;
  EXPECT_EQ(out.plots.size(), 15u);
  for (const auto& w : out.warnings) EXPECT_EQ(w.find("gnuplot"), std::string::npos) << w;

  const std::string html = read_text_file(dir + "/report.html");
  std::size_t n_svg = 0;
  for (auto p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++n_svg;
  EXPECT_EQ(n_svg, 15u);  // every figure inlined, the CDFs, TTFT/queue timelines, goodput and server-state plots too
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // Every "http" is an SVG namespace declaration, never a fetched resource.
  const std::regex xmlns(R"re(xmlns(:xlink)?="http://www\.w3\.org/(2000/svg|1999/xlink)")re");
  const std::string stripped = std::regex_replace(html, xmlns, "");
  EXPECT_EQ(stripped.find("http"), std::string::npos) << stripped.substr(stripped.find("http"), 80);
  EXPECT_NE(html.find("fig2_"), std::string::npos);  // ids made unique per figure
  EXPECT_NE(read_text_file(dir + "/report.md").find("![TTFT vs request rate](plots/ttft_vs_rate.svg)"),
            std::string::npos);
}

TEST(Report, MissingGnuplotOnlyWarns) {
  const std::string dir = fresh_dir("no_gnuplot");
  ReportOptions o;
  o.plot.gnuplot = "/nonexistent/gnuplot";
  const ReportOutcome out = write_reports(dir, sweep_input(dir, 8), o);
  EXPECT_TRUE(out.plots.empty());
  ASSERT_FALSE(out.warnings.empty());
  EXPECT_NE(out.warnings.back().find("gnuplot not found"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir + "/report.html"));
}

}  // namespace
}  // namespace servelab::analysis

namespace servelab::analysis {
namespace {

/// Structured output: each constrained output validated against its schema (schemas.jsonl), the
/// validity rate and the constrained-vs-unconstrained cost in summary.json, the report and on a
/// re-render.
TEST(Report, StructuredOutputValidityAndCost) {
  const std::string dir = fresh_dir("structured");
  ReportInput in;
  in.runs.push_back(testing_data::run_info("continuous", "paged", 4, 12));
  std::vector<StepRecord> steps;
  testing_data::append_run({in.runs.back(), 0.05, 0.02}, 12, 21, in.records, steps);
  in.schemas = {R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"],"additionalProperties":false})",
                R"({"type":"string","enum":["low","high"]})"};
  // Constrained requests decode at half the speed: their gaps doubled after the first token.
  const char* outputs[] = {R"({"n": 3})", R"("high")", R"({"n": -1})", R"({"n": 1)", R"("low")"};
  int k = 0;
  for (auto& r : in.records) {
    if (r.warmup || r.status != RecordStatus::ok || r.id % 2 == 0) continue;
    r.schema = k % 5 == 1 || k % 5 == 4 ? 1 : 0;
    r.output_text = outputs[k % 5];
    for (std::size_t i = 1; i < r.token_times_s.size(); ++i)
      r.token_times_s[i] = r.first_token_s + 2 * (r.token_times_s[i] - r.first_token_s);
    r.end_s = std::max(r.end_s, r.token_times_s.back());
    ++k;
  }
  std::ofstream rec(fs::path(dir) / "records.jsonl");
  for (const auto& r : in.records) rec << record_line(r);
  rec.close();
  std::ofstream sch(fs::path(dir) / "schemas.jsonl");
  for (const auto& s : in.schemas) sch << s << "\n";
  sch.close();
  const ReportOutcome out = write_reports(dir, in, no_plots());
  ASSERT_TRUE(out.summary.runs[0].structured.has_value());
  const StructuredStats& st = *out.summary.runs[0].structured;
  std::size_t n_constrained = 0, n_valid = 0;  // outputs 0, 1, 4 of each 5 are valid
  for (int i = 0; i < k; ++i) {
    ++n_constrained;
    n_valid += i % 5 == 0 || i % 5 == 1 || i % 5 == 4;
  }
  EXPECT_EQ(st.n_constrained, n_constrained);
  EXPECT_EQ(st.n_valid, n_valid);
  EXPECT_DOUBLE_EQ(st.validity_rate, double(n_valid) / double(n_constrained));
  ASSERT_FALSE(st.invalid_reasons.empty());
  EXPECT_GT(st.constrained.n, 0u);
  EXPECT_GT(st.unconstrained.n, 0u);
  EXPECT_GT(st.tpot_cost_pct, 50.0);  // about +100%: the gaps were doubled
  EXPECT_LT(st.constrained.decode_tok_s_mean, st.unconstrained.decode_tok_s_mean);

  const std::string summary = read_text_file(dir + "/summary.json");
  EXPECT_NE(summary.find("\"structured_output\""), std::string::npos);
  EXPECT_NE(summary.find("\"validity_rate\""), std::string::npos);
  EXPECT_NE(read_text_file(dir + "/report.md").find("## Structured output"), std::string::npos);
  std::ostringstream console;
  print_console_summary(console, out.summary);
  EXPECT_NE(console.str().find("outputs valid against their schema"), std::string::npos) << console.str();
  // The folder alone (runs.json, records.jsonl, schemas.jsonl) gives the same figures again.
  write_runs_file(dir, in);
  render_reports(dir, no_plots());
  EXPECT_EQ(read_text_file(dir + "/summary.json"), summary);
}

}  // namespace
}  // namespace servelab::analysis
