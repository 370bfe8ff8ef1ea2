#pragma once
// Capacity search: the highest request rate whose SLO attainment meets a target, found by
// bisection over probes (each probe = one run at a rate, scored by its metrics), then the
// deployment it implies: replicas and GPUs for a target rate, cost per million output tokens and
// requests per dollar at capacity. analysis never runs the engine: the caller supplies the probe.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/repeats.h"

namespace servelab::analysis {

/// One probe at one rate, as the capacity search scores it: one run, or with `workload.repeat: N`
/// the mean of N runs, each planned from its own seed (repeat_seed), as `servelab run` averages a
/// repeated point.
struct CapacityProbe {
  double rate = 0.0;               ///< offered requests/s
  double slo_attainment = 0.0;     ///< in [0, 1]
  bool meets = false;              ///< slo_attainment >= target and objectives_met
  bool objectives_met = true;      ///< every slo.percentiles objective held (true when none)
  int n_requests = 0;              ///< measured requests
  double request_throughput = 0.0; ///< ok requests/s
  double output_throughput = 0.0;  ///< output tokens/s
  double goodput = 0.0;            ///< output tokens/s of SLO-meeting requests
  double ttft_p50_ms = 0.0, ttft_p99_ms = 0.0, tpot_p50_ms = 0.0, tpot_p99_ms = 0.0;
  double run_s = 0.0;              ///< the run's duration on its clock (virtual for sim)
  double wall_s = 0.0;             ///< wall time the probe took (all its runs)
  int repeats = 1;                 ///< runs averaged into this probe
  std::vector<double> attainment_runs;  ///< with repeats > 1: each run's attainment, in seed order
  MetricStats attainment_stats;    ///< with repeats > 1: their mean, spread and 95% interval of the mean
};

struct RunMetrics;

/// A probe's figures from a run's metrics (meets is left for find_capacity to set).
CapacityProbe probe_from_metrics(double rate, const RunMetrics& m, double wall_s);
/// A probe of several runs at one rate: the figures of their mean (mean_metrics: percentile
/// objectives judged on the means), each run's attainment and their statistics. One run gives
/// probe_from_metrics's probe. Throws std::invalid_argument for none.
CapacityProbe probe_from_runs(double rate, const std::vector<RunMetrics>& runs, double wall_s);

/// How to search. validate() names the bad field.
struct BisectionOptions {
  double target = 0.9;         ///< SLO attainment a rate must reach, in (0, 1]
  double rate_lo = 0.0;        ///< first probe (req/s); 0 = rate_hi / 8, or 1 when rate_hi is 0 too
  double rate_hi = 0.0;        ///< upper bracket guess; 0 = found by doubling from rate_lo
  double precision = 0.0;      ///< stop when hi − lo <= max(precision, precision_pct% of lo) ...
  double precision_pct = 2.0;
  int max_probes = 40;         ///< ... or after this many probes
  /// A probe meets the target on the lower end of its attainment's 95% interval (a repeated
  /// probe's attainment_stats.ci95_lo) instead of its mean; a probe of one run has no interval and
  /// is judged on its attainment.
  bool decide_on_ci95_lo = false;
  void validate() const;
  /// The bracket width at which bisection stops for a lower end `lo`.
  double tolerance(double lo) const;
};

/// The search's outcome for one strategy.
struct StrategyCapacity {
  std::string strategy;
  std::vector<CapacityProbe> probes;  ///< every probe, in the order it ran
  bool found = false;           ///< bracketed: a probed rate met the target and a higher one missed it
  double capacity = 0.0;        ///< highest probed rate meeting the target below a missing one (0 unless found)
  double lower_bound = 0.0;     ///< not bracketed: every probe met the target up to this rate (0 otherwise)
  double failing_rate = 0.0;    ///< lowest probed rate above it that missed (0 when none did)
  double precision = 0.0;       ///< failing_rate − capacity when both are known
  std::string note;             ///< why the search stopped early, if it did
  CapacityProbe at_capacity;    ///< the probe at `capacity`

  // Deployment (plan_deployment).
  double target_rate = 0.0;     ///< req/s to serve; 0 = not asked
  int gpus_per_replica = 1;
  int replicas = 0;             ///< ceil(target_rate / capacity)
  int gpus = 0;                 ///< replicas × gpus_per_replica
  double gpu_hour_usd = 0.0;    ///< 0 = no cost figures
  double usd_per_m_output_tokens = 0.0;  ///< at capacity: GPU cost per hour / output tokens per hour × 1e6
  double requests_per_usd = 0.0;         ///< at capacity: requests per hour / GPU cost per hour
  double fleet_usd_per_hour = 0.0;       ///< gpus × gpu_hour_usd

  // The same search with every step priced (1 + step_cost_margin) times its cost (capacity.
  // step_cost_margin, the sim only); step_cost_margin 0 = not asked.
  double step_cost_margin = 0.0;
  bool found_at_margin = false;
  double capacity_at_margin = 0.0;
};

/// The highest rate the search doubles to: beyond it the probes cannot load the target.
inline constexpr double kMaxProbeRate = 1e6;

/// Bisection: probes rate_lo (halving while it misses, doubling while it meets when no rate_hi
/// was given), then halves the bracket [highest meeting, lowest missing] until it is within the
/// tolerance. Without a missing rate (every probe met the target) there is no capacity: found is
/// false, lower_bound the highest rate probed and the note says "not bracketed: >= X req/s"; with
/// no meeting rate, "below the lowest probe". Assumes attainment falls as the rate rises; a probe that contradicts a bracket
/// is kept and the bracket still narrows. `probe(rate)` runs one point; its `meets` is set here.
StrategyCapacity find_capacity(const std::string& strategy, const std::function<CapacityProbe(double)>& probe,
                               const BisectionOptions& options);

/// Fills the deployment figures of a found capacity: replicas and GPUs for `target_rate`
/// (skipped when 0) and the cost figures at `gpu_hour_usd` (skipped when 0).
void plan_deployment(StrategyCapacity& c, double target_rate, int gpus_per_replica, double gpu_hour_usd);

/// Aligned text table, one line per strategy, then each strategy's probes.
std::string capacity_table(const std::vector<StrategyCapacity>& results, double target);

/// {"schema": "servelab.capacity/1", "target_attainment", "strategies": [{strategy, found,
/// capacity_rps, failing_rps, precision_rps, note, at_capacity: {...}, deployment: {...},
/// probes: [...]}]} plus what `extra` holds (scenario, environment, ...), merged at the top.
nlohmann::ordered_json capacity_json(const std::vector<StrategyCapacity>& results, double target,
                                     const nlohmann::ordered_json& extra);

/// Writes DIR/plots/capacity.{gp,dat} and runs gnuplot: SLO attainment vs rate per strategy
/// (every probe), the target as a horizontal line, each capacity marked. Returns warnings
/// (gnuplot missing or failing); never throws for plotting problems.
std::vector<std::string> write_capacity_plot(const std::string& dir, const std::vector<StrategyCapacity>& results,
                                             double target);

}  // namespace servelab::analysis
