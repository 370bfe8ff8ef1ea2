#pragma once
// Request rates as every layer writes and compares them: run labels ("continuous-paged@4"),
// reports, gates and compare. One definition, so a label, a gate filter and a table cell never
// disagree about what "the same rate" is.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

namespace servelab {

/// The shortest decimal that reads back as `rate` ("4", "0.5", "12.25"); "inf" for +infinity
/// (all requests at t = 0), "?" for NaN (no offered rate known).
inline std::string format_rate(double rate) {
  if (std::isnan(rate)) return "?";
  if (std::isinf(rate)) return rate > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, rate);
  return std::string(buf, res.ptr);
}

/// Whether two rates name the same sweep point: equal within 1e-9 relative (a rate typed in a
/// gate, read back from JSON or stepped by a range still matches), infinities only themselves,
/// and NaN (no rate) matches NaN.
inline bool same_rate(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(a));
}

}  // namespace servelab
