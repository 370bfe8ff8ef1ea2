#pragma once
// Repeated runs of one sweep point (`workload.repeat: N`): each repetition runs the point with its
// own derived seed and writes records labelled "<label>#<k>" (k = 1..N). A point's summary holds
// every repetition's metrics, their mean (the run's "metrics", so tables, plots and gates read the
// mean) and, for every headline metric, mean, std, min, max and a 95% confidence interval of the
// mean (Student t with n − 1 degrees of freedom): mean ± t(0.975, n − 1) · std / √n.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "analysis/metrics.h"

namespace servelab::analysis {

/// One metric over a point's repetitions. n < 2 leaves std and the interval NaN (JSON null).
struct MetricStats {
  std::size_t n = 0;
  double mean = 0.0;
  double std = 0.0;  ///< sample standard deviation (n − 1 in the denominator)
  double min = 0.0;
  double max = 0.0;
  double ci95_lo = 0.0;
  double ci95_hi = 0.0;
};

/// Statistics of `values`; NaNs (runs without a value) are left out. All NaN when none is left.
MetricStats stats_of(const std::vector<double>& values);

/// The 97.5% quantile of Student's t with `df` >= 1 degrees of freedom (12.706 for df 1,
/// 1.96 as df grows). Throws std::invalid_argument for df 0.
double student_t_975(std::size_t df);

/// The metrics each repeated point gets statistics for (summary paths): mean and every percentile
/// of TTFT, TPOT, ITL and E2E (with `extra_percentiles`), the throughputs, goodput and attainment.
std::vector<std::string> headline_metrics(const std::vector<double>& extra_percentiles = {});

/// The records' label of repetition k (1-based) of a point: `label` itself when n_repeats is 1,
/// else "<label>#<k>".
std::string repetition_label(const std::string& label, int k, int n_repeats);

/// The mean of several repetitions' metrics: every figure averaged over the repetitions that have
/// it (null where none has), counts (n_*) summed, maxima (batch_size.max) the largest, the
/// lateness warning set when any repetition set it, percentile objectives re-judged on the means.
RunMetrics mean_metrics(const std::vector<RunMetrics>& repetitions);

/// The value at a summary path ("ttft_ms.p99", "goodput_tok_s") in a metrics JSON object, NaN
/// when missing or null.
double metric_at(const nlohmann::ordered_json& metrics, const std::string& path);

void to_json(nlohmann::ordered_json& j, const MetricStats& s);  ///< {n, mean, std, min, max, ci95: [lo, hi]}
void from_json(const nlohmann::ordered_json& j, MetricStats& s);

}  // namespace servelab::analysis
