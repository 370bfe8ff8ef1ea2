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
};

/// One inter-arrival gap in seconds at `rate` requests/s. rate = +inf gives 0 (all at once).
double arrival_gap(const ArrivalSpec& spec, double rate, Rng& rng);

/// Intended send times of n requests at `rate` (requests/s), seconds from the run's start:
/// the first at 0, then cumulative gaps. Non-decreasing; size n. rate must be > 0 (may be inf).
/// The same rng state at two rates gives times that are scaled copies of each other (the gaps
/// are drawn at rate 1 and divided by the rate), so a sweep compares like with like.
std::vector<double> arrival_times(const ArrivalSpec& spec, double rate, int n, Rng& rng);

}  // namespace servelab
