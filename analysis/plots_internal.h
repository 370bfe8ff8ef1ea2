#pragma once
// Pieces shared by plots.cpp and plots_latency.cpp (not part of the public API).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/server_state.h"
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

/// plots/ttft_time_<file>.dat (each ok measured request's TTFT at its arrival) and
/// plots/queue_time_<file>.dat (requests arrived, not yet admitted, over time) of run `label`;
/// false when it has no measured request. `ttft_max_ms` gets the largest TTFT written.
bool ttft_queue_data(const std::filesystem::path& plots, const std::string& file, const std::string& label,
                     const std::vector<RequestRecord>& records, double& ttft_max_ms);

/// The CDF, TTFT/queue-over-time and goodput-vs-rate figures, their data files written under
/// `plots`; problems (no run at the CDF rate) become warnings.
std::vector<Figure> latency_figures(const std::filesystem::path& plots, const Summary& summary,
                                    const std::vector<RequestRecord>& records, double cdf_rate,
                                    std::vector<std::string>& warnings);

/// Per strategy (its highest-rate run, repetition 1): the client's TTFT and queue length above the
/// server's running and waiting requests, KV use and preemptions, on one time axis
/// (server_state_<strategy>): from `samples` (server_metrics.jsonl) when the run has any, else from
/// its `steps`. Data in plots/server_state_<strategy>.dat.
std::vector<Figure> server_state_figures(const std::filesystem::path& plots, const Summary& summary,
                                         const std::vector<RequestRecord>& records,
                                         const std::vector<StepRecord>& steps,
                                         const std::vector<ServerSample>& samples);

}  // namespace servelab::analysis::plot_detail
