#include "loadgen/records/gate_metrics.h"

#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>

namespace servelab {

const std::vector<GateMetric>& gate_metrics() {
  static const std::vector<GateMetric> metrics = [] {
    std::vector<GateMetric> v;
    for (const char* d : {"ttft", "tpot", "itl", "e2e", "lateness", "queue", "prefill"})
      for (const char* s : {"mean", "p50", "p90", "p95", "p99", "p999", "max"})
        v.push_back({std::string(d) + "_ms." + s, std::string(d) + "_" + s + "_ms", false, ""});
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
        // Beside "metrics": the run's roofline efficiency (overall and per step class; real
        // in-process runs) and its strategy's storage-format accuracy against the model's own.
        {"roofline.efficiency", true},      {"roofline.prefill_efficiency", true},
        {"roofline.decode_efficiency", true}, {"roofline.mixed_efficiency", true},
        {"accuracy.top1_agreement", true},  {"accuracy.mean_kl", false},
        {"accuracy.max_kl", false},         {"accuracy.max_logit_error", false},
        {"accuracy.rel_logit_error", false},
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

namespace {

constexpr const char* kDistributions[] = {"ttft", "tpot", "itl", "e2e", "lateness", "queue", "prefill"};

/// "p75", "p99_99": 'p', digits, at most one '_' between digits (the decimal point), value <= 100.
bool is_percentile_key(const std::string& k) {
  if (k.size() < 2 || k[0] != 'p' || k[1] == '_' || k.back() == '_') return false;
  int n_sep = 0;
  std::string num;
  for (std::size_t i = 1; i < k.size(); ++i) {
    if (k[i] == '_') {
      ++n_sep;
      num += '.';
    } else if (k[i] >= '0' && k[i] <= '9') {
      num += k[i];
    } else {
      return false;
    }
  }
  return n_sep <= 1 && num.size() <= 12 && std::stod(num) <= 100.0;
}

/// A configured percentile of a latency (report.percentiles): "ttft_ms.p75" / "ttft_p75_ms".
std::optional<GateMetric> percentile_metric(const std::string& name) {
  for (const char* d : kDistributions) {
    const std::string path_prefix = std::string(d) + "_ms.";
    const std::string flat_prefix = std::string(d) + "_";
    std::string key;
    if (name.rfind(path_prefix, 0) == 0) {
      key = name.substr(path_prefix.size());
    } else if (name.rfind(flat_prefix, 0) == 0 && name.size() > flat_prefix.size() + 3 &&
               name.compare(name.size() - 3, 3, "_ms") == 0) {
      key = name.substr(flat_prefix.size(), name.size() - flat_prefix.size() - 3);
    } else {
      continue;
    }
    if (!is_percentile_key(key)) continue;
    // The spelling summary.json uses (analysis/percentiles.h percentile_key): "p75_0" → "p75", 99.9 → "p999".
    std::string num = key.substr(1);
    for (char& c : num)
      if (c == '_') c = '.';
    const double q = std::stod(num);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.6g", q);
    key = q == 99.9 ? std::string("p999") : std::string(buf);
    if (q != 99.9) key.insert(key.begin(), 'p');
    for (char& c : key)
      if (c == '.') c = '_';
    return GateMetric{std::string(d) + "_ms." + key, std::string(d) + "_" + key + "_ms", false, ""};
  }
  return std::nullopt;
}

}  // namespace

const GateMetric* find_gate_metric(const std::string& name) {
  for (const auto& m : gate_metrics())
    if (m.path == name || m.scenario_name == name || (!m.alias.empty() && m.alias == name)) return &m;
  const auto p = percentile_metric(name);
  if (!p) return nullptr;
  // Interned, so the pointer stays valid like the registry's own entries.
  static std::mutex mu;
  static std::deque<GateMetric> interned;
  const std::lock_guard<std::mutex> lock(mu);
  for (const auto& m : interned)
    if (m.path == p->path) return &m;
  interned.push_back(*p);
  return &interned.back();
}

}  // namespace servelab
