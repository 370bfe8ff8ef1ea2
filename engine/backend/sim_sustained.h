#pragma once
// Sustained load: a GPU serving back-to-back compute-bound steps sits at its power cap and lowers
// its SM clock, so the same step takes longer than it does in a profile's grid. On two H200s
// (nvidia-smi beside the sim matrix's runs, 2026-11-30) a llama3-8b long-prompt run at 85% load
// held 1,650-1,740 MHz under the power cap, its profile's grid 1,912-1,965 MHz, and the run's
// prefill chunks took 12-14% longer than the grid had timed them.
//
// `servelab profile --sustained-s S` measures it (engine/backend/profile_sustained.h): after an
// idle pause, the grid's heaviest prefill-like step back to back with one decode after every
// heavy_per_decode of them, for S seconds; each probe step's first runs (cold, recorded: they run
// while the clock ramps up from idle), its runs in the last 40% (hot), the grid's time of it, and
// how fast the heavy step slowed (tau).
//
// The sim carries a state u: an exponential average, time constant tau, of each step's compute
// share w (its roofline compute time over its roofline bound, in [0, 1]) while the GPU runs it and
// 0 while it idles. A step is priced at
//     the grid's price × (1 + (hot_h / grid_h − 1) · w / w_h · min(1, u / u_probe))
// with hot_h / grid_h the heavy probe's slowdown, w_h its compute share (the clock-bound part of a
// step scales with its compute share: a memory-bound decode barely moves) and u_probe the u the
// probe's own loop settles at. A step with both prefill and decode rows (mixed) takes, where the
// probe re-timed the grid's mixed points hot after the heavy loop (`mixed`), their own slope
// instead: hot / grid − 1 = a_m · w by least squares through the origin over those points, so a
// step is priced at the grid's price × (1 + a_m · w · min(1, u / u_probe)). Without a probe in the profile (the default; cpu, roofline, older
// profiles, a retargeted one) nothing changes. Measured on four H200 cells
// (results/sim-validation/sustained-h200x2/): the long-prompt cell's steps −6.5% → −5.1% and
// −11.4% → −7.1% at 50% / 85% load, chat cells within a point or two of the grid's prices.
#include <array>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cost_model.h"

namespace servelab {

/// One probe step: its shape and times.
struct SustainedPoint {
  StepShape shape;
  double grid_s = 0.0;  ///< the grid's time of the same point (its sample's median)
  double cold_s = 0.0;  ///< median of its first runs after the idle pause
  double hot_s = 0.0;   ///< median of its runs in the probe's last 40%
};

/// What a profile measured under sustained load (the JSON's "sustained").
struct SustainedLoad {
  SustainedPoint heavy;   ///< the grid's prefill / chunk / mixed point with the most rows
  SustainedPoint decode;  ///< the grid's middle decode (the lead-in point): its share of the probe's mix
  /// The grid's mixed points (prefill and decode rows in one step), each run in turn back to back
  /// right after the heavy loop for mixed_seconds: cold = its first run, hot = the median of its
  /// runs in the last 40% of that time. Empty: not probed (older profiles, or no mixed point).
  std::vector<SustainedPoint> mixed;
  double mixed_seconds = 0.0;
  int heavy_per_decode = 4;
  double tau_s = 0.0;     ///< time for the heavy step to go 63% of the way from cold to hot
  double seconds = 0.0;   ///< how long the probe ran
  /// Every probe step: (seconds since the probe began, 0 heavy / 1 decode, its seconds).
  std::vector<std::array<double, 3>> trace;
  /// Every time positive and finite, tau > 0. Throws std::invalid_argument naming the field.
  void validate() const;
};

/// The profile JSON's "sustained" object, and back. from_json throws std::invalid_argument naming
/// the field that is missing or out of range.
nlohmann::ordered_json sustained_json(const SustainedLoad& load);
SustainedLoad sustained_from_json(const nlohmann::json& j);

/// The sim's sustained-load state over one model and device (terms: the profiled device's
/// roofline, which tells each step's compute share). Holds a reference to `load` and `terms`.
class SustainedState {
 public:
  SustainedState(const SustainedLoad& load, const RooflineTerms& terms);
  /// A step of `shape` starting at `start_s` (the engine's clock; < 0: right after the previous
  /// step) that the grid prices at `grid_price_s`: its price under the current state, and the state
  /// advanced through it (idle from the previous step's end to start_s, then busy).
  double price(double start_s, double grid_price_s, const StepShape& shape) {
    return price(start_s, grid_price_s, shape, -1.0);
  }
  /// The same, the state advanced through `ran_s` seconds of the step instead of its price (a real
  /// step priced after the run: the state follows what the GPU did); ran_s < 0: its price.
  double price(double start_s, double grid_price_s, const StepShape& shape, double ran_s);
  /// The multiplier a step of compute share w gets at state u (for tests and reports); mixed: a
  /// step with prefill and decode rows (the mixed points' slope where they were probed).
  double factor(double w, double u, bool mixed = false) const;
  /// a_m: the mixed points' hot / grid − 1 over their compute share (least squares through the
  /// origin); has_mixed_slope() false where the probe re-timed none (a_m then 0, unused).
  double mixed_slope() const { return mixed_slope_; }
  bool has_mixed_slope() const { return has_mixed_slope_; }
  /// Whether a step is mixed (prefill rows and decode rows).
  static bool is_mixed(const StepShape& shape) { return shape.prefill_pairs > 0.0 && shape.decode_context > 0.0; }
  double compute_share(const StepShape& shape) const;
  double u() const { return u_; }
  double u_probe() const { return u_probe_; }

 private:
  const SustainedLoad& load_;
  const RooflineTerms& terms_;
  double w_heavy_ = 1.0, u_probe_ = 1.0, mixed_slope_ = 0.0;
  bool has_mixed_slope_ = false;
  double u_ = 0.0;
  double end_s_ = 0.0;  ///< when the previous step ended
};

}  // namespace servelab
