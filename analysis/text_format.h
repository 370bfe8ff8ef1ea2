#pragma once
// Number formatting and an aligned text table for the console, compare and report.md.
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "loadgen/records/rate.h"

namespace servelab::analysis {

/// "No value" in the metrics, compare and report tables (printed as "-").
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A number for humans: "-" for NaN (no value), "inf", else 0–3 decimals by magnitude
/// (1234 → "1234", 123.4 → "123.4", 12.34 → "12.34", 0.1234 → "0.123").
std::string format_number(double x);
/// A user-given value (bound, threshold, SLO) as written: shortest form, up to 6 significant
/// digits ("500", "0.5", "1e+06"); "-" for NaN.
std::string format_plain(double x);
// format_rate(double) and same_rate(a, b) live in loadgen/records/rate.h (one definition for
// labels, gates, compare and reports); a run's rate cell is format_run_rate (summary.h).
/// A signed percentage change: "+12.3%", "-4.0%", "+inf%", "n/a" for NaN.
std::string format_change_pct(double pct);
/// A share in [0, 1] as a percentage: "95.3%", "-" for NaN.
std::string format_share(double share);

/// Rows of cells printed with aligned columns: the first column left-aligned, the others right.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);  ///< missing cells print empty
  /// Header, a rule of '-', then the rows; two spaces between columns; no trailing spaces.
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

/// Escapes & < > " ' for XML and HTML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace servelab::analysis
