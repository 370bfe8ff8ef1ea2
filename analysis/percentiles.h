#pragma once
// Exact percentiles from sorted samples (no sketches, no histograms): the numbers a reader can
// recompute from records.jsonl with numpy.percentile(x, q) and get the same digits.
#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace servelab::analysis {

/// The q-th percentile (q in [0, 100]) of ascending `sorted`, interpolated linearly between the
/// closest ranks, as numpy.percentile's default ("linear", Hyndman & Fan type 7):
///   h = (n - 1) * q / 100,  lo = floor(h),  p = x[lo] + (h - lo) * (x[lo + 1] - x[lo]).
/// So p0 = min, p100 = max, and p50 of an even count is the mean of the middle two.
/// Throws std::invalid_argument on an empty input or q outside [0, 100].
double percentile_of_sorted(std::span<const double> sorted, double q);

/// Summary statistics of one metric's samples (ms for latencies). With n == 0 every field is
/// NaN and the JSON form holds nulls: "no samples" must not read as "0 ms".
struct Distribution {
  std::size_t n = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p95 = 0.0;
  double p99 = 0.0;
  double p999 = 0.0;  ///< p99.9
  double max = 0.0;
  /// (q, value) of configured percentiles beyond the fixed ones (report.percentiles), q ascending.
  std::vector<std::pair<double, double>> extra;

  bool empty() const { return n == 0; }
  /// The q-th percentile if this distribution holds it (a fixed field or an extra; q = 100 is max),
  /// else NaN.
  double at(double q) const;
};

/// A percentile's JSON key: "p50", "p99", "p999" (99.9, the historical spelling), "p99_99" (99.99),
/// "p12_5" (12.5): the digits of q with '_' for the decimal point, except 99.9.
std::string percentile_key(double q);
/// The q a key names ("p75" → 75, "p999" → 99.9, "p99_99" → 99.99); nullopt when it names none.
std::optional<double> parse_percentile_key(const std::string& key);

/// Sorts `samples` (taken by value) and computes every field. The mean sums in ascending order,
/// so it does not depend on the order samples were gathered in.
/// `extra_qs`: more percentiles to compute (those equal to a fixed one are skipped).
Distribution summarize(std::vector<double> samples, const std::vector<double>& extra_qs = {});

/// {"mean", "p50", "p90", "p95", "p99", "p999", "max"} — exactly DESIGN.md's keys (n is not
/// written: counts live beside the distributions) — then each extra percentile by percentile_key. Values rounded to 6 decimals (see json_format.h).
void to_json(nlohmann::ordered_json& j, const Distribution& d);
/// Reads the form above (extra "p…" keys too); nulls become NaN. n is set to 1 when any value is present (the count
/// is not stored), 0 otherwise.
void from_json(const nlohmann::ordered_json& j, Distribution& d);

}  // namespace servelab::analysis
