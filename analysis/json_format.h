#pragma once
// Fixed number formatting for every computed figure analysis writes as JSON, so that `servelab report DIR`
// reproduces summary.json byte for byte: values are rounded to 6 decimals (1 ns on a ms scale,
// 1e-6 on a share), NaN and infinities are written as null.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <nlohmann/json.hpp>

namespace servelab::analysis {

/// x rounded to 6 decimals (half away from zero); NaN and infinities pass through.
inline double round6(double x) {
  if (!std::isfinite(x)) return x;
  const double r = std::round(x * 1e6) / 1e6;
  return r == 0.0 ? 0.0 : r;  // no "-0.0"
}

/// round6(x) as JSON, or null when x is NaN or infinite.
inline nlohmann::ordered_json json_number(double x) {
  if (!std::isfinite(x)) return nullptr;
  return round6(x);
}

/// x unrounded (shortest round-trip digits), or null when NaN or infinite. For inputs the user
/// wrote (rates, SLOs): runs.json must hand report the very values the run used.
inline nlohmann::ordered_json exact_number(double x) {
  if (!std::isfinite(x)) return nullptr;
  return x;
}

/// A user-given number that may be infinite (a `.inf` rate, an unbounded threshold): the number
/// itself, or the strings "inf" / "-inf" — JSON has no infinity, and nlohmann would write null,
/// which reads back as "not set". NaN throws std::invalid_argument (it has no meaning to keep).
inline nlohmann::ordered_json number_keeping_inf(double x) {
  if (std::isnan(x)) throw std::invalid_argument("NaN cannot be written as a setting");
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

/// Reads number_keeping_inf's form; throws std::invalid_argument on another string.
inline double read_number_keeping_inf(const nlohmann::ordered_json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf" || s == ".inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-.inf") return -std::numeric_limits<double>::infinity();
    throw std::invalid_argument("expected a number or \"inf\" (got \"" + s + "\")");
  }
  return j.get<double>();
}

/// The number at j[key], NaN when the key is missing or null.
inline double number_or_nan(const nlohmann::ordered_json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  return it->get<double>();
}

}  // namespace servelab::analysis
