#pragma once
// Arrival processes of an open-loop load: when each request is meant to be sent.
#include <string>
#include <vector>

#include "loadgen/rng.h"

namespace servelab {

/// How inter-arrival gaps are drawn at a mean rate r (requests/s):
/// poisson: exponential gaps (memoryless; CV of gaps = 1);
/// gamma: Gamma(shape k = 1/cv², scale 1/(k·r)) gaps — cv > 1 is burstier than Poisson, < 1 smoother;
/// constant: every gap exactly 1/r.
enum class ArrivalProcess { poisson, gamma, constant };
const char* to_string(ArrivalProcess p);  ///< "poisson", "gamma", "constant"

struct ArrivalSpec {
  ArrivalProcess process = ArrivalProcess::poisson;
  double cv = 1.0;  ///< gamma only: coefficient of variation of the gaps (std / mean), > 0
  double ramp_to = 0.0;     ///< > 0: the rate ramps linearly from the run's rate to this over the run
  int max_concurrency = 0;  ///< > 0: at most this many requests in flight; due ones wait for a slot
};

/// A linear rate ramp: rate(t) = from + (to − from)·t/duration for t ≤ duration, `to` after.
struct RateRamp {
  double from = 1.0;      ///< requests/s at t = 0, > 0
  double to = 1.0;        ///< requests/s at t = duration, > 0
  double duration = 1.0;  ///< seconds, > 0
  /// The time t at which the expected number of arrivals ∫₀ᵗ rate reaches u (u ≥ 0): the
  /// time change that turns a rate-1 process into the ramp (exact for Poisson: a
  /// non-homogeneous Poisson process with this rate).
  double time_at(double u) const;
  /// rate(t).
  double rate_at(double t) const;
};

/// Intended send times of n requests under a ramp: gaps drawn at rate 1 (as arrival_times does),
/// summed, and mapped through ramp.time_at. Non-decreasing; size n.
std::vector<double> ramp_arrival_times(const ArrivalSpec& spec, const RateRamp& ramp, int n, Rng& rng);

/// One inter-arrival gap in seconds at `rate` requests/s. rate = +inf gives 0 (all at once).
double arrival_gap(const ArrivalSpec& spec, double rate, Rng& rng);

/// Intended send times of n requests at `rate` (requests/s), seconds from the run's start:
/// the first at 0, then cumulative gaps. Non-decreasing; size n. rate must be > 0 (may be inf).
/// The same rng state at two rates gives times that are scaled copies of each other (the gaps
/// are drawn at rate 1 and divided by the rate), so a sweep compares like with like.
std::vector<double> arrival_times(const ArrivalSpec& spec, double rate, int n, Rng& rng);

}  // namespace servelab
