#pragma once
// Sampling noise of a run's figures: how much a percentile of N requests moves by which requests
// happened to be in the run. validate-sim prints it beside the sim's error, so an error inside the
// noise of one run reads as such without running the real backend again.
#include <cstdint>
#include <functional>
#include <vector>

#include "loadgen/records/record.h"

namespace servelab::analysis {

/// Statistics of one set of records (e.g. p50 and p99 TTFT), in a fixed order.
using RecordStatistics = std::function<std::vector<double>(const std::vector<RequestRecord>&)>;

/// For each statistic: the half-width of its central `level` interval over `n_resamples`
/// bootstrap resamples of `records` (drawn with replacement, splitmix64 seeded by `seed`),
/// divided by |the statistic on `records` itself| (NaN where that is 0 or not finite). The
/// requests of one run are not independent (they queue behind each other), so this is a lower
/// bound on the run-to-run noise, and for a percentile near the maximum of few records (a p99 of
/// 400) the resamples rarely reach past the largest record, so it understates that too. Throws std::invalid_argument on no records, n_resamples < 10
/// or level outside (0, 1).
std::vector<double> bootstrap_relative_halfwidths(const std::vector<RequestRecord>& records,
                                                  const RecordStatistics& statistics, int n_resamples = 200,
                                                  double level = 0.95, uint64_t seed = 1);

}  // namespace servelab::analysis
