#pragma once
// Pieces shared by plots.cpp and plots_latency.cpp (not part of the public API).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "loadgen/records/record.h"

namespace servelab::analysis::plot_detail {

inline constexpr const char* kSize = "size 900,540";

/// A number for a gnuplot data file; "NaN" is declared missing in the script.
inline std::string dat(double x) {
  if (!std::isfinite(x)) return "NaN";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

/// A gnuplot single-quoted string ('' escapes a quote).
inline std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

/// One figure, drawn once per output format.
struct Figure {
  std::string base, title, body_svg, body_png;
};

/// The CDF, TTFT/queue-over-time and goodput-vs-rate figures, their data files written under
/// `plots`; problems (no run at the CDF rate) become warnings.
std::vector<Figure> latency_figures(const std::filesystem::path& plots, const Summary& summary,
                                    const std::vector<RequestRecord>& records, double cdf_rate,
                                    std::vector<std::string>& warnings);

}  // namespace servelab::analysis::plot_detail
