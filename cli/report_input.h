#pragma once
// Glue between a scenario and the analysis layer: the ReportInput header (scenario, environment,
// SLO, one RunInfo per sweep point, gates, baseline) a run writes to runs.json before it starts.
#include <string>
#include <vector>

#include "analysis/report.h"
#include "loadgen/scenario.h"
#include "loadgen/sweep.h"

namespace servelab::cli {

/// The scenario's SLO as analysis spells it (per-request thresholds, percentile objectives).
analysis::SloSpec analysis_slo(const Scenario& scenario);

/// One RunInfo per sweep point (repetitions of a point fold into one, with their seeds).
analysis::ReportInput report_input_for(const Scenario& scenario, const std::vector<SweepRun>& runs);

/// A scenario's gate or baseline metric name as the analysis layer spells it, from the registry
/// (loadgen/records/gate_metrics.h): "ttft_p99_ms" -> "ttft_ms.p99", "kv_utilization_mean" ->
/// "kv_utilization.mean"; a name not in it is returned unchanged.
std::string analysis_metric_name(const std::string& scenario_metric);

/// The commit servelab was built from: SERVELAB_COMMIT if set, else the one embedded at build
/// time (analysis::build_info(); "unknown" when built outside a git checkout).
std::string current_commit();

}  // namespace servelab::cli
