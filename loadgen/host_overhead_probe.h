#pragma once
// Measures HostOverhead on this machine: the engine and the in-process driver run bursts of
// requests at several batch sizes over a sim backend on a virtual clock, so nearly all the wall
// time is the engine's own work (scheduling, paged-KV bookkeeping, tokens, records), not forward().
// `servelab profile` runs it after its grid and writes the result into the profile.
#include <vector>

#include "engine/backend/host_overhead.h"
#include "engine/model/config.h"

namespace servelab {

struct HostOverheadPoint {
  int max_num_seqs = 0;      ///< the burst's batch cap
  double mean_seqs = 0.0;    ///< sequences per step, averaged over the run's steps
  double step_s = 0.0;       ///< wall seconds per step outside execute() (the fastest of the repeats)
  int n_steps = 0;
};

struct HostOverheadProbe {
  std::vector<HostOverheadPoint> points;
  HostOverhead fitted;       ///< HostOverhead::fit over (mean_seqs, step_s)
};

/// For each batch cap in `batch_sizes`: continuous batching, paged KV (blocks of 16), 4 × cap
/// requests arriving at once with 32-token prompts and 64-token outputs on `model`'s shape,
/// `repeats` times; keeps the fastest run per cap and fits a line through them. Wall-clock
/// figures: the result varies with the machine and its load, which is what it measures.
HostOverheadProbe measure_host_overhead(const ModelConfig& model, const std::vector<int>& batch_sizes = {1, 8, 32, 64, 128, 256},
                                        int repeats = 3);

}  // namespace servelab
