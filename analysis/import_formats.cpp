// Key mappings of the foreign result formats (docs/importing-results.md). Latencies become
// milliseconds, throughputs per second; what a tool does not report stays NaN (null).
//
// Definitions line up as follows: vLLM's TPOT, GenAI-Perf's inter_token_latency, guidellm's
// inter_token_latency_ms and LLMPerf's inter_token_latency_s are all a per-request mean gap after
// the first token, our TPOT; only vLLM reports pooled gaps, our ITL. E2E is vLLM's e2el,
// GenAI-Perf's and guidellm's request_latency, LLMPerf's end_to_end_latency.
#include "analysis/import_formats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>
#include <stdexcept>

namespace servelab::analysis::import_detail {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Json = nlohmann::ordered_json;

double num(const Json& j, const char* key, double scale = 1.0) {
  if (!j.is_object() || !j.contains(key)) return kNaN;
  const Json& v = j[key];
  if (v.is_number()) return v.get<double>() * scale;
  if (v.is_string()) {  // vLLM writes an infinite request rate as "inf"
    const std::string s = v.get<std::string>();
    if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
  }
  return kNaN;
}

Distribution blank() {
  Distribution d;
  d.mean = d.p50 = d.p90 = d.p95 = d.p99 = d.p999 = d.max = kNaN;
  return d;
}

/// Puts the q-th percentile into its fixed field or among the extras.
void set_percentile(Distribution& d, double q, double v) {
  if (std::isnan(v)) return;
  if (q == 50) d.p50 = v;
  else if (q == 90) d.p90 = v;
  else if (q == 95) d.p95 = v;
  else if (q == 99) d.p99 = v;
  else if (std::fabs(q - 99.9) < 1e-9) d.p999 = v;
  else if (q == 100) d.max = v;
  else if (q > 0 && q < 100) d.extra.emplace_back(q, v);
}

/// n = the sample count when any figure is known (0 = an empty distribution, as ours).
void finish(Distribution& d, std::size_t n) {
  std::sort(d.extra.begin(), d.extra.end());
  const bool any = !std::isnan(d.mean) || !std::isnan(d.p50) || !std::isnan(d.p99) || !std::isnan(d.max);
  d.n = any ? std::max<std::size_t>(n, 1) : 0;
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

/// Mode, rate, concurrency and label from what the tool offered: a finite rate is open loop (a
/// concurrency beside it is a cap, kept in config); no rate with a concurrency is closed loop;
/// neither (or an infinite rate) is everything at once.
void set_load(RunSummary& r, const std::string& tool, double rate, double concurrency) {
  r.info.strategy = tool;
  r.info.backend = "http";
  if (std::isfinite(rate) && rate > 0) {
    r.info.mode = RunMode::open;
    r.info.rate = rate;
    r.info.label = tool + "@" + number_text(rate);
    if (concurrency > 0) r.info.config["max_concurrency"] = static_cast<int>(concurrency);
  } else if (concurrency > 0) {
    r.info.mode = RunMode::closed;
    r.info.rate = kNaN;
    r.info.concurrency = static_cast<int>(concurrency);
    r.info.label = tool + "@c" + std::to_string(r.info.concurrency);
  } else {
    r.info.mode = RunMode::max;
    r.info.rate = std::numeric_limits<double>::infinity();
    r.info.label = tool + "@max";
  }
}

void set_counts(RunMetrics& m, double ok, double failed) {
  m.n_ok = std::isfinite(ok) && ok > 0 ? static_cast<std::size_t>(ok) : 0;
  m.n_failed = std::isfinite(failed) && failed > 0 ? static_cast<std::size_t>(failed) : 0;
  m.n_requests = m.n_ok + m.n_failed;
}

RunSummary blank_run() {
  RunSummary r;
  auto& m = r.metrics;
  for (Distribution* d : {&m.ttft_ms, &m.tpot_ms, &m.itl_ms, &m.e2e_ms, &m.lateness_ms, &m.queue_ms, &m.prefill_ms})
    *d = blank(), d->n = 0;
  m.request_throughput = m.output_throughput = m.total_throughput = kNaN;
  m.goodput = m.request_goodput = m.slo_attainment = kNaN;
  m.kv.utilization_mean = m.kv.utilization_max = m.kv.peak_use = m.kv.batch_size_mean = kNaN;
  m.kv.breakdown = {kNaN, kNaN, kNaN, kNaN, kNaN};
  m.duration_s = 0.0;  // unknown (summary.json's duration_s is a number)
  return r;
}

}  // namespace

RunSummary from_vllm(const Json& j) {
  RunSummary r = blank_run();
  auto& m = r.metrics;
  const double ok = num(j, "completed");
  const double failed = j.contains("failed") ? num(j, "failed") : num(j, "num_prompts") - ok;
  set_counts(m, ok, failed);
  // {mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms; the percentiles are whatever
  // --metric-percentiles asked for ("p99", "p99.9").
  struct Which {
    const char* name;
    Distribution* d;
  };
  const Which which[] = {{"ttft", &m.ttft_ms}, {"tpot", &m.tpot_ms}, {"itl", &m.itl_ms}, {"e2el", &m.e2e_ms}};
  static const std::regex pkey(R"(^p([0-9]+(\.[0-9]+)?)_([a-z0-9]+)_ms$)");
  for (const auto& w : which) {
    w.d->mean = num(j, ("mean_" + std::string(w.name) + "_ms").c_str());
    w.d->p50 = num(j, ("median_" + std::string(w.name) + "_ms").c_str());
  }
  for (const auto& [k, v] : j.items()) {
    std::smatch mt;
    if (!v.is_number() || !std::regex_match(k, mt, pkey)) continue;
    for (const auto& w : which)
      if (mt[3].str() == w.name) set_percentile(*w.d, std::stod(mt[1].str()), v.get<double>());
  }
  for (const auto& w : which) finish(*w.d, m.n_ok);
  m.request_throughput = num(j, "request_throughput");
  m.output_throughput = num(j, "output_throughput");
  m.total_throughput = num(j, "total_token_throughput");
  m.request_goodput = num(j, "request_goodput");
  if (std::isfinite(num(j, "duration"))) m.duration_s = num(j, "duration");
  if (std::isfinite(num(j, "total_input_tokens"))) m.n_prompt_tokens = static_cast<int64_t>(num(j, "total_input_tokens"));
  if (std::isfinite(num(j, "total_output_tokens"))) m.n_output_tokens = static_cast<int64_t>(num(j, "total_output_tokens"));
  const double rate = num(j, "request_rate");
  const double cap = num(j, "max_concurrency");
  // vLLM's infinite rate with a concurrency cap is a closed loop of that many.
  set_load(r, "vllm-bench", rate, cap);
  if (j.contains("model_id") && j["model_id"].is_string()) r.info.config["model"] = j["model_id"];
  if (j.contains("backend") && j["backend"].is_string()) r.info.config["backend"] = j["backend"];
  if (j.contains("burstiness") && j["burstiness"].is_number()) r.info.config["burstiness"] = j["burstiness"];
  return r;
}

namespace {

/// GenAI-Perf's {unit, avg, min, max, p1 ... p99, std} in milliseconds.
Distribution genai_distribution(const Json& j, const char* key) {
  Distribution d = blank();
  if (!j.contains(key) || !j[key].is_object()) return d;
  const Json& o = j[key];
  const std::string unit = o.value("unit", std::string("ms"));
  const double scale = unit == "s" || unit == "sec" ? 1000.0 : unit == "us" ? 1e-3 : unit == "ns" ? 1e-6 : 1.0;
  d.mean = num(o, "avg", scale);
  d.max = num(o, "max", scale);
  static const std::regex pkey(R"(^p([0-9]+(\.[0-9]+)?)$)");
  for (const auto& [k, v] : o.items()) {
    std::smatch mt;
    if (v.is_number() && std::regex_match(k, mt, pkey)) set_percentile(d, std::stod(mt[1].str()), v.get<double>() * scale);
  }
  return d;
}

double genai_avg(const Json& j, const char* key) {
  if (!j.contains(key)) return kNaN;
  if (j[key].is_number()) return j[key].get<double>();
  return j[key].is_object() ? num(j[key], "avg") : kNaN;
}

}  // namespace

RunSummary from_genai_perf(const Json& j) {
  RunSummary r = blank_run();
  auto& m = r.metrics;
  set_counts(m, genai_avg(j, "request_count"), genai_avg(j, "error_request_count"));
  m.ttft_ms = genai_distribution(j, "time_to_first_token");
  m.tpot_ms = genai_distribution(j, "inter_token_latency");  // (latency − TTFT) / (tokens − 1) per request
  m.e2e_ms = genai_distribution(j, "request_latency");
  for (Distribution* d : {&m.ttft_ms, &m.tpot_ms, &m.e2e_ms}) finish(*d, m.n_ok);
  m.request_throughput = genai_avg(j, "request_throughput");
  m.output_throughput = genai_avg(j, "output_token_throughput");
  // The load: input_config.{concurrency, request_rate}, or (newer) under perf_analyzer.stimulus.
  double rate = kNaN, conc = kNaN;
  if (j.contains("input_config") && j["input_config"].is_object()) {
    const Json& ic = j["input_config"];
    rate = num(ic, "request_rate");
    conc = num(ic, "concurrency");
    if (ic.contains("perf_analyzer") && ic["perf_analyzer"].is_object() && ic["perf_analyzer"].contains("stimulus")) {
      const Json& st = ic["perf_analyzer"]["stimulus"];
      if (std::isnan(rate)) rate = num(st, "request_rate");
      if (std::isnan(conc)) conc = num(st, "concurrency");
    }
    for (const char* k : {"model", "model_names"})
      if (ic.contains(k) && ic[k].is_array() && !ic[k].empty()) r.info.config["model"] = ic[k][0];
  }
  set_load(r, j.contains("aiperf_version") ? "aiperf" : "genai-perf", rate, conc);
  return r;
}

namespace {

/// guidellm's {successful: {mean, median, max, percentiles: {p50, ...}}} times `scale`.
Distribution guidellm_distribution(const Json& metrics, const char* key, double scale) {
  Distribution d = blank();
  if (!metrics.contains(key) || !metrics[key].is_object() || !metrics[key].contains("successful")) return d;
  const Json& s = metrics[key]["successful"];
  d.mean = num(s, "mean", scale);
  d.p50 = num(s, "median", scale);
  d.max = num(s, "max", scale);
  static const std::regex pkey(R"(^p([0-9]+)$)");
  if (s.contains("percentiles") && s["percentiles"].is_object())
    for (const auto& [k, v] : s["percentiles"].items()) {
      std::smatch mt;
      if (!v.is_number() || !std::regex_match(k, mt, pkey)) continue;
      // Keys are digits after "p" with an implied decimal point after two: p001 = 0.1, p999 = 99.9.
      const std::string digits = mt[1];
      const double q = digits.size() == 3 ? std::stod(digits) / 10.0 : std::stod(digits);
      set_percentile(d, q, v.get<double>() * scale);
    }
  return d;
}

double successful_mean(const Json& metrics, const char* key) {
  if (!metrics.contains(key) || !metrics[key].is_object() || !metrics[key].contains("successful")) return kNaN;
  return num(metrics[key]["successful"], "mean");
}

/// The benchmark's strategy: under "args", "config" or the benchmark itself.
const Json* guidellm_strategy(const Json& b) {
  for (const char* where : {"args", "config"})
    if (b.contains(where) && b[where].is_object() && b[where].contains("strategy") && b[where]["strategy"].is_object())
      return &b[where]["strategy"];
  if (b.contains("strategy") && b["strategy"].is_object()) return &b["strategy"];
  return nullptr;
}

}  // namespace

std::vector<RunSummary> from_guidellm(const Json& j) {
  std::vector<RunSummary> out;
  for (const auto& b : j["benchmarks"]) {
    if (!b.is_object() || !b.contains("metrics")) continue;
    const Json& mj = b["metrics"];
    RunSummary r = blank_run();
    auto& m = r.metrics;
    const Json* totals = mj.contains("request_totals") ? &mj["request_totals"]
                         : b.contains("request_totals") ? &b["request_totals"] : nullptr;
    if (totals) set_counts(m, num(*totals, "successful"), num(*totals, "errored") + num(*totals, "incomplete"));
    m.ttft_ms = guidellm_distribution(mj, "time_to_first_token_ms", 1.0);
    m.tpot_ms = guidellm_distribution(mj, "inter_token_latency_ms", 1.0);
    m.e2e_ms = guidellm_distribution(mj, "request_latency", 1000.0);  // seconds
    for (Distribution* d : {&m.ttft_ms, &m.tpot_ms, &m.e2e_ms}) finish(*d, m.n_ok);
    m.request_throughput = successful_mean(mj, "requests_per_second");
    m.output_throughput = successful_mean(mj, "output_tokens_per_second");
    m.total_throughput = successful_mean(mj, "tokens_per_second");
    if (std::isfinite(num(b, "duration"))) m.duration_s = num(b, "duration");
    double rate = kNaN, conc = kNaN;
    std::string type;
    if (const Json* st = guidellm_strategy(b)) {
      type = st->value("type_", st->value("type", std::string()));
      rate = num(*st, "rate");
      conc = num(*st, "streams");
      if (std::isnan(conc)) conc = num(*st, "max_concurrency");
      if (type == "synchronous") conc = 1;
      if (type == "throughput") rate = conc = kNaN;
    }
    set_load(r, "guidellm", rate, conc);
    if (!type.empty()) r.info.config["strategy"] = type;
    // Two benchmarks of one sweep at the same load keep distinct labels.
    for (const auto& o : out)
      if (o.info.label == r.info.label) r.info.label += "#" + std::to_string(out.size() + 1);
    out.push_back(std::move(r));
  }
  if (out.empty()) throw std::invalid_argument("guidellm result without a benchmark holding metrics");
  return out;
}

RunSummary from_llmperf(const Json& j) {
  RunSummary r = blank_run();
  auto& m = r.metrics;
  set_counts(m, num(j, "results_num_completed_requests"), num(j, "results_number_errors"));
  struct Which {
    const char* prefix;
    Distribution* d;
  };
  const Which which[] = {{"results_ttft_s", &m.ttft_ms},
                         {"results_inter_token_latency_s", &m.tpot_ms},
                         {"results_end_to_end_latency_s", &m.e2e_ms}};
  for (const auto& w : which) {
    const std::string p = w.prefix;
    w.d->mean = num(j, (p + "_mean").c_str(), 1000.0);
    w.d->max = num(j, (p + "_max").c_str(), 1000.0);
    for (int q : {25, 50, 75, 90, 95, 99})
      set_percentile(*w.d, q, num(j, (p + "_quantiles_p" + std::to_string(q)).c_str(), 1000.0));
    finish(*w.d, m.n_ok);
  }
  m.output_throughput = num(j, "results_mean_output_throughput_token_per_s");
  m.request_throughput = num(j, "results_num_completed_requests_per_min") / 60.0;
  set_load(r, "llmperf", kNaN, num(j, "num_concurrent_requests"));
  if (j.contains("model") && j["model"].is_string()) r.info.config["model"] = j["model"];
  return r;
}

}  // namespace servelab::analysis::import_detail
