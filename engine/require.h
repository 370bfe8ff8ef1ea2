#pragma once
// require(): the one way config validate() functions reject a value, so every message has the
// shape "<field> must be <rule> (got <value>)" that Scenario::validate maps back to a YAML line.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace servelab {

/// Throws std::invalid_argument("<field> must be <rule> (got <value>)") unless ok. `got` prints
/// as an integer when it is one ("64"), else with up to 12 significant digits ("0.25").
inline void require(bool ok, std::string_view field, std::string_view rule, double got) {
  if (ok) return;
  char buf[40];
  // Range first: casting 1e300 (or NaN) to long long is undefined behaviour (UBSan, test_engine).
  if (got > -1e18 && got < 1e18 && got == static_cast<double>(static_cast<long long>(got)))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(got));
  else
    std::snprintf(buf, sizeof buf, "%.12g", got);
  throw std::invalid_argument(std::string(field) + " must be " + std::string(rule) + " (got " + buf + ")");
}

}  // namespace servelab
