#include "analysis/roofline_efficiency.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>

#include "analysis/json_format.h"

namespace servelab::analysis {

double RooflineShare::efficiency() const {
  return measured_s > 0.0 ? roofline_s / measured_s : std::numeric_limits<double>::quiet_NaN();
}

void RooflineShare::add(double roofline, double measured) {
  ++n_steps;
  roofline_s += roofline;
  measured_s += measured;
}

void RooflineShare::merge(const RooflineShare& other) {
  n_steps += other.n_steps;
  roofline_s += other.roofline_s;
  measured_s += other.measured_s;
}

void HostPauses::add(double gap) {
  if (!(gap > 0.0)) return;
  s += gap;
  max_s = std::max(max_s, gap);
  n_over_1ms += gap > 1e-3;
}

void HostPauses::merge(const HostPauses& other) {
  s += other.s;
  max_s = std::max(max_s, other.max_s);
  n_over_1ms += other.n_over_1ms;
}

void RooflineEfficiency::merge(const RooflineEfficiency& other) {
  host_pauses.merge(other.host_pauses);
  overall.merge(other.overall);
  prefill.merge(other.prefill);
  decode.merge(other.decode);
  mixed.merge(other.mixed);
  if (!ceilings) ceilings = other.ceilings;
}

const RooflineShare& RooflineEfficiency::of(StepClass c) const {
  switch (c) {
    case StepClass::prefill: return prefill;
    case StepClass::decode: return decode;
    case StepClass::mixed: return mixed;
  }
  return overall;
}

bool step_run_matches(const std::string& run, const std::string& label) {
  if (run.size() < label.size() || run.compare(0, label.size(), label) != 0) return false;
  return run.size() == label.size() || run[label.size()] == '#';
}

std::optional<RooflineEfficiency> roofline_efficiency(const std::string& label, const std::vector<StepRecord>& steps,
                                                      const std::optional<RooflineCeilings>& ceilings) {
  RooflineEfficiency e;
  // Each repetition's steps in start order: a pause follows a step that left requests running or
  // waiting (its counts are taken after it ran).
  std::map<std::string, std::vector<const StepRecord*>> by_run;
  for (const StepRecord& s : steps) {
    if (!s.roofline || !step_run_matches(s.run, label)) continue;
    by_run[s.run].push_back(&s);
    e.overall.add(s.roofline->seconds, s.duration_s);
    switch (s.roofline->step_class) {
      case StepClass::prefill: e.prefill.add(s.roofline->seconds, s.duration_s); break;
      case StepClass::decode: e.decode.add(s.roofline->seconds, s.duration_s); break;
      case StepClass::mixed: e.mixed.add(s.roofline->seconds, s.duration_s); break;
    }
  }
  if (e.overall.n_steps == 0) return std::nullopt;
  for (auto& [run, list] : by_run) {
    std::stable_sort(list.begin(), list.end(), [](const StepRecord* a, const StepRecord* b) { return a->start_s < b->start_s; });
    for (size_t i = 1; i < list.size(); ++i)
      if (list[i - 1]->n_running + list[i - 1]->n_waiting > 0)
        e.host_pauses.add(list[i]->start_s - list[i - 1]->start_s - list[i - 1]->duration_s);
  }
  e.ceilings = ceilings;
  return e;
}

void to_json(nlohmann::ordered_json& j, const RooflineShare& s) {
  j = nlohmann::ordered_json::object();
  j["efficiency"] = json_number(s.efficiency());
  // The sums unrounded (a decode step's roofline can be microseconds): read back, they give the
  // same efficiency to the bit, so a summary re-written from a read one keeps its bytes.
  j["roofline_s"] = exact_number(s.roofline_s);
  j["measured_s"] = exact_number(s.measured_s);
  j["n_steps"] = s.n_steps;
}

void from_json(const nlohmann::ordered_json& j, RooflineShare& s) {
  s.n_steps = j.at("n_steps").get<int64_t>();
  s.roofline_s = j.at("roofline_s").get<double>();
  s.measured_s = j.at("measured_s").get<double>();
}

void to_json(nlohmann::ordered_json& j, const RooflineEfficiency& e) {
  to_json(j, e.overall);
  auto& by = j["by_class"];
  by = nlohmann::ordered_json::object();
  for (StepClass c : {StepClass::prefill, StepClass::decode, StepClass::mixed}) by[to_string(c)] = e.of(c);
  if (e.ceilings) {
    nlohmann::ordered_json c;
    to_json(c, *e.ceilings);
    j["ceilings"] = c;
  } else {
    j["ceilings"] = nullptr;
  }
  j["host_pauses"] = {{"s", exact_number(e.host_pauses.s)},
                      {"max_s", exact_number(e.host_pauses.max_s)},
                      {"n_over_1ms", e.host_pauses.n_over_1ms}};
}

void from_json(const nlohmann::ordered_json& j, RooflineEfficiency& e) {
  try {
    from_json(j, e.overall);
    const auto& by = j.at("by_class");
    from_json(by.at("prefill"), e.prefill);
    from_json(by.at("decode"), e.decode);
    from_json(by.at("mixed"), e.mixed);
    e.ceilings.reset();
    if (auto c = j.find("ceilings"); c != j.end() && !c->is_null()) {
      RooflineCeilings rc;
      from_json(*c, rc);
      e.ceilings = rc;
    }
    e.host_pauses = {};
    if (auto p = j.find("host_pauses"); p != j.end()) {  // absent in summaries written before 2026-12-01
      e.host_pauses.s = p->at("s").get<double>();
      e.host_pauses.max_s = p->at("max_s").get<double>();
      e.host_pauses.n_over_1ms = p->at("n_over_1ms").get<int64_t>();
    }
  } catch (const std::exception& ex) {
    throw std::invalid_argument(std::string("roofline: ") + ex.what());
  }
}

std::string format_host_pauses(const HostPauses& p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f (%lld > 1 ms)", p.s, static_cast<long long>(p.n_over_1ms));
  return buf;
}

std::string format_efficiency(const std::optional<RooflineEfficiency>& e, const std::string& backend) {
  if (!e) return backend == "sim" ? "sim" : "-";
  const double x = e->overall.efficiency();
  if (!std::isfinite(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

std::string format_ceilings(const RooflineCeilings& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "copy %.1f GB/s, GEMM %.1f GFLOP/s (%s)", c.copy_bytes_s / 1e9, c.gemm_flops / 1e9,
                to_string(c.source));
  return buf;
}

}  // namespace servelab::analysis
