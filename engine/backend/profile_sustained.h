#pragma once
// `servelab profile --sustained-s S`: after the grid, in the same arena, the sustained-load probe
// the sim prices a step's recent load from (engine/backend/sim_sustained.h). After an idle pause
// (min(1 s, S / 2)), the grid's heaviest prefill-like point (prefill, chunk or mixed, the most
// rows, then the longest context) runs back to back with the grid's middle decode (the lead-in
// point) after every heavy_per_decode of them, for S seconds. Each probe point keeps the grid's
// time of it, the median of its first runs (3 heavy, 2 decodes: cold, recorded, not priced) and
// of its runs in the last 40% (hot); tau is when the heavy runs, as a running median of 3, first
// reach 63% of the way from cold to hot (at least 20 ms). Off by default: on the H200 cells it
// measured, it moved the long-prompt cell's steps half way to the real ones and left the chat
// cells' within a point or two (results/sim-validation/sustained-h200x2/README.md).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/profiler.h"
#include "engine/backend/sim_sustained.h"

namespace servelab {

/// The probe on `runner` over `plan`'s points, whose grid times are `samples` (same order).
/// nullopt when the grid has no prefill-like point or no decode to probe with.
std::optional<SustainedLoad> profile_sustained(ProfileRunner& runner, const ProfilePlan& plan,
                                               const std::vector<ProfileSample>& samples, const ProfileOptions& options,
                                               const std::function<void(const std::string&)>& progress = {});

/// The probe's figures as text (for `servelab profile`'s table).
std::string sustained_table(const SustainedLoad& load);

/// From a probe's trace (seconds since start, kind 0 heavy / 1 decode, step seconds) and the
/// two points' grid times: cold, hot and tau (sustained_load's arithmetic, for tests).
void summarize_sustained(SustainedLoad& load);

}  // namespace servelab
