// write_reports / render_reports: every file of a run folder besides the raw records.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "analysis/import_results.h"
#include "analysis/json_format.h"
#include "analysis/report.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {

namespace fs = std::filesystem;

std::string in_dir(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

void validate_input(const ReportInput& in) {
  in.slo.validate();
  in.options.validate();
  for (const auto& r : in.runs) r.validate();
  for (const auto& g : in.gates) g.validate();
  if (in.baseline) in.baseline->validate();
}

/// Measured records a run planned: its requests times its repetitions (whichever have records).
std::size_t planned_records(const RunSummary& r) {
  return static_cast<std::size_t>(r.info.n_requests) * std::max<std::size_t>(1, r.repetitions.size());
}

}  // namespace

std::vector<std::string> summary_warnings(const Summary& s) {
  std::vector<std::string> w;
  for (const auto& r : s.runs) {
    if (is_imported(r)) continue;  // another tool's figures: nothing of ours to warn about
    const auto& m = r.metrics;
    const std::string run = "run " + r.info.label;
    if (m.n_requests == 0) {
      w.push_back(run + ": no measured records");
      continue;
    }
    if (m.lateness_warning)
      w.push_back(run + ": lateness p99 = " + format_number(m.lateness_ms.p99) +
                  " ms > 1 ms: the load generator sent requests behind schedule (latencies still count "
                  "from the intended times; the offered rate was effectively lower)");
    if (m.n_failed > 0)
      w.push_back(run + ": " + std::to_string(m.n_failed) + " of " + std::to_string(m.n_requests) +
                  " requests failed (status != ok); they count against SLO attainment, not in latencies");
    if (r.info.n_requests > 0 && planned_records(r) != m.n_requests + m.n_window_dropped)
      w.push_back(run + ": " + std::to_string(m.n_requests + m.n_window_dropped) + " measured records for " +
                  std::to_string(planned_records(r)) + " planned requests" +
                  (r.repetitions.empty() ? "" : " (over " + std::to_string(r.repetitions.size()) + " repetitions)"));
  }
  return w;
}

std::vector<std::pair<std::string, std::size_t>> failure_reasons(const std::string& run,
                                                                  const std::vector<RequestRecord>& records) {
  std::map<std::string, std::size_t> counts;
  for (const auto& r : records)
    if (r.run == run && !r.warmup && r.status != RecordStatus::ok)
      ++counts[r.error.empty() ? std::string(to_string(r.status)) : r.error];
  std::vector<std::pair<std::string, std::size_t>> out(counts.begin(), counts.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::string format_failure_reasons(const std::vector<std::pair<std::string, std::size_t>>& reasons,
                                   std::size_t max_reasons) {
  std::string s;
  for (std::size_t i = 0; i < reasons.size() && i < max_reasons; ++i)
    s += (i ? "; " : "") + std::to_string(reasons[i].second) + " x " + reasons[i].first;
  if (reasons.size() > max_reasons) s += "; and " + std::to_string(reasons.size() - max_reasons) + " other reasons";
  return s;
}

std::vector<GateResult> error_rate_gates(const Summary& s, const std::vector<RequestRecord>& records,
                                         double max_error_rate) {
  std::vector<GateResult> out;
  for (const auto& r : s.runs) {
    const auto& m = r.metrics;
    GateResult g;
    g.name = "error rate of " + r.info.label + " <= " + format_number(100.0 * max_error_rate) + "%";
    const double share = m.n_requests ? static_cast<double>(m.n_failed) / static_cast<double>(m.n_requests) : 0.0;
    const bool all_failed = m.n_requests > 0 && m.n_failed == m.n_requests;
    g.passed = !all_failed && share <= max_error_rate;
    g.message = std::to_string(m.n_failed) + " of " + std::to_string(m.n_requests) + " requests failed (" +
                format_number(100.0 * share) + "%)";
    if (m.n_failed > 0) {
      std::vector<RequestRecord> mine;  // a repeated point's records carry "<label>#k"
      for (const auto& rec : records)
        if (rec.run == r.info.label || rec.run.rfind(r.info.label + "#", 0) == 0) {
          mine.push_back(rec);
          mine.back().run = r.info.label;
        }
      g.message += ": " + format_failure_reasons(failure_reasons(r.info.label, mine));
    }
    out.push_back(std::move(g));
  }
  return out;
}

void write_runs_file(const std::string& dir, const ReportInput& input) {
  nlohmann::ordered_json j;
  j["schema"] = kRunsSchema;
  j["scenario"] = input.scenario;
  j["environment"] = input.environment;
  j["slo"] = input.slo;
  j["report"] = input.options;
  if (!std::isnan(input.cdf_rate)) j["report"]["cdf_rate"] = number_keeping_inf(input.cdf_rate);
  j["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : input.runs) j["runs"].push_back(r);
  j["gates"] = nlohmann::ordered_json::array();
  for (const auto& g : input.gates) j["gates"].push_back(g);
  if (input.baseline) j["baseline"] = *input.baseline;
  if (input.max_error_rate) j["max_error_rate"] = *input.max_error_rate;
  if (!input.imported.empty()) {
    j["imported"] = nlohmann::ordered_json::array();
    for (const auto& r : input.imported) j["imported"].push_back(r);
  }
  write_text_file(in_dir(dir, "runs.json"), j.dump(2) + "\n");
}

/// HTTP runs: speculative decoding as the server counted it (its /metrics before and after the
/// run), where the run has no engine steps of its own to count it from.
static void add_server_spec_counters(RunSummary& r, const std::vector<ServerSample>& samples) {
  if (samples.empty()) return;
  auto fill = [&](RunMetrics& m, const std::string& label) {
    if (m.kv.spec_num_drafts > 0) return;
    const std::optional<ServerSpecCounters> c = server_spec_counters(samples, label);
    if (!c) return;
    m.kv.spec_num_drafts = c->num_drafts;
    m.kv.spec_num_draft_tokens = c->num_draft_tokens;
    m.kv.spec_num_accepted_tokens = c->num_accepted_tokens;
    m.kv.spec_num_accepted_tokens_per_pos = c->num_accepted_tokens_per_pos;
    m.kv.spec_from_server = true;
  };
  if (r.repetitions.empty()) {
    fill(r.metrics, r.info.label);
    return;
  }
  for (size_t k = 0; k < r.repetitions.size(); ++k)
    fill(r.repetitions[k], repetition_label(r.info.label, int(k) + 1, r.info.repeats));
  ServerSpecCounters sum;  // the point's counters: every repetition's, added
  for (const RunMetrics& m : r.repetitions) {
    sum.num_drafts += m.kv.spec_num_drafts;
    sum.num_draft_tokens += m.kv.spec_num_draft_tokens;
    sum.num_accepted_tokens += m.kv.spec_num_accepted_tokens;
    const auto& pp = m.kv.spec_num_accepted_tokens_per_pos;
    if (sum.num_accepted_tokens_per_pos.size() < pp.size()) sum.num_accepted_tokens_per_pos.resize(pp.size(), 0);
    for (size_t p = 0; p < pp.size(); ++p) sum.num_accepted_tokens_per_pos[p] += pp[p];
  }
  if (r.metrics.kv.spec_num_drafts > 0 || sum.num_drafts <= 0) return;
  r.metrics.kv.spec_num_drafts = sum.num_drafts;
  r.metrics.kv.spec_num_draft_tokens = sum.num_draft_tokens;
  r.metrics.kv.spec_num_accepted_tokens = sum.num_accepted_tokens;
  r.metrics.kv.spec_num_accepted_tokens_per_pos = sum.num_accepted_tokens_per_pos;
  r.metrics.kv.spec_from_server = true;
}

ReportOutcome write_reports(const std::string& dir, const ReportInput& input, const ReportOptions& options) {
  validate_input(input);
  ReportOutcome out;
  out.summary =
      build_summary(input.scenario, input.environment, input.slo, input.runs, input.records, input.steps,
                    input.options);
  for (auto& r : out.summary.runs) {  // structured output: validity and cost beside latency
    std::vector<std::string> labels;
    for (int k = 1; k <= r.info.repeats; ++k) labels.push_back(repetition_label(r.info.label, k, r.info.repeats));
    r.structured = structured_stats(labels, input.records, input.schemas);
    add_server_spec_counters(r, input.server_samples);
  }
  out.summary.runs.insert(out.summary.runs.end(), input.imported.begin(), input.imported.end());
  write_runs_file(dir, input);
  write_summary(in_dir(dir, "summary.json"), out.summary);

  out.gates = evaluate_gates(out.summary, input.gates);
  if (input.max_error_rate) {
    const auto e = error_rate_gates(out.summary, input.records, *input.max_error_rate);
    out.gates.insert(out.gates.begin(), e.begin(), e.end());
  }
  if (input.baseline) {
    try {
      const Summary base = read_summary_or_dir(input.baseline->path);
      const auto b = evaluate_baseline(out.summary, base, *input.baseline);
      out.gates.insert(out.gates.end(), b.begin(), b.end());
    } catch (const std::exception& e) {
      out.gates.push_back({"baseline " + input.baseline->path, false,
                           std::string("cannot compare with the baseline: ") + e.what()});
    }
  }
  out.warnings = summary_warnings(out.summary);
  for (auto& w : out.warnings)  // "N of M requests failed": and why, counted
    for (const auto& r : out.summary.runs)
      if (w.rfind("run " + r.info.label + ": ", 0) == 0 && w.find(" requests failed") != std::string::npos) {
        const auto reasons = failure_reasons(r.info.label, input.records);
        if (!reasons.empty()) w += ": " + format_failure_reasons(reasons);
      }
  std::size_t n_short = 0;
  for (const auto& r : out.summary.runs)
    if (r.info.n_requests > 0 && r.metrics.n_requests + r.metrics.n_window_dropped < planned_records(r)) ++n_short;
  if (input.cut_short || n_short > 0)
    out.warnings.insert(out.warnings.begin(),
                        "run cut short: " + std::to_string(n_short) + " of " + std::to_string(out.summary.runs.size()) +
                            " runs have fewer records than planned" +
                            (input.cut_short ? " and a partial last line was dropped" : "") +
                            "; only requests that finished are reported");
  if (options.plots) {
    PlotOptions po = options.plot;
    if (std::isnan(po.cdf_rate)) po.cdf_rate = input.cdf_rate;
    PlotResult p = write_plots(dir, out.summary, input.records, input.steps, po, input.server_samples);
    out.plots = std::move(p.files);
    out.warnings.insert(out.warnings.end(), p.warnings.begin(), p.warnings.end());
  }
  write_text_file(in_dir(dir, "results.csv"), results_csv(out.summary));
  write_text_file(in_dir(dir, "junit.xml"),
                  junit_xml(out.gates, "servelab." + (input.scenario.name.empty() ? std::string("gates")
                                                                                  : input.scenario.name)));
  write_text_file(in_dir(dir, "report.md"), report_markdown(out.summary, out.gates, out.warnings, out.plots));
  write_text_file(in_dir(dir, "report.html"),
                  report_html(dir, out.summary, out.gates, out.warnings, out.plots));
  return out;
}

ReportInput load_report_input(const std::string& dir) {
  const std::string runs_path = in_dir(dir, "runs.json");
  if (!fs::exists(runs_path))
    throw std::runtime_error(runs_path + ": missing (a run folder written by `servelab run` holds it)");
  ReportInput in;
  try {
    const auto j = nlohmann::ordered_json::parse(read_text_file(runs_path));
    const std::string schema = j.value("schema", std::string());
    if (schema != kRunsSchema)
      throw std::invalid_argument("\"schema\" must be \"" + std::string(kRunsSchema) + "\" (got \"" + schema +
                                  "\")");
    if (j.contains("scenario")) in.scenario = j["scenario"].get<ScenarioInfo>();
    if (j.contains("environment")) in.environment = j["environment"].get<Environment>();
    if (j.contains("slo")) in.slo = j["slo"].get<SloSpec>();
    if (j.contains("report")) {
      in.options = j["report"].get<MetricsOptions>();
      if (j["report"].contains("cdf_rate")) in.cdf_rate = read_number_keeping_inf(j["report"]["cdf_rate"]);
    }
    for (const auto& r : j.at("runs")) in.runs.push_back(r.get<RunInfo>());
    if (j.contains("gates"))
      for (const auto& g : j["gates"]) in.gates.push_back(g.get<Gate>());
    if (j.contains("baseline") && !j["baseline"].is_null()) in.baseline = j["baseline"].get<BaselineSpec>();
    if (j.contains("max_error_rate") && j["max_error_rate"].is_number()) in.max_error_rate = j["max_error_rate"].get<double>();
    if (j.contains("imported"))
      for (const auto& r : j["imported"]) in.imported.push_back(r.get<RunSummary>());
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(runs_path + ": " + e.what());
  }
  // A run killed between writing runs.json and opening records.jsonl leaves no records file.
  bool cut_records = false, cut_steps = false;
  const std::string records_path = in_dir(dir, "records.jsonl");
  if (fs::exists(records_path)) in.records = read_records(records_path, &cut_records);
  else cut_records = true;
  const std::string steps_path = in_dir(dir, "steps.jsonl");
  if (fs::exists(steps_path)) in.steps = read_steps(steps_path, &cut_steps);
  const std::string server_path = in_dir(dir, "server_metrics.jsonl");
  if (fs::exists(server_path)) in.server_samples = read_server_samples(server_path);
  const std::string schemas_path = in_dir(dir, "schemas.jsonl");
  if (fs::exists(schemas_path)) in.schemas = read_schemas_file(schemas_path);
  in.cut_short = cut_records || cut_steps;
  return in;
}

ReportOutcome render_reports(const std::string& dir, const ReportOptions& options) {
  return write_reports(dir, load_report_input(dir), options);
}

}  // namespace servelab::analysis
