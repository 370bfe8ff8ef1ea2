#pragma once
// The scenario's `capacity:` section: how `servelab capacity` searches (bisection bracket and
// precision, requests per probe) and what it plans for (target rate, $/GPU-hour, tensor
// parallelism, KV sized from GPU memory). Parsed by its own function, called from the scenario
// walk (loadgen/scenario_parse.cpp) with the same file:line:col errors. Keys: scenarios/README.md.
#include <optional>
#include <vector>

namespace YAML {
class Node;
}

namespace servelab {

struct Scenario;
class Diagnostics;
struct AppliedOverride;

/// What a probe's verdict is decided on (`capacity.decide`).
enum class CapacityDecide {
  mean,     ///< the attainment (with workload.repeat, the mean over the probe's runs)
  ci95_lo,  ///< the lower end of the 95% interval of that mean (needs workload.repeat >= 2): a
            ///< rate counts as meeting the target only when its runs leave little doubt
};

/// `capacity:` — every key optional.
struct CapacitySpec {
  double rate_lo = 0.0;         ///< first probe, req/s; 0 = rate_hi / 8, or 1
  double rate_hi = 0.0;         ///< upper bracket guess; 0 = found by doubling
  double precision = 0.0;       ///< stop when the bracket is this narrow (req/s) ...
  double precision_pct = 2.0;   ///< ... or this % of the capacity, whichever is wider
  int max_probes = 40;          ///< per strategy
  int n_requests = 0;           ///< measured requests per probe; 0 = workload.n_requests
  double target_rate = 0.0;     ///< req/s to plan replicas and GPUs for; 0 = none
  double gpu_hour_usd = 0.0;    ///< $ per GPU-hour for cost figures; 0 = none
  int tensor_parallel = 1;      ///< GPUs per replica (sim: weights, KV heads and FLOPs split, all-reduces added)
  /// sim: when set, engine.kv_cache_bytes is replaced by what one GPU has left after the weights
  /// and activations at this share of its memory (vLLM's gpu_memory_utilization).
  std::optional<double> gpu_memory_utilization;
  CapacityDecide decide = CapacityDecide::mean;
  /// sim: also search with every step priced (1 + this) times its cost (backend.sim_cost_scale ×),
  /// to show what a few percent of step-time error does to the capacity; 0 = not asked.
  double step_cost_margin = 0.0;
};

/// Reads `node` (the value of `capacity:`) into scenario.capacity, with range checks; problems
/// go to `diag` at their file:line:col.
void parse_capacity_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides, Scenario& scenario,
                            Diagnostics& diag);

}  // namespace servelab
