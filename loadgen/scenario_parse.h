#pragma once
// Internal to loadgen: the YAML walk that fills a Scenario (types, enums, unknown keys) and
// records every value's location. Range checks are Scenario::validate's.
#include <vector>

#include <yaml-cpp/yaml.h>

#include "loadgen/overrides.h"
#include "loadgen/scenario.h"

namespace servelab {

/// Fills `out` from `root` (out.source_file must be set: relative paths resolve beside it).
/// Values under an applied override are located at that override.
void parse_scenario(const YAML::Node& root, const std::vector<AppliedOverride>& overrides, Scenario& out,
                    Diagnostics& diag);

/// `slo:` (thresholds, percentile objectives) and `report:` (percentiles, window, cdf_rate, accuracy_positions) into
/// scenario.slo and scenario.report; problems go to `diag` at their file:line:col.
void parse_slo_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                       Diagnostics& diag);
void parse_report_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                          Diagnostics& diag);

/// `gates:` (CI thresholds) into scenario.gates and `baseline:` (file, max_regression_pct, metrics)
/// into scenario.baseline; problems go to `diag` at their file:line:col.
void parse_gates_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                         Diagnostics& diag);
void parse_baseline_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                            Diagnostics& diag);

/// `backend:` (kind, threads, sim_device, sim_profile, sim_retarget, sim_cost_scale, ceilings,
/// device, fusion, batch_invariant, cuda_graphs, tensor_parallel, dtype, all_reduce,
/// all_reduce_max_bytes) into scenario.backend (scenario_parse_backend.cpp).
void parse_backend_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                           Diagnostics& diag);

/// `workload.rates:` (a rate, a list, or a range) into scenario.workload.rates
/// (scenario_parse_rates.cpp).
void parse_rates_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                         Diagnostics& diag);

/// `workload.lora:` (adapters or count, distribution, zipf_s, base_fraction, rank, max_loras,
/// max_cpu_loras) into scenario.workload.lora; problems go to `diag` at their file:line:col.
/// parse_strategy_lora: a strategy's `lora:` (the same keys, or `none`) into strategy.lora.
void parse_lora_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                        Diagnostics& diag);
/// Adapters (a strategy's own or workload.lora's) on a strategy that is not continuous batching:
/// an error at the strategy's `lora:` or at workload.lora (the engine runs adapters only there).
void check_lora_batching(const Scenario& scenario, Diagnostics& diag);
void parse_strategy_lora(const YAML::Node& node, const std::string& path, const std::vector<AppliedOverride>& overrides,
                         Scenario& scenario, StrategySpec& strategy, Diagnostics& diag);
/// A strategy's `speculative:` at `path` into strategy.speculative (engaged by the caller)
/// (scenario_parse_speculative.cpp).
void parse_speculative_section(const YAML::Node& node, const std::string& path, StrategySpec& strategy,
                               const std::vector<AppliedOverride>& overrides, Scenario& scenario, Diagnostics& diag);
/// `workload.structured_output:` (kind, schemas, n_schemas, fraction) into
/// scenario.workload.structured_output (scenario_parse_structured.cpp).
void parse_structured_output_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides,
                                     Scenario& scenario, Diagnostics& diag);

/// A relative path looked up beside the scenario file first, then in the current directory;
/// when neither exists, the path beside the scenario (so the error names where it looked).
std::string resolve_input_path(const std::string& path, const std::string& scenario_file);

}  // namespace servelab
