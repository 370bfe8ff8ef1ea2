// Scenario plumbing: locations, error collection, names, the sweep's derived counts, and load_scenario (read → override →
// parse → resolve → validate). The YAML walk is in scenario_parse.cpp, the checks in
// scenario_validate.cpp.
#include "loadgen/scenario.h"

#include "loadgen/records/gate_metrics.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "loadgen/overrides.h"
#include "loadgen/scenario_parse.h"

namespace servelab {

std::string SourceLoc::str() const {
  if (!override_text.empty()) {
    std::string s = "--set ";
    return s.append(override_text);
  }
  std::string s = file.empty() ? "<scenario>" : file;
  if (line > 0) {
    s += ':';
    s += std::to_string(line);
    s += ':';
    s += std::to_string(col);
  }
  return s;
}

SourceLoc SourceMap::find(const std::string& path) const {
  std::string p = path;
  for (;;) {
    if (auto it = locs_.find(p); it != locs_.end()) return it->second;
    const size_t cut = p.find_last_of(".[");
    if (cut == std::string::npos || cut == 0) break;
    p.resize(cut);
  }
  if (auto it = locs_.find(""); it != locs_.end()) return it->second;
  SourceLoc loc;
  loc.file = file_;
  return loc;
}

void Diagnostics::error(const std::string& path, const std::string& what) {
  error_at(path, path + " " + what);
}

void Diagnostics::error_at(const std::string& path, const std::string& message) {
  errors_.push_back({map_->find(path), message});
  failed_paths_.push_back(path);
}

namespace {
/// a is b, or a key path above it ("" is above everything).
bool is_at_or_above(const std::string& a, const std::string& b) {
  if (a.empty() || a == b) return true;
  return b.size() > a.size() && b.compare(0, a.size(), a) == 0 && (b[a.size()] == '.' || b[a.size()] == '[');
}
}  // namespace

bool Diagnostics::failed(const std::string& path) const {
  for (const std::string& f : failed_paths_)
    if (is_at_or_above(f, path) || is_at_or_above(path, f)) return true;
  return false;
}

std::vector<std::string> Diagnostics::messages() const {
  std::vector<Entry> sorted = errors_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    const bool ao = !a.loc.override_text.empty(), bo = !b.loc.override_text.empty();
    if (ao != bo) return ao;
    if (ao) return a.loc.override_index < b.loc.override_index;
    if (a.loc.line != b.loc.line) return a.loc.line < b.loc.line;
    return a.loc.col < b.loc.col;
  });
  std::vector<std::string> out;
  for (const Entry& e : sorted) {
    std::string m = e.loc.str() + ": " + e.message;
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(std::move(m));
  }
  return out;
}

namespace {
std::string join_lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& m : v) s += (s.empty() ? "" : "\n") + m;
  return s;
}
}  // namespace

ScenarioError::ScenarioError(std::vector<std::string> msgs)
    : std::runtime_error(join_lines(msgs)), messages(std::move(msgs)) {}

const char* to_string(LoadMode m) {
  switch (m) {
    case LoadMode::open_loop: return "open_loop";
    case LoadMode::closed_loop: return "closed_loop";
    case LoadMode::trace: return "trace";
  }
  return "?";
}

const std::vector<std::string>& gate_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : gate_metrics()) v.push_back(m.scenario_name);  // the one registry
    return v;
  }();
  return names;
}

bool gate_metric_higher_is_better(const std::string& metric) {
  const GateMetric* m = find_gate_metric(metric);
  return m && m->higher_is_better;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3)) + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    // A prefix ("max_batch" for "max_batch_size") is close whatever the length difference.
    if (word.size() >= 4 && c.compare(0, word.size(), word) == 0) d = std::min<size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string describe(const Scenario& s) {
  std::ostringstream o;
  const size_t ns = s.strategies.size();
  o << ns << " strateg" << (ns == 1 ? "y" : "ies");
  const auto& w = s.workload;
  const auto per = [&](const char* unit) {
    if (w.n_requests > 0) o << ", " << w.n_requests << " requests " << unit;
    else o << ", " << w.duration_s << " s " << unit;
    if (w.warmup_requests > 0) o << " (+" << w.warmup_requests << " warm-up)";
  };
  switch (w.mode) {
    case LoadMode::open_loop: {
      const size_t nr = w.rates.size();
      o << " × " << nr << " rate" << (nr == 1 ? "" : "s");
      per("per rate");
      o << ", " << to_string(w.arrival.process) << " arrivals";
      if (w.arrival.process == ArrivalProcess::gamma) o << " (cv " << w.arrival.cv << ")";
      if (w.arrival.ramp_to > 0) o << " ramping to " << w.arrival.ramp_to << " req/s";
      if (w.arrival.max_concurrency > 0) o << ", at most " << w.arrival.max_concurrency << " in flight";
      if (w.sessions.enabled()) o << ", sessions of " << w.sessions.turns << " turns";
      break;
    }
    case LoadMode::closed_loop:
      if (w.concurrencies.size() > 1) {
        o << " × " << w.concurrencies.size() << " runs, closed loop at concurrency";
        for (size_t i = 0; i < w.concurrencies.size(); ++i) o << (i ? ", " : " ") << w.concurrencies[i];
      } else {
        o << " × 1 run, closed loop at concurrency " << w.concurrency;
      }
      per("per run");
      break;
    case LoadMode::trace:
      o << " × 1 run, trace replay";
      if (w.trace_speed != 1.0) o << " at " << w.trace_speed << "x speed";
      break;
  }
  if (!w.prefix_groups.empty()) o << ", " << w.prefix_groups.size() << " prefix groups";
  if (w.repeat > 1) o << ", each point " << w.repeat << " times";
  if (s.target) {  // the engine settings are unused: the server at the URL answers
    o << ", target " << s.target->urls.front();
    if (s.target->urls.size() > 1) o << " (+" << s.target->urls.size() - 1 << " replicas)";
  } else {
    o << ", model " << (s.model.path.empty() ? s.model.preset : s.model.path) << " on " << to_string(s.backend.kind);
  }
  if (!s.gates.empty()) o << ", " << s.gates.size() << " gate" << (s.gates.size() == 1 ? "" : "s");
  return o.str();
}

Scenario load_scenario_text(const std::string& yaml, const std::string& file, const std::vector<std::string>& overrides) {
  Scenario s;
  s.source_file = file;
  s.source.set_file(file);
  Diagnostics diag(s.source);
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    std::string msg = file;
    if (e.mark.line >= 0) msg += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw ScenarioError({msg + ": YAML syntax error: " + e.msg});
  }
  std::vector<std::string> errors;
  const auto applied = apply_overrides(root, overrides, errors);
  parse_scenario(root, applied, s, diag);
  s.resolve(diag);
  s.validate(diag);
  for (auto& m : diag.messages()) errors.push_back(std::move(m));
  if (!errors.empty()) throw ScenarioError(errors);
  return s;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError({path + ": cannot open scenario file"});
  std::ostringstream text;
  text << in.rdbuf();
  return load_scenario_text(text.str(), path, overrides);
}

std::vector<double> Scenario::sweep_rates() const {
  if (workload.mode == LoadMode::open_loop) return workload.rates;
  if (workload.mode == LoadMode::closed_loop && !workload.concurrencies.empty())
    return std::vector<double>(workload.concurrencies.begin(), workload.concurrencies.end());
  return {0.0};
}

int WorkloadSpec::max_prefix_tokens() const {
  int longest = 0;
  for (const PrefixGroupSpec& g : prefix_groups) longest = std::max(longest, g.tokens);
  return shared_prefix_tokens + longest;
}

int Scenario::planned_requests() const {
  return workload.n_requests > 0 ? workload.n_requests + workload.warmup_requests : -1;
}

}  // namespace servelab
