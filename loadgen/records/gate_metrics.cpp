#include "loadgen/records/gate_metrics.h"

namespace servelab {

const std::vector<GateMetric>& gate_metrics() {
  static const std::vector<GateMetric> metrics = [] {
    std::vector<GateMetric> v;
    for (const char* d : {"ttft", "tpot", "itl", "e2e", "lateness", "queue", "prefill"})
      for (const char* s : {"mean", "p50", "p90", "p95", "p99", "p999", "max"})
        v.push_back({std::string(d) + "_ms." + s, std::string(d) + "_" + s + "_ms", false});
    // Scalars and nested figures: the scenario spelling replaces '.' with '_'.
    const std::vector<std::pair<const char*, bool>> others = {
        {"request_throughput_rps", true},   {"output_throughput_tok_s", true},
        {"total_throughput_tok_s", true},   {"goodput_tok_s", true},
        {"request_goodput_rps", true},      {"slo_attainment", true},
        {"kv_utilization.mean", true},      {"kv_utilization.max", true},
        {"kv_breakdown.stored", true},      {"kv_breakdown.reserved", false},
        {"kv_breakdown.internal_frag", false}, {"kv_breakdown.external_frag", false},
        {"kv_breakdown.free", false},       {"kv_peak_use", false},
        {"batch_size.mean", false},         {"batch_size.max", false},
        {"n_ok", true},                     {"n_slo_met", true},
        {"n_preemptions", false},           {"duration_s", false},
        {"n_failed", false},                {"n_requests", false},
    };
    for (const auto& [path, higher] : others) {
      std::string flat = path;
      for (char& c : flat)
        if (c == '.') c = '_';
      std::string alias;
      for (const char* suffix : {"_tok_s", "_rps"}) {
        const std::string sfx = suffix;
        if (flat.size() > sfx.size() && flat.compare(flat.size() - sfx.size(), sfx.size(), sfx) == 0)
          alias = flat.substr(0, flat.size() - sfx.size());
      }
      v.push_back({path, flat, higher, alias});
    }
    return v;
  }();
  return metrics;
}

const GateMetric* find_gate_metric(const std::string& name) {
  for (const auto& m : gate_metrics())
    if (m.path == name || m.scenario_name == name || (!m.alias.empty() && m.alias == name)) return &m;
  return nullptr;
}

}  // namespace servelab
