#include "loadgen/arrivals.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace servelab {

const char* to_string(ArrivalProcess p) {
  switch (p) {
    case ArrivalProcess::poisson: return "poisson";
    case ArrivalProcess::gamma: return "gamma";
    case ArrivalProcess::constant: return "constant";
  }
  return "?";
}

double arrival_gap(const ArrivalSpec& spec, double rate, Rng& rng) {
  if (!(rate > 0)) throw std::invalid_argument("arrival rate must be > 0 (got " + std::to_string(rate) + ")");
  // Draw a gap of mean 1 first, then scale: the draw consumes the same randomness at any rate.
  double unit = 1.0;
  switch (spec.process) {
    case ArrivalProcess::poisson: unit = rng.exponential(); break;
    case ArrivalProcess::gamma: {
      if (!(spec.cv > 0)) throw std::invalid_argument("gamma arrival cv must be > 0 (got " + std::to_string(spec.cv) + ")");
      const double shape = 1.0 / (spec.cv * spec.cv);
      unit = rng.gamma(shape) / shape;
      break;
    }
    case ArrivalProcess::constant: unit = 1.0; break;
  }
  return std::isinf(rate) ? 0.0 : unit / rate;
}

std::vector<double> arrival_times(const ArrivalSpec& spec, double rate, int n, Rng& rng) {
  std::vector<double> times;
  if (n <= 0) return times;
  times.reserve(static_cast<size_t>(n));
  double t = 0.0;
  times.push_back(t);
  for (int i = 1; i < n; ++i) {
    t += arrival_gap(spec, rate, rng);
    times.push_back(t);
  }
  return times;
}

double RateRamp::rate_at(double t) const {
  if (t >= duration) return to;
  return from + (to - from) * std::max(0.0, t) / duration;
}

double RateRamp::time_at(double u) const {
  if (!(from > 0) || !(to > 0) || !(duration > 0))
    throw std::invalid_argument("rate ramp needs from, to and duration > 0");
  u = std::max(0.0, u);
  const double in_ramp = duration * (from + to) / 2.0;  // expected arrivals during the ramp
  if (u > in_ramp) return duration + (u - in_ramp) / to;
  // Solve from·t + a·t² = u with a = (to − from)/(2·duration); this form is stable for a of either sign.
  const double a = (to - from) / (2.0 * duration);
  return 2.0 * u / (from + std::sqrt(std::max(0.0, from * from + 4.0 * a * u)));
}

std::vector<double> ramp_arrival_times(const ArrivalSpec& spec, const RateRamp& ramp, int n, Rng& rng) {
  std::vector<double> times;
  if (n <= 0) return times;
  times.reserve(static_cast<size_t>(n));
  double u = 0.0;
  times.push_back(ramp.time_at(u));
  for (int i = 1; i < n; ++i) {
    u += arrival_gap(spec, 1.0, rng);
    times.push_back(ramp.time_at(u));
  }
  return times;
}

}  // namespace servelab
