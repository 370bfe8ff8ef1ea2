#include "cli/bench_scenario.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <numeric>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

namespace servelab::cli {

namespace {

/// Which flag wrote a scenario path: bench errors name the flag, not the generated file.
struct FlagOf {
  const char* path;
  const char* flag;
};
const FlagOf kFlags[] = {{"workload.rates", "--rate"},
                         {"workload.n_requests", "--n"},
                         {"workload.duration_s", "--duration"},
                         {"workload.concurrency", "--concurrency"},
                         {"workload.arrival.max_concurrency", "--max-concurrency"},
                         {"workload.arrival.cv", "--burstiness"},
                         {"workload.arrival", "--arrival"},
                         {"workload.warmup_requests", "--warmup"},
                         {"workload.prompt_tokens", "--prompt-tokens"},
                         {"workload.output_tokens", "--output-tokens"},
                         {"workload.structured_output.fraction", "--structured-fraction"},
                         {"workload.structured_output", "--structured-output"},
                         {"engine.max_model_len", "--max-model-len"},
                         {"target.urls", "--url"},
                         {"target.url", "--url"},
                         {"target.timeout_s", "--timeout"},
                         {"target.balance", "--balance"},
                         {"target.api", "--api"},
                         {"target.model", "--model"},
                         {"target.tokenizer", "--tokenizer"},
                         {"target.extra_body", "--extra-body"},
                         {"target.max_error_rate", "--max-error-rate"},
                         {"slo", "--goodput"},
                         {"report.percentiles", "--metric-percentiles"},
                         {"seed", "--seed"}};

/// "bench:9:7: workload.rates[0] must be > 0" → "--rate: workload.rates[0] must be > 0".
std::string name_the_flag(const std::string& message) {
  static const std::regex where(R"(^bench:\d+:\d+: )");
  std::smatch m;
  if (!std::regex_search(message, m, where)) return message;
  const std::string rest = m.suffix().str();
  for (const FlagOf& f : kFlags) {
    const std::string p = f.path;
    if (rest.rfind(p, 0) == 0 && (rest.size() == p.size() || std::string(".[ :").find(rest[p.size()]) != std::string::npos))
      return std::string(f.flag) + ": " + rest;
  }
  return rest;
}

double parse_rate(const std::string& text) {
  if (text == "inf" || text == "Inf" || text == "INF" || text == "infinity") return std::numeric_limits<double>::infinity();
  try {
    size_t used = 0;
    const double r = std::stod(text, &used);
    if (used == text.size()) return r;
  } catch (const std::exception&) {
  }
  throw ScenarioError({"--rate: must be a number of requests/s or inf (got '" + text + "')"});
}

/// "ttft:500" → {"ttft", 500}; throws naming --goodput.
std::pair<std::string, double> parse_goodput(const std::string& item) {
  const size_t colon = item.find(':');
  const std::string key = item.substr(0, colon);
  if (colon == std::string::npos || (key != "ttft" && key != "tpot" && key != "e2el"))
    throw ScenarioError({"--goodput: each item must be ttft:MS, tpot:MS or e2el:MS (got '" + item + "')"});
  try {
    const double ms = std::stod(item.substr(colon + 1));
    if (ms > 0) return {key, ms};
  } catch (const std::exception&) {
  }
  throw ScenarioError({"--goodput: " + key + " must be a number of milliseconds > 0 (got '" + item + "')"});
}

/// A length as the scenario writes it: fixed, or uniform over L(1 ± r) (vLLM's range ratio).
nlohmann::ordered_json length(int tokens, double range_ratio) {
  if (range_ratio <= 0) return tokens;
  const int lo = std::max(1, static_cast<int>(std::floor(tokens * (1.0 - range_ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(tokens * (1.0 + range_ratio))));
  return {{"dist", "uniform"}, {"min", lo}, {"max", hi}};
}

}  // namespace

std::string timestamp_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

void add_bench_flags(CLI::App& sub, BenchArgs& a) {
  auto* url = sub.add_option("--url", a.urls, "Server URL, http://HOST:PORT, or a full endpoint URL .../v1/completions (repeat for replicas)");
  auto* base_url = sub.add_option("--base-url", a.urls, "vLLM's name for --url");
  auto* endpoint = sub.add_option("--endpoint", a.endpoint, "vLLM: /v1/completions or /v1/chat/completions (chooses --api)")
                       ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}));
  sub.add_option("--model", a.model, "Model name to send (default: left out, the server's only model)");
  auto* api = sub.add_option("--api", a.api, "completions | chat")->check(CLI::IsMember({"completions", "chat"}));
  sub.add_option("--header", a.headers, "Extra header 'Name: value' (repeatable), e.g. 'Authorization: Bearer KEY'");
  sub.add_option("--tokenizer", a.tokenizer, "Model folder whose tokenizer turns planned prompts into text");
  sub.add_option("--timeout", a.timeout_s, "Per-request timeout in seconds (default 600)")->check(CLI::PositiveNumber);
  sub.add_option("--balance", a.balance, "round_robin | least_outstanding (several --url)");
  auto* rate = sub.add_option("--rate", a.rates, "Requests/s, or inf for all at once (repeat for a sweep; default 10)");
  auto* request_rate = sub.add_option("--request-rate", a.rates, "vLLM's name for --rate (inf: all at once)");
  auto* n = sub.add_option("--n", a.n, "Requests per rate (default 100)")->check(CLI::PositiveNumber);
  auto* num_prompts = sub.add_option("--num-prompts", a.n, "vLLM's name for --n")->check(CLI::PositiveNumber);
  auto* duration = sub.add_option("--duration", a.duration_s, "Seconds of arrivals per rate (instead of --n)")->check(CLI::PositiveNumber);
  auto* concurrency = sub.add_option("--concurrency", a.concurrency, "Closed loop with N users instead of a rate (N >= 1)")
                          ->check(CLI::PositiveNumber);
  auto* max_conc = sub.add_option("--max-concurrency", a.max_concurrency,
                                  "vLLM: at most N requests in flight, on top of the rate (a cap, not a closed loop)")
                       ->check(CLI::PositiveNumber);
  auto* arrival = sub.add_option("--arrival", a.arrival, "poisson | constant | gamma (default poisson)");
  auto* burstiness = sub.add_option("--burstiness", a.burstiness, "vLLM: gamma arrivals of this shape (1 = Poisson; lower = burstier)")
                         ->check(CLI::PositiveNumber);
  auto* prompt = sub.add_option("--prompt-tokens", a.prompt_tokens, "Prompt length (default 128)")->check(CLI::PositiveNumber);
  auto* rin = sub.add_option("--random-input-len", a.prompt_tokens, "vLLM's name for --prompt-tokens")->check(CLI::PositiveNumber);
  auto* output = sub.add_option("--output-tokens", a.output_tokens, "Output length, sent as max_tokens with ignore_eos (default 64)")
                     ->check(CLI::PositiveNumber);
  auto* rout = sub.add_option("--random-output-len", a.output_tokens, "vLLM's name for --output-tokens")->check(CLI::PositiveNumber);
  sub.add_option("--random-range-ratio", a.range_ratio, "vLLM: lengths uniform in L x (1 - r, 1 + r)")->check(CLI::Range(0.0, 0.999));
  sub.add_option("--dataset-name", a.dataset_name, "vLLM: random (uniform lengths) | sharegpt (ShareGPT's length distribution, or --dataset-path's)")
      ->check(CLI::IsMember({"random", "sharegpt"}));
  auto* dataset = sub.add_option("--dataset", a.dataset, "ShareGPT JSON or JSONL file for prompt and output lengths");
  auto* dataset_path = sub.add_option("--dataset-path", a.dataset, "vLLM's name for --dataset");
  sub.add_option("--warmup", a.warmup, "Warm-up requests left out of the metrics")->check(CLI::NonNegativeNumber);
  sub.add_option("--seed", a.seed, "Seed of the plan");
  sub.add_option("--max-model-len", a.max_model_len, "Clip prompt + output to this (default 2048)")->check(CLI::PositiveNumber);
  sub.add_option("--goodput", a.goodput, "vLLM: SLOs of goodput, ttft:MS tpot:MS e2el:MS (the scenario's slo)");
  sub.add_option("--percentile-metrics", a.percentile_metrics, "vLLM: metrics of the result JSON's percentiles, e.g. ttft,tpot,itl");
  sub.add_option("--metric-percentiles", a.metric_percentiles, "vLLM: percentiles reported, e.g. 50,90,99");
  sub.add_flag("--ignore-eos", a.ignore_eos, "vLLM: outputs run to the planned length (the default here)");
  sub.add_flag("--no-ignore-eos", a.no_ignore_eos, "Let the server stop at its end-of-sequence token");
  sub.add_option("--extra-body", a.extra_body, "JSON object merged into every request body, e.g. '{\"top_k\": 20}'");
  sub.add_option("--structured-output", a.structured_output,
                 "Send JSON schemas as response_format: builtin (100 generated schemas) or FILE (a JSON array of "
                 "schemas, or one a line); the report gives the valid-output rate and the cost");
  sub.add_option("--structured-fraction", a.structured_fraction,
                 "Share of requests that carry a schema (default 1; below 1, constrained and unconstrained side by side)");
  sub.add_option("--max-error-rate", a.max_error_rate,
                 "Fail (exit 1) when more than this share of a run's requests fail (default 0.05); all failing always fails")
      ->check(CLI::Range(0.0, 1.0));
  sub.add_flag("--no-preflight", a.no_preflight, "Skip the one request sent before the load to check the endpoint");
  sub.add_option("--name", a.name, "Run name (output folder results/runs/NAME; default bench-YYYYmmdd-HHMMSS)");
  sub.add_option("--out,-o", a.out, "Output folder");
  sub.add_flag("--force", a.force, "Overwrite the output folder when it already holds files");
  sub.add_option("--set", a.overrides, "Override a scenario value: key.path=value (repeatable)");
  sub.add_flag("--quiet,-q", a.quiet, "No progress line and no console summary");
  sub.add_flag("--no-plots", a.no_plots, "Skip gnuplot figures");
  sub.add_flag("--save-result", a.save_result, "vLLM: also write vLLM's result JSON (as --result-format vllm)");
  sub.add_option("--result-format", a.result_format, "servelab (the run folder) | vllm (also vLLM's --save-result JSON)")
      ->check(CLI::IsMember({"servelab", "vllm"}));
  sub.add_option("--result-dir", a.result_dir, "vLLM: folder of the result JSON (default the run folder)");
  sub.add_option("--result-filename", a.result_filename, "vLLM: name of the result JSON (default timestamped)");

  // Flags that say the same thing twice, or two different things: refused, naming both.
  url->excludes(base_url);
  rate->excludes(request_rate)->excludes(concurrency);
  request_rate->excludes(concurrency);
  n->excludes(num_prompts)->excludes(duration);
  num_prompts->excludes(duration);
  concurrency->excludes(max_conc)->excludes(arrival)->excludes(burstiness);
  arrival->excludes(burstiness);
  api->excludes(endpoint);
  prompt->excludes(rin);
  output->excludes(rout);
  dataset->excludes(dataset_path);
}

Scenario bench_scenario(const BenchArgs& a) {
  nlohmann::ordered_json s;
  s["name"] = a.name.empty() ? "bench-" + timestamp_now() : a.name;
  s["seed"] = a.seed;
  nlohmann::ordered_json t;
  if (a.urls.size() == 1) t["url"] = a.urls[0];
  else t["urls"] = a.urls;
  if (!a.model.empty()) t["model"] = a.model;
  if (!a.api.empty()) t["api"] = a.api;
  else if (a.endpoint == "/v1/chat/completions") t["api"] = "chat";
  else if (a.endpoint == "/v1/completions") t["api"] = "completions";
  t["timeout_s"] = a.timeout_s;
  t["balance"] = a.balance;
  if (!a.tokenizer.empty()) t["tokenizer"] = a.tokenizer;
  for (const auto& h : a.headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0)
      throw ScenarioError({"--header: must be 'Name: value' (got '" + h + "')"});
    std::string v = h.substr(colon + 1);
    while (!v.empty() && v.front() == ' ') v.erase(v.begin());
    t["headers"][h.substr(0, colon)] = v;
  }
  if (a.no_ignore_eos) t["ignore_eos"] = false;
  if (!a.extra_body.empty()) {
    const auto j = nlohmann::json::parse(a.extra_body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw ScenarioError({"--extra-body: must be a JSON object (got " + a.extra_body + ")"});
    t["extra_body"] = a.extra_body;
  }
  t["max_error_rate"] = a.max_error_rate;
  if (a.no_preflight) t["preflight"] = false;
  if (a.max_model_len > 0) s["engine"]["max_model_len"] = a.max_model_len;

  nlohmann::ordered_json w;
  std::vector<std::string> rates_yaml;  // .inf is YAML, not JSON: spliced into the text below
  if (a.concurrency > 0) {
    w["concurrency"] = a.concurrency;
  } else {
    nlohmann::ordered_json arr;
    if (a.burstiness != 1.0) arr = {{"process", "gamma"}, {"cv", 1.0 / std::sqrt(a.burstiness)}};
    else arr = {{"process", a.arrival}};
    if (a.max_concurrency > 0) arr["max_concurrency"] = a.max_concurrency;
    w["arrival"] = arr;
    for (const auto& r : a.rates) {
      const double v = parse_rate(r);
      if (!(v > 0)) throw ScenarioError({"--rate: must be > 0 requests/s or inf (got '" + r + "')"});
      if (std::isinf(v)) rates_yaml.push_back(".inf");
      else rates_yaml.push_back(nlohmann::json(v).dump());
    }
    w["rates"] = "@RATES@";
  }
  if (a.duration_s > 0) w["duration_s"] = a.duration_s;
  else w["n_requests"] = a.n;
  if (a.warmup > 0) w["warmup_requests"] = a.warmup;
  if (!a.dataset.empty()) {
    w["prompt_tokens"] = {{"dataset", a.dataset}};
    w["output_tokens"] = {{"dataset", a.dataset}};
  } else if (a.dataset_name == "sharegpt") {
    w["prompt_tokens"] = {{"dist", "sharegpt"}};
    w["output_tokens"] = {{"dist", "sharegpt"}};
  } else {
    w["prompt_tokens"] = length(a.prompt_tokens, a.range_ratio);
    w["output_tokens"] = length(a.output_tokens, a.range_ratio);
  }
  if (!a.structured_output.empty())
    w["structured_output"] = {{"schemas", a.structured_output}, {"fraction", a.structured_fraction}};
  else if (a.structured_fraction != 1.0)
    throw ScenarioError({"--structured-fraction: needs --structured-output builtin|FILE"});
  s["workload"] = w;
  for (const auto& g : a.goodput) {
    const auto [key, ms] = parse_goodput(g);
    s["slo"][key == "ttft" ? "ttft_ms" : key == "tpot" ? "tpot_ms" : "e2e_ms"] = ms;
  }
  if (!a.metric_percentiles.empty()) {
    nlohmann::ordered_json ps = nlohmann::ordered_json::array();
    std::stringstream in(a.metric_percentiles);
    for (std::string item; std::getline(in, item, ',');) {
      try {
        ps.push_back(std::stod(item));
      } catch (const std::exception&) {
        throw ScenarioError({"--metric-percentiles: must be numbers separated by commas, e.g. 50,90,99 (got '" +
                             a.metric_percentiles + "')"});
      }
    }
    s["report"]["percentiles"] = ps;
  }
  s["target"] = t;  // after workload: the hook adds the "http" strategy
  std::string text = s.dump(2);
  if (!rates_yaml.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < rates_yaml.size(); ++i) list += (i ? ", " : "") + rates_yaml[i];
    text.replace(text.find("\"@RATES@\""), 9, list + "]");
  }
  try {
    return load_scenario_text(text, "bench", a.overrides);
  } catch (const ScenarioError& e) {
    std::vector<std::string> named;
    for (const auto& m : e.messages) named.push_back(name_the_flag(m));
    throw ScenarioError(named);
  }
}

namespace {

double percentile(std::vector<double> v, double q) {  // numpy's default (linear)
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1.0) * q / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string percentile_key(double q) {
  std::ostringstream o;
  o << q;
  return o.str();
}

}  // namespace

nlohmann::ordered_json vllm_result_json(const std::string& run_label, const std::vector<RequestRecord>& records,
                                        const BenchArgs& a, double rate, const std::vector<double>& percentiles,
                                        const std::vector<std::string>& metrics) {
  std::vector<double> ttft, tpot, itl, e2el, ttfts;
  std::vector<int> input_lens, output_lens;
  std::vector<std::vector<double>> itls;
  std::vector<std::string> errors;
  double t_first = std::numeric_limits<double>::infinity(), t_last = 0.0;
  long long total_in = 0, total_out = 0;
  int completed = 0, n_good = 0;
  double slo_ttft = 0, slo_tpot = 0, slo_e2e = 0;
  for (const auto& g : a.goodput) {
    const size_t colon = g.find(':');
    const double ms = std::atof(g.c_str() + colon + 1);
    if (g.rfind("ttft", 0) == 0) slo_ttft = ms;
    if (g.rfind("tpot", 0) == 0) slo_tpot = ms;
    if (g.rfind("e2el", 0) == 0) slo_e2e = ms;
  }
  for (const auto& r : records) {
    if (r.run != run_label || r.warmup) continue;
    t_first = std::min(t_first, r.arrival_s);
    t_last = std::max(t_last, r.end_s);
    input_lens.push_back(r.prompt_tokens);
    if (r.status != RecordStatus::ok) {
      output_lens.push_back(0);
      ttfts.push_back(0.0);
      itls.emplace_back();
      errors.push_back(r.error.empty() ? to_string(r.status) : r.error);
      continue;
    }
    errors.emplace_back();
    ++completed;
    total_in += r.prompt_tokens;
    total_out += r.output_tokens;
    output_lens.push_back(r.output_tokens);
    const double ft = (r.first_token_s - r.arrival_s);
    ttfts.push_back(ft);
    ttft.push_back(ft * 1000.0);
    const double e2 = (r.end_s - r.arrival_s) * 1000.0;
    e2el.push_back(e2);
    std::vector<double> gaps;
    for (size_t i = 1; i < r.token_times_s.size(); ++i) gaps.push_back(r.token_times_s[i] - r.token_times_s[i - 1]);
    for (double g : gaps) itl.push_back(g * 1000.0);
    itls.push_back(gaps);
    double tp = 0.0;
    if (r.output_tokens > 1) {
      tp = (r.end_s - r.first_token_s) * 1000.0 / (r.output_tokens - 1);
      tpot.push_back(tp);
    }
    if ((slo_ttft == 0 || ft * 1000.0 <= slo_ttft) && (slo_tpot == 0 || tp <= slo_tpot) && (slo_e2e == 0 || e2 <= slo_e2e))
      ++n_good;
  }
  const double duration = t_last > t_first ? t_last - t_first : 0.0;
  nlohmann::ordered_json j;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
  j["date"] = date;
  j["backend"] = "openai-chat";
  if (a.api != "chat" && a.endpoint != "/v1/chat/completions") j["backend"] = "openai";
  j["model_id"] = a.model;
  j["tokenizer_id"] = a.tokenizer.empty() ? a.model : a.tokenizer;
  j["num_prompts"] = static_cast<int>(input_lens.size());
  j["request_rate"] = std::isinf(rate) ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(rate);
  j["burstiness"] = a.burstiness;
  j["max_concurrency"] = a.max_concurrency > 0 ? nlohmann::ordered_json(a.max_concurrency) : nlohmann::ordered_json(nullptr);
  j["duration"] = duration;
  j["completed"] = completed;
  j["total_input_tokens"] = total_in;
  j["total_output_tokens"] = total_out;
  j["request_throughput"] = duration > 0 ? completed / duration : 0.0;
  j["request_goodput"] = a.goodput.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(duration > 0 ? n_good / duration : 0.0);
  j["output_throughput"] = duration > 0 ? total_out / duration : 0.0;
  j["total_token_throughput"] = duration > 0 ? (total_in + total_out) / duration : 0.0;
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["generated_texts"] = std::vector<std::string>(input_lens.size());
  j["errors"] = errors;
  auto stats = [&](const std::string& name, const std::vector<double>& v) {
    if (std::find(metrics.begin(), metrics.end(), name) == metrics.end()) return;
    const double mean = v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    double var = 0.0;
    for (double x : v) var += (x - mean) * (x - mean);
    j["mean_" + name + "_ms"] = mean;
    j["median_" + name + "_ms"] = percentile(v, 50);
    j["std_" + name + "_ms"] = v.empty() ? 0.0 : std::sqrt(var / static_cast<double>(v.size()));
    for (double q : percentiles) j["p" + percentile_key(q) + "_" + name + "_ms"] = percentile(v, q);
  };
  stats("ttft", ttft);
  stats("tpot", tpot);
  stats("itl", itl);
  stats("e2el", e2el);
  return j;
}

}  // namespace servelab::cli
