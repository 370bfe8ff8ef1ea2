#include "loadgen/records/json_int.h"
#include "analysis/summary.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
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

Summary build_summary(const ScenarioInfo& scenario, const Environment& environment, const SloSpec& slo,
                      const std::vector<RunInfo>& infos, const std::vector<RequestRecord>& records,
                      const std::vector<StepRecord>& steps) {
  slo.validate();
  Summary s;
  s.scenario = scenario;
  s.environment = environment;
  s.slo = slo;
  std::set<std::string> known;
  for (const auto& info : infos) {
    info.validate();
    if (!known.insert(info.label).second)
      throw std::invalid_argument("run label '" + info.label + "' appears twice");
  }
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
  for (const auto& info : all) s.runs.push_back({info, compute_metrics(info.label, records, steps, slo)});
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
  j["config"] = r.config.is_null() ? nlohmann::ordered_json::object() : r.config;
}

void from_json(const nlohmann::ordered_json& j, RunInfo& r) {
  r.label = j.at("label").get<std::string>();
  r.strategy = j.value("strategy", std::string());
  r.batching = j.value("batching", std::string());
  r.kv = j.value("kv", std::string());
  r.backend = j.value("backend", std::string());
  read_mode_and_rate(j, r);
  r.n_requests = request_count(j, "n_requests");
  r.config = j.contains("config") ? j["config"] : nlohmann::ordered_json::object();
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
  j = {{"ttft_ms", exact_number(s.ttft_ms)},
       {"tpot_ms", exact_number(s.tpot_ms)},
       {"attainment", exact_number(s.attainment)}};
}

void from_json(const nlohmann::ordered_json& j, SloSpec& s) {
  s = SloSpec{};
  s.ttft_ms = j.value("ttft_ms", s.ttft_ms);
  s.tpot_ms = j.value("tpot_ms", s.tpot_ms);
  s.attainment = j.value("attainment", s.attainment);
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
}

void to_json(nlohmann::ordered_json& j, const Summary& s) {
  j = nlohmann::ordered_json::object();
  j["schema"] = kSummarySchema;
  j["scenario"] = s.scenario;
  j["environment"] = s.environment;
  j["slo"] = s.slo;
  j["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : s.runs) j["runs"].push_back(r);
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
