#include "loadgen/records/json_int.h"
#include "analysis/summary.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "analysis/json_format.h"
#include "loadgen/records/rate.h"

namespace servelab::analysis {
namespace {

/// j[key] as a planned-request count, 0 when absent; throws when it is not an integer in
/// [0, kMaxRequestsPerRun] (a bare get<int> would wrap a huge value silently).
int request_count(const nlohmann::ordered_json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxRequestsPerRun ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(kMaxRequestsPerRun)))
    throw std::invalid_argument(std::string("\"") + key + "\" must be an integer in [0, " +
                                std::to_string(kMaxRequestsPerRun) + "] (got " + it->dump() + ")");
  return static_cast<int>(it->get<int64_t>());
}

/// RunInfo's mode, rate and concurrency from a runs.json or summary.json run. Without "mode"
/// (files written before it existed) the label decides: "@c<N>" closed, "@trace" trace, else a
/// null rate means max.
void read_mode_and_rate(const nlohmann::ordered_json& j, RunInfo& r) {
  const auto rate = j.find("rate");
  const bool has_rate = rate != j.end() && !rate->is_null();
  r.concurrency = j.value("concurrency", 0);
  if (auto m = j.find("mode"); m != j.end() && !m->is_null()) {
    r.mode = parse_run_mode(m->get<std::string>());
  } else if (has_rate) {
    r.mode = RunMode::open;
  } else {
    const auto at = r.label.rfind('@');
    const std::string suffix = at == std::string::npos ? "" : r.label.substr(at + 1);
    if (suffix == "trace") {
      r.mode = RunMode::trace;
    } else if (suffix.size() > 1 && suffix.size() <= 10 && suffix[0] == 'c' &&
               suffix.find_first_not_of("0123456789", 1) == std::string::npos) {
      r.mode = RunMode::closed;
      r.concurrency = std::stoi(suffix.substr(1));
    } else {
      r.mode = RunMode::max;
    }
  }
  switch (r.mode) {
    case RunMode::open: r.rate = has_rate ? rate->get<double>() : std::numeric_limits<double>::quiet_NaN(); break;
    case RunMode::max: r.rate = std::numeric_limits<double>::infinity(); break;
    default: r.rate = std::numeric_limits<double>::quiet_NaN(); break;
  }
}

}  // namespace

const char* to_string(RunMode m) {
  switch (m) {
    case RunMode::open: return "open";
    case RunMode::max: return "max";
    case RunMode::closed: return "closed";
    case RunMode::trace: return "trace";
    case RunMode::unknown: return "unknown";
  }
  return "?";
}

RunMode parse_run_mode(const std::string& s) {
  for (RunMode m : {RunMode::open, RunMode::max, RunMode::closed, RunMode::trace, RunMode::unknown})
    if (s == to_string(m)) return m;
  throw std::invalid_argument("mode must be open, max, closed, trace or unknown (got '" + s + "')");
}

std::string format_run_rate(const RunInfo& r) {
  switch (r.mode) {
    case RunMode::open: return format_rate(r.rate);
    case RunMode::max: return "max";
    case RunMode::closed: return "c" + std::to_string(r.concurrency);
    case RunMode::trace: return "trace";
    case RunMode::unknown: return "?";
  }
  return "?";
}

std::string RunInfo::strategy_name() const {
  if (!strategy.empty()) return strategy;
  if (!batching.empty() && !kv.empty()) return batching + "-" + kv;
  if (!batching.empty()) return batching;
  return label;
}

void RunInfo::validate() const {
  if (label.empty()) throw std::invalid_argument("run.label must not be empty");
  if (!batching.empty() && batching != "static" && batching != "dynamic" && batching != "continuous")
    throw std::invalid_argument("run " + label + ": batching must be static, dynamic or continuous (got '" +
                                batching + "')");
  if (!kv.empty() && kv != "naive" && kv != "paged")
    throw std::invalid_argument("run " + label + ": kv must be naive or paged (got '" + kv + "')");
  const std::string at = "run " + label + " (mode " + to_string(mode) + "): ";
  switch (mode) {
    case RunMode::open:
      if (!(rate > 0.0 && std::isfinite(rate)))
        throw std::invalid_argument(at + "rate must be finite and > 0 requests/s (got " + format_rate(rate) +
                                    "; all-at-once runs have mode max)");
      break;
    case RunMode::max:
      if (!(std::isinf(rate) && rate > 0))
        throw std::invalid_argument(at + "rate must be +infinity (got " + format_rate(rate) + ")");
      break;
    case RunMode::closed:
      if (concurrency < 1)
        throw std::invalid_argument(at + "concurrency must be >= 1 (got " + std::to_string(concurrency) + ")");
      [[fallthrough]];
    case RunMode::trace:
    case RunMode::unknown:
      if (!std::isnan(rate))
        throw std::invalid_argument(at + "has no offered rate: rate must be NaN (null), got " + format_rate(rate));
      break;
  }
  if (repeats < 1 || repeats > 1000)
    throw std::invalid_argument("run " + label + ": repeats must be in [1, 1000] (got " + std::to_string(repeats) + ")");
  if (n_requests < 0 || n_requests > kMaxRequestsPerRun)
    throw std::invalid_argument("run " + label + ": n_requests must be in [0, " +
                                std::to_string(kMaxRequestsPerRun) + "] (got " + std::to_string(n_requests) + ")");
}

std::vector<std::string> Summary::strategies() const {
  std::vector<std::string> out;
  for (const auto& r : runs) {
    const std::string s = r.info.strategy_name();
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

const MetricStats* RunSummary::stat(const std::string& metric) const {
  for (const auto& [k, v] : stats)
    if (k == metric) return &v;
  return nullptr;
}

namespace {

/// One point's summary: its metrics, or with repetitions each one's, their mean and statistics.
RunSummary summarize_run(const RunInfo& info, const std::vector<RequestRecord>& records,
                         const std::vector<StepRecord>& steps, const SloSpec& slo, const MetricsOptions& options,
                         const std::set<std::string>& labels_with_records) {
  RunSummary rs;
  rs.info = info;
  std::vector<int> ks;  // the repetitions with records (all when none has: a run that wrote none)
  for (int k = 1; k <= info.repeats; ++k)
    if (labels_with_records.count(repetition_label(info.label, k, info.repeats))) ks.push_back(k);
  if (ks.empty())
    for (int k = 1; k <= info.repeats; ++k) ks.push_back(k);
  // Per adapter: each run's records split by the adapter they named (steps are the run's, shared);
  // a repeated point's adapter the mean of its repetitions' metrics, as the point's own.
  std::map<std::string, std::vector<RunMetrics>> by_lora;
  bool any_lora = false;
  for (int k : ks) {
    const std::string label = repetition_label(info.label, k, info.repeats);
    std::map<std::string, std::vector<RequestRecord>> split;
    for (const RequestRecord& r : records)
      if (r.run == label) {
        any_lora |= !r.lora.empty();
        split[r.lora].push_back(r);
      }
    for (const auto& [name, recs] : split) by_lora[name].push_back(compute_metrics(label, recs, {}, slo, options));
  }
  if (any_lora)
    for (auto& [name, runs] : by_lora) rs.by_lora.emplace_back(name, runs.size() == 1 ? runs.front() : mean_metrics(runs));
  rs.roofline = roofline_efficiency(info.label, steps, info.roofline_ceilings);
  rs.lora_loads = lora_loads(info.label, steps);
  if (info.repeats <= 1) {
    rs.metrics = compute_metrics(info.label, records, steps, slo, options);
    return rs;
  }
  for (int k : ks)
    rs.repetitions.push_back(compute_metrics(repetition_label(info.label, k, info.repeats), records, steps, slo, options));
  rs.metrics = mean_metrics(rs.repetitions);
  std::vector<nlohmann::ordered_json> js(rs.repetitions.begin(), rs.repetitions.end());
  for (const auto& path : headline_metrics(options.percentiles)) {
    std::vector<double> values;
    for (const auto& j : js) values.push_back(metric_at(j, path));
    rs.stats.emplace_back(path, stats_of(values));
  }
  return rs;
}

}  // namespace

Summary build_summary(const ScenarioInfo& scenario, const Environment& environment, const SloSpec& slo,
                      const std::vector<RunInfo>& infos, const std::vector<RequestRecord>& records,
                      const std::vector<StepRecord>& steps, const MetricsOptions& options) {
  slo.validate();
  options.validate();
  Summary s;
  s.scenario = scenario;
  s.environment = environment;
  s.slo = slo;
  s.options = options;
  std::set<std::string> known;
  for (const auto& info : infos) {
    info.validate();
    if (!known.insert(info.label).second)
      throw std::invalid_argument("run label '" + info.label + "' appears twice");
    for (int k = 1; info.repeats > 1 && k <= info.repeats; ++k) known.insert(repetition_label(info.label, k, info.repeats));
  }
  std::set<std::string> with_records;
  for (const auto& r : records) with_records.insert(r.run);
  std::vector<RunInfo> all = infos;
  std::set<std::string> unknown;
  for (const auto& r : records)
    if (!known.count(r.run)) unknown.insert(r.run);
  for (const auto& st : steps)
    if (!known.count(st.run)) unknown.insert(st.run);
  for (const auto& label : unknown) {
    RunInfo info;
    info.label = label;
    info.mode = RunMode::unknown;
    info.rate = std::numeric_limits<double>::quiet_NaN();
    all.push_back(info);
  }
  for (const auto& info : all) s.runs.push_back(summarize_run(info, records, steps, slo, options, with_records));
  return s;
}

void to_json(nlohmann::ordered_json& j, const RunInfo& r) {
  j = nlohmann::ordered_json::object();
  j["label"] = r.label;
  j["strategy"] = r.strategy_name();
  j["batching"] = r.batching;
  j["kv"] = r.kv;
  j["backend"] = r.backend;
  j["mode"] = to_string(r.mode);
  j["rate"] = exact_number(r.rate);
  if (r.mode == RunMode::closed) j["concurrency"] = r.concurrency;
  j["n_requests"] = r.n_requests;
  if (r.repeats > 1) j["repeats"] = r.repeats;
  if (!r.seeds.empty()) j["seeds"] = r.seeds;
  j["config"] = r.config.is_null() ? nlohmann::ordered_json::object() : r.config;
  if (r.roofline_ceilings) {
    nlohmann::ordered_json c;
    to_json(c, *r.roofline_ceilings);
    j["roofline_ceilings"] = c;
  }
  if (r.accuracy) j["accuracy"] = *r.accuracy;
}

void from_json(const nlohmann::ordered_json& j, RunInfo& r) {
  r.label = j.at("label").get<std::string>();
  r.strategy = j.value("strategy", std::string());
  r.batching = j.value("batching", std::string());
  r.kv = j.value("kv", std::string());
  r.backend = j.value("backend", std::string());
  read_mode_and_rate(j, r);
  r.n_requests = request_count(j, "n_requests");
  // runs.json writes "repeats": N and "seeds"; a summary's run holds them in its "repeats" object.
  r.repeats = 1;
  r.seeds.clear();
  if (auto it = j.find("repeats"); it != j.end() && it->is_number_integer()) {
    r.repeats = it->get<int>();
    r.seeds = j.value("seeds", std::vector<uint64_t>{});
  } else if (it != j.end() && it->is_object()) {
    if (auto labels = it->find("labels"); labels != it->end() && labels->is_array())
      r.repeats = static_cast<int>(labels->size());
    r.seeds = it->value("seeds", std::vector<uint64_t>{});
  }
  r.config = j.contains("config") ? j["config"] : nlohmann::ordered_json::object();
  r.roofline_ceilings.reset();
  if (auto c = j.find("roofline_ceilings"); c != j.end() && !c->is_null()) {
    RooflineCeilings rc;
    try {
      from_json(*c, rc);
    } catch (const std::exception& e) {
      throw std::invalid_argument("run " + r.label + ": roofline_ceilings: " + e.what());
    }
    r.roofline_ceilings = rc;
  }
  r.accuracy.reset();
  if (auto a = j.find("accuracy"); a != j.end() && !a->is_null()) {
    try {
      r.accuracy = a->get<FormatAccuracy>();
    } catch (const std::exception& e) {
      throw std::invalid_argument("run " + r.label + ": " + e.what());
    }
  }
}

void to_json(nlohmann::ordered_json& j, const ScenarioInfo& s) {
  j = nlohmann::ordered_json::object();
  j["name"] = s.name;
  j["file"] = s.file;
  j["seed"] = s.seed;
  if (s.details.is_object())
    for (const auto& [k, v] : s.details.items())
      if (k != "name" && k != "file" && k != "seed") j[k] = v;
}

void from_json(const nlohmann::ordered_json& j, ScenarioInfo& s) {
  s.name = j.value("name", std::string());
  s.file = j.value("file", std::string());
  s.seed = j.value("seed", uint64_t{0});
  s.details = nlohmann::ordered_json::object();
  for (const auto& [k, v] : j.items())
    if (k != "name" && k != "file" && k != "seed") s.details[k] = v;
}

void to_json(nlohmann::ordered_json& j, const SloSpec& s) {
  // An unbounded latency is null here ("no bound"); an older summary never has one.
  j = {{"ttft_ms", exact_number(s.ttft_ms)},
       {"tpot_ms", exact_number(s.tpot_ms)},
       {"attainment", exact_number(s.attainment)},
       {"itl_ms", exact_number(s.itl_ms)},
       {"e2e_ms", exact_number(s.e2e_ms)}};
  if (!s.percentiles.empty()) {
    auto& a = j["percentiles"] = nlohmann::ordered_json::array();
    for (const auto& p : s.percentiles)
      a.push_back({{"metric", to_string(p.metric)},
                   {"percentile", exact_number(p.percentile)},
                   {"max_ms", exact_number(p.max_ms)}});
  }
}

void from_json(const nlohmann::ordered_json& j, SloSpec& s) {
  s = SloSpec{};
  auto bound = [&](const char* key, double dflt) {
    auto it = j.find(key);
    if (it == j.end()) return dflt;
    return it->is_null() ? HUGE_VAL : it->get<double>();
  };
  s.ttft_ms = bound("ttft_ms", s.ttft_ms);
  s.tpot_ms = bound("tpot_ms", s.tpot_ms);
  s.itl_ms = bound("itl_ms", s.itl_ms);
  s.e2e_ms = bound("e2e_ms", s.e2e_ms);
  s.attainment = j.value("attainment", s.attainment);
  if (auto it = j.find("percentiles"); it != j.end() && it->is_array())
    for (const auto& p : *it)
      s.percentiles.push_back({parse_slo_metric(p.at("metric").get<std::string>()), p.at("percentile").get<double>(),
                               p.at("max_ms").get<double>()});
}

void to_json(nlohmann::ordered_json& j, const MetricsOptions& o) {
  const auto& w = o.window;
  j = nlohmann::ordered_json::object();
  j["percentiles"] = nlohmann::ordered_json::array();
  for (double q : o.percentiles) j["percentiles"].push_back(exact_number(q));
  j["window"] = {{"skip_first_s", exact_number(w.skip_first_s)},
                 {"skip_last_s", exact_number(w.skip_last_s)},
                 {"skip_first_requests", w.skip_first_requests},
                 {"skip_last_requests", w.skip_last_requests},
                 {"description", w.describe()}};
}

void from_json(const nlohmann::ordered_json& j, MetricsOptions& o) {
  o = MetricsOptions{};
  o.percentiles = j.value("percentiles", std::vector<double>{});
  if (auto it = j.find("window"); it != j.end() && it->is_object()) {
    o.window.skip_first_s = it->value("skip_first_s", 0.0);
    o.window.skip_last_s = it->value("skip_last_s", 0.0);
    o.window.skip_first_requests = it->value("skip_first_requests", 0);
    o.window.skip_last_requests = it->value("skip_last_requests", 0);
  }
}

void to_json(nlohmann::ordered_json& j, const RunSummary& r) {
  // DESIGN.md's keys first, in its order; extras after.
  j = nlohmann::ordered_json::object();
  j["label"] = r.info.label;
  j["batching"] = r.info.batching;
  j["kv"] = r.info.kv;
  j["backend"] = r.info.backend;
  j["rate"] = exact_number(r.info.rate);
  j["n_requests"] = r.metrics.n_requests;
  j["n_failed"] = r.metrics.n_failed;
  j["strategy"] = r.info.strategy_name();
  j["mode"] = to_string(r.info.mode);
  if (r.info.mode == RunMode::closed) j["concurrency"] = r.info.concurrency;
  j["n_planned"] = r.info.n_requests;
  j["config"] = r.info.config.is_null() ? nlohmann::ordered_json::object() : r.info.config;
  j["metrics"] = r.metrics;
  if (r.structured) j["structured_output"] = *r.structured;
  if (r.roofline) j["roofline"] = *r.roofline;
  if (r.info.accuracy) j["accuracy"] = *r.info.accuracy;
  if (r.info.repeats > 1) {
    auto& rep = j["repeats"];
    rep["n"] = r.repetitions.size();
    rep["seeds"] = r.info.seeds;
    rep["labels"] = nlohmann::ordered_json::array();
    for (int k = 1; k <= r.info.repeats; ++k) rep["labels"].push_back(repetition_label(r.info.label, k, r.info.repeats));
    rep["stats"] = nlohmann::ordered_json::object();
    for (const auto& [path, st] : r.stats) rep["stats"][path] = st;
    rep["runs"] = nlohmann::ordered_json::array();
    for (const auto& m : r.repetitions) rep["runs"].push_back(m);
  }
  if (!r.by_lora.empty()) {
    auto& lora = j["lora"];
    lora = nlohmann::ordered_json::object();
    for (const auto& [name, m] : r.by_lora)
      lora[name.empty() ? "(base)" : name] = {{"n_requests", m.n_requests}, {"n_failed", m.n_failed}, {"metrics", m}};
  }
  if (r.lora_loads) j["lora_loads"] = *r.lora_loads;
}

void from_json(const nlohmann::ordered_json& j, RunSummary& r) {
  if (!j.is_object()) throw std::invalid_argument("each entry of \"runs\" must be an object");
  r.info = j.get<RunInfo>();
  r.info.n_requests = request_count(j, "n_planned");
  try {
    r.metrics = j.at("metrics").get<RunMetrics>();
  } catch (const std::exception& e) {
    throw std::invalid_argument("run " + r.info.label + ": metrics: " + e.what());
  }
  r.metrics.n_requests = j.value("n_requests", std::size_t{0});
  r.metrics.n_failed = j.value("n_failed", std::size_t{0});
  r.by_lora.clear();
  if (auto it = j.find("lora"); it != j.end() && it->is_object())
    for (const auto& [name, v] : it->items()) {
      RunMetrics m = v.at("metrics").get<RunMetrics>();
      m.n_requests = v.value("n_requests", std::size_t{0});
      m.n_failed = v.value("n_failed", std::size_t{0});
      r.by_lora.emplace_back(name == "(base)" ? "" : name, std::move(m));
    }
  r.lora_loads.reset();
  if (auto it = j.find("lora_loads"); it != j.end() && it->is_object()) r.lora_loads = it->get<LoraLoads>();
  r.structured.reset();
  if (j.contains("structured_output") && !j["structured_output"].is_null())
    r.structured = j["structured_output"].get<StructuredStats>();
  r.roofline.reset();
  if (auto it = j.find("roofline"); it != j.end() && !it->is_null()) {
    try {
      r.roofline = it->get<RooflineEfficiency>();
    } catch (const std::exception& e) {
      throw std::invalid_argument("run " + r.info.label + ": " + e.what());
    }
    r.info.roofline_ceilings = r.roofline->ceilings;
  }
  r.repetitions.clear();
  r.stats.clear();
  if (auto it = j.find("repeats"); it != j.end() && it->is_object()) {
    if (auto st = it->find("stats"); st != it->end() && st->is_object())
      for (const auto& [path, v] : st->items()) r.stats.emplace_back(path, v.get<MetricStats>());
    if (auto runs = it->find("runs"); runs != it->end() && runs->is_array())
      for (const auto& m : *runs) r.repetitions.push_back(m.get<RunMetrics>());
  }
}

void to_json(nlohmann::ordered_json& j, const Summary& s) {
  j = nlohmann::ordered_json::object();
  j["schema"] = kSummarySchema;
  j["scenario"] = s.scenario;
  j["environment"] = s.environment;
  j["slo"] = s.slo;
  j["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : s.runs) j["runs"].push_back(r);
  j["report"] = s.options;  // after DESIGN.md's keys: the percentiles and window every run used
}

void from_json(const nlohmann::ordered_json& j, Summary& s) {
  if (!j.is_object()) throw std::invalid_argument("a summary must be a JSON object");
  const std::string schema = j.value("schema", std::string());
  if (schema != kSummarySchema)
    throw std::invalid_argument("\"schema\" must be \"" + std::string(kSummarySchema) + "\" (got \"" +
                                schema + "\")");
  s = Summary{};
  if (j.contains("scenario")) s.scenario = j["scenario"].get<ScenarioInfo>();
  if (j.contains("environment")) s.environment = j["environment"].get<Environment>();
  if (j.contains("slo")) s.slo = j["slo"].get<SloSpec>();
  if (j.contains("report")) s.options = j["report"].get<MetricsOptions>();
  const auto& runs = j.at("runs");
  if (!runs.is_array()) throw std::invalid_argument("\"runs\" must be an array");
  for (const auto& r : runs) s.runs.push_back(r.get<RunSummary>());
}

std::string summary_text(const Summary& s) { return nlohmann::ordered_json(s).dump(2) + "\n"; }

void write_text_file(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot write");
  out << text;
  out.close();
  if (!out) throw std::runtime_error(path + ": write failed");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_summary(const std::string& path, const Summary& s) { write_text_file(path, summary_text(s)); }

Summary read_summary(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::ordered_json::parse(text).get<Summary>();
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

Summary read_summary_or_dir(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return read_summary((std::filesystem::path(path) / "summary.json").string());
  return read_summary(path);
}

}  // namespace servelab::analysis
