#pragma once
// Calibration: a short real serving run's steps folded into a profile as samples of their own
// (`servelab calibrate`). A profile's grid times each step shape alone, on fresh sequences, with the
// decodes of a mixed point at one context; a serving run's steps are the scenario's own mix
// (decodes at spread contexts beside chunks, two prompts' pieces in one step, the KV arena as
// serving leaves it). On an H200 the llama3-8b long-prompt matrix cell's mixed steps ran 6-11%
// over the grid's price at every chunk start and decode count while chunks alone ran within 1%
// (results/sim-validation/calibrate-2026-11-30/); samples of such steps let the fit price them
// as served.
//
// With a sustained-load probe in the profile (sim_sustained.h) each step's time is first taken
// back to the grid's state: divided by the factor the sim's load state gives it at that point of
// the run (the state following the real steps, as price-steps does), so the sim, which applies
// that factor again from its own state, does not count the run's heat twice.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cost_model.h"
#include "engine/model/config.h"
#include "loadgen/step_timing_file.h"

namespace servelab {

struct CalibrationOptions {
  /// Each run's first seconds (from its first step) left out: CUDA graph captures, first-use
  /// GEMM lookups and the clock's climb from idle are not serving's steady state.
  double skip_s = 2.0;
  std::string steps_path;  ///< recorded in the profile's "calibration" entry
  std::string run;         ///< the run label the steps were filtered by ("" = every step of the file)
  std::string date;        ///< ISO 8601, recorded
};

struct CalibrationSummary {
  int64_t used = 0;
  int64_t skipped_warmup = 0;  ///< within skip_s of their run's first step
  int64_t skipped_lora = 0;    ///< ran adapters: the profile's LoRA terms price those apart
  int64_t skipped_swap = 0;    ///< swapped KV before the step: its time holds the copy
  bool de_heated = false;      ///< the profile has a sustained-load probe and the steps a start time
  double max_factor = 1.0;     ///< the largest load factor a step was divided by
  std::vector<size_t> added;   ///< the indices (into the steps given) of the steps added
};

/// Appends `steps` (in run order; a new run starts where the run label changes or start_s goes
/// back) to `profile`'s "samples" (a servelab.profile/2 object: each sample its shape, phase,
/// step_s and "source": "calibration") and records what was added in its "calibration" list.
/// `cost` is the profile as given (fitted from it: its sustained-load probe and device), `model`
/// the model it prices. Throws std::invalid_argument when no step is left to add, or the profile
/// has no "samples" list.
CalibrationSummary add_calibration_samples(nlohmann::ordered_json& profile, const std::vector<RecordedStep>& steps,
                                           const SimCostModel& cost, const ModelConfig& model,
                                           const CalibrationOptions& options);

/// The engine's host seconds a step beyond its forward(), from a real run's back-to-back steps: for
/// each step after which requests waited (n_waiting > 0: the engine had work and started the next
/// step as soon as it could), the next step's start minus its own start minus its forward() time
/// (its host work before forward() and everything between the two steps: tokens, retirements,
/// records, the driver). Steps within skip_s of their run's first step are left out. The medians
/// by batch size (of at least 8 steps each) fitted as HostOverhead::fit does; nullopt with fewer
/// than 50 such steps or without the keys (validate-sim's steps_real.jsonl has none). What
/// `servelab profile`'s probe measures over a sim backend is a fraction of it (on an H200 3-16 µs
/// against 106-153 µs: results/sim-validation/README.md).
struct HostFromRun {
  HostOverhead fitted;
  int64_t steps = 0;                                  ///< back-to-back steps used
  std::vector<std::pair<double, double>> points;      ///< (sequences, median seconds) per batch size
};
std::optional<HostFromRun> host_overhead_from_run(const std::vector<RecordedStep>& steps, double skip_s);

/// The profile phase a recorded step's shape reads as: decode (one row a sequence), verify (drafts
/// verified), mixed (prefill rows beside decodes), chunk (a prefill after cached context) or prefill.
const char* calibration_phase(const StepShape& shape);

}  // namespace servelab
