#include "analysis/lora_loads.h"

#include <algorithm>

#include "analysis/json_format.h"
#include "analysis/roofline_efficiency.h"

namespace servelab::analysis {

std::optional<LoraLoads> lora_loads(const std::string& label, const std::vector<StepRecord>& steps) {
  LoraLoads l;
  std::vector<double> ms;
  for (const StepRecord& s : steps) {
    if ((s.n_lora_loads <= 0 && s.n_lora_waits <= 0) || !step_run_matches(s.run, label)) continue;
    if (s.n_lora_waits > 0) {
      ++l.wait_steps;
      l.wait_s += s.duration_s;
    }
    if (s.n_lora_loads <= 0) continue;
    l.n_loads += s.n_lora_loads;
    ++l.n_steps;
    l.step_s += s.duration_s;
    ms.push_back(s.duration_s * 1e3);
  }
  if (ms.empty()) return std::nullopt;
  const size_t mid = ms.size() / 2;
  std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(mid), ms.end());
  l.step_p50_ms = ms[mid];
  if (ms.size() % 2 == 0) l.step_p50_ms = (l.step_p50_ms + *std::max_element(ms.begin(), ms.begin() + ptrdiff_t(mid))) / 2;
  return l;
}

void to_json(nlohmann::ordered_json& j, const LoraLoads& l) {
  j = nlohmann::ordered_json::object();
  j["n_loads"] = l.n_loads;
  j["n_steps"] = l.n_steps;
  j["step_s"] = exact_number(l.step_s);
  j["step_p50_ms"] = exact_number(l.step_p50_ms);
  j["wait_steps"] = l.wait_steps;
  j["wait_s"] = exact_number(l.wait_s);
}

void from_json(const nlohmann::ordered_json& j, LoraLoads& l) {
  l.n_loads = j.at("n_loads").get<int64_t>();
  l.n_steps = j.at("n_steps").get<int64_t>();
  l.step_s = j.at("step_s").get<double>();
  l.step_p50_ms = j.at("step_p50_ms").get<double>();
  l.wait_steps = j.value("wait_steps", int64_t(0));  // summaries written before the packing gate
  l.wait_s = j.value("wait_s", 0.0);
}

}  // namespace servelab::analysis
