#pragma once
// How a simulated step was priced, and the tally a sim backend keeps (Backend::priced_steps).
#include <cstdint>

namespace servelab {

/// How a step was priced.
enum class CostSource {
  profile,          ///< inside the profiled grid: interpolated
  profile_roofline, ///< outside the grid: the grid's edge scaled by the roofline
  roofline,         ///< no profile: the roofline alone
};
const char* to_string(CostSource s);

/// Steps priced by each source (SimBackend keeps these; reports print them).
struct CostCounts {
  int64_t profile = 0;
  int64_t profile_roofline = 0;
  int64_t roofline = 0;
  int64_t total() const { return profile + profile_roofline + roofline; }
  void add(CostSource s);
};

}  // namespace servelab
