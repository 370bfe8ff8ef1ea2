#include "cli/report_input.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "engine/model/config.h"
#include "loadgen/records/gate_metrics.h"
#include "loadgen/plan.h"

namespace servelab::cli {

std::string analysis_metric_name(const std::string& scenario_metric) {
  const GateMetric* m = find_gate_metric(scenario_metric);  // the one registry
  return m ? m->path : scenario_metric;
}

std::string current_commit() {
  if (const char* c = std::getenv("SERVELAB_COMMIT"); c && *c) return c;
  return analysis::build_info().commit;
}

analysis::SloSpec analysis_slo(const Scenario& sc) {
  analysis::SloSpec slo;
  slo.ttft_ms = sc.slo.ttft_ms;
  slo.tpot_ms = sc.slo.tpot_ms;
  slo.attainment = sc.slo.attainment;
  slo.itl_ms = sc.slo.itl_ms;
  slo.e2e_ms = sc.slo.e2e_ms;
  for (const auto& p : sc.slo.percentiles)
    slo.percentiles.push_back({analysis::parse_slo_metric(p.metric), p.percentile, p.max_ms});
  return slo;
}

analysis::ReportInput report_input_for(const Scenario& sc, const std::vector<SweepRun>& runs) {
  analysis::ReportInput in;
  in.scenario.name = sc.name;
  in.scenario.file = sc.source_file;
  in.scenario.seed = sc.seed;
  auto& d = in.scenario.details;
  if (!sc.description.empty()) d["description"] = sc.description;
  if (sc.target) {  // the server under test, not this process's unused engine settings
    d["model"] = sc.target->model.empty() ? "(the server's only model)" : sc.target->model;
    d["backend"] = "http";
    d["target"] = sc.target->urls.size() == 1 ? nlohmann::ordered_json(sc.target->urls[0]) : nlohmann::ordered_json(sc.target->urls);
    d["api"] = to_string(sc.target->api);
    d["workload"] = describe(sc);
    d["max_model_len"] = sc.engine.max_model_len;  // bounds the planned lengths only
  } else {
    d["model"] = sc.model.path.empty() ? sc.model.preset : sc.model.path;
    d["backend"] = to_string(sc.backend.kind);
    d["workload"] = describe(sc);
    if (sc.engine.gpu_memory_utilization > 0) d["gpu_memory_utilization"] = sc.engine.gpu_memory_utilization;
    else d["kv_cache_bytes"] = sc.engine.kv_cache_bytes;
    d["max_model_len"] = sc.engine.max_model_len;
  }
  d["length_counting"] = length_counting(sc);

  std::string device;
  if (sc.target) {
    device = "server at ";
    for (size_t i = 0; i < sc.target->urls.size(); ++i) device += (i ? ", " : "") + sc.target->urls[i];
  } else {
    switch (sc.backend.kind) {
      case BackendKind::cpu: device = "cpu (OpenBLAS fp32)"; break;
      case BackendKind::sim: device = "sim (cost model: " + (sc.backend.sim_profile.empty() ? sc.backend.sim_device + " roofline" : sc.backend.sim_profile) + ")"; break;
      case BackendKind::cuda:
        device = "cuda: " + cuda_device_name(sc.backend.device) + ", " + to_string(sc.backend.dtype) +
                 (sc.backend.fusion ? "" : ", fusion off") +
                 (sc.backend.batch_invariant ? ", batch-invariant" : "") + (sc.backend.cuda_graphs ? "" : ", cuda graphs off") +
                 (sc.backend.mixed_decodes == cuda::MixedDecodes::auto_select
                      ? ""
                      : std::string(", mixed steps' decodes on the ") + to_string(sc.backend.mixed_decodes) + " kernel");
        break;
      default: device = to_string(sc.backend.kind); break;
    }
  }
  in.environment = analysis::detect_environment(device, current_commit(), SERVELAB_VERSION);
  const char* commit_override = std::getenv("SERVELAB_COMMIT");
  in.environment.dirty = !(commit_override && *commit_override) && analysis::build_info().dirty;

  in.slo = analysis_slo(sc);
  if (sc.target) in.max_error_rate = sc.target->max_error_rate;
  in.options.percentiles = sc.report.percentiles;
  in.options.window = {sc.report.skip_first_s, sc.report.skip_last_s, sc.report.skip_first_requests,
                       sc.report.skip_last_requests};
  in.cdf_rate = sc.report.cdf_rate;

  for (const SweepRun& r : runs) {
    if (r.repeat > 1) {  // a later repetition of a point already listed: note its seed
      for (auto& info : in.runs)
        if (info.label == r.point) info.seeds.push_back(r.seed);
      continue;
    }
    analysis::RunInfo info;
    info.label = r.point.empty() ? r.label : r.point;
    info.repeats = r.n_repeats;
    if (r.n_repeats > 1) info.seeds = {r.seed};
    info.strategy = r.strategy;
    info.batching = r.batching;
    info.kv = r.kv;
    info.backend = r.backend;
    switch (sc.workload.mode) {
      case LoadMode::open_loop:
        info.mode = std::isinf(r.rate) ? analysis::RunMode::max : analysis::RunMode::open;
        info.rate = r.rate;
        break;
      case LoadMode::closed_loop:
        info.mode = analysis::RunMode::closed;
        info.concurrency = sc.workload.concurrency;
        info.rate = std::numeric_limits<double>::quiet_NaN();
        break;
      case LoadMode::trace:
        info.mode = analysis::RunMode::trace;
        info.rate = std::numeric_limits<double>::quiet_NaN();
        break;
    }
    info.n_requests = r.n_planned;
    info.config = r.config;
    in.runs.push_back(std::move(info));
  }
  for (const GateSpec& g : sc.gates) {
    analysis::Gate gate;
    gate.metric = analysis_metric_name(g.metric);
    gate.min = g.min;
    gate.max = g.max;
    if (!g.strategy.empty()) gate.strategy = g.strategy;
    gate.rate = g.rate;
    gate.allow_missing = g.allow_missing;
    in.gates.push_back(std::move(gate));
  }
  if (sc.baseline) {
    analysis::BaselineSpec b;
    b.path = sc.baseline->file;
    b.max_regression_pct = sc.baseline->max_regression_pct;
    b.allow_missing = sc.baseline->allow_missing;
    for (const std::string& m : sc.baseline->metrics) b.metrics.push_back(analysis_metric_name(m));
    in.baseline = b;
  }
  return in;
}

}  // namespace servelab::cli
