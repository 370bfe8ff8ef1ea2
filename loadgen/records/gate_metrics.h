#pragma once
// The one registry of metrics a CI gate, a baseline or `servelab compare` may name. Each has two
// spellings: the path into summary.json's run "metrics" object that analysis reads
// ("ttft_ms.p99", "kv_utilization.mean", "goodput"), and the flat name scenario files write
// ("ttft_p99_ms", "kv_utilization_mean", "goodput_tok_s"). Rates carry their unit in the name
// (goodput_tok_s, request_goodput_rps); the older unit-less names stay accepted as aliases. Scenario validation, the scenario → analysis
// mapping, gates and compare all read this list, so they cannot disagree.
#include <string>
#include <vector>

namespace servelab {

/// One gate-able metric.
struct GateMetric {
  std::string path;           ///< summary.json path: "ttft_ms.p99", "goodput", "n_failed"
  std::string scenario_name;  ///< scenario spelling: "ttft_p99_ms", "goodput", "n_failed"
  bool higher_is_better;      ///< throughputs, goodput, attainment, KV utilization, stored share
  /// The name before units were spelled out ("goodput" for "goodput_tok_s"), still accepted in
  /// scenarios, --metric and summaries written earlier; "" when none.
  std::string alias;
};

/// Every gate-able metric: the latency distributions ({ttft, tpot, itl, e2e, lateness, queue,
/// prefill}_ms × {mean, p50, p90, p95, p99, p999, max}), throughputs, goodput, attainment, the
/// KV figures (utilization, breakdown shares, peak use), batch size, run counts, and two figures
/// kept beside "metrics": the roofline efficiency ("roofline.efficiency", "roofline.decode_efficiency",
/// ...: the run's "roofline" object) and the strategy's storage-format accuracy
/// ("accuracy.top1_agreement", "accuracy.mean_kl", ...: its "accuracy" object).
const std::vector<GateMetric>& gate_metrics();

/// The entry with this summary path, scenario name or alias, or nullptr. A percentile of a
/// latency beyond the fixed ones (report.percentiles: "ttft_ms.p75", "e2e_ms.p99_99", spelled
/// "ttft_p75_ms" in scenarios) is accepted too, lower is better; a run that did not compute it
/// has no value for it.
const GateMetric* find_gate_metric(const std::string& name);

}  // namespace servelab
