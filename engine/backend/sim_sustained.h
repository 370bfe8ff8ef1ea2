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
// probe's own loop settles at. Without a probe in the profile (the default; cpu, roofline, older
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
  /// The multiplier a step of compute share w gets at state u (for tests and reports).
  double factor(double w, double u) const;
  double compute_share(const StepShape& shape) const;
  double u() const { return u_; }
  double u_probe() const { return u_probe_; }

 private:
  const SustainedLoad& load_;
  const RooflineTerms& terms_;
  double w_heavy_ = 1.0, u_probe_ = 1.0;
  double u_ = 0.0;
  double end_s_ = 0.0;  ///< when the previous step ended
};

}  // namespace servelab
