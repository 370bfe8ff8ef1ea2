#pragma once
// A real run's recorded steps read back as StepTimings: validate-sim's steps_real.jsonl (one line
// a step: its shape, measured_s, start_s) or a cpu / cuda run's steps.jsonl (StepRecord lines
// carrying roofline.shape and the forward() time). price-steps prices them; calibrate folds them
// into a profile.
#include <string>
#include <vector>

#include "loadgen/measuring_backend.h"

namespace servelab {

/// A step read from a file, with what the reader saw beside the shape.
struct RecordedStep {
  StepTiming timing;
  std::string run;          ///< the line's "run" label ("" in a run's own steps.jsonl)
  int64_t swap_bytes = 0;   ///< steps_real.jsonl: bytes swapped out or in before the step (0 in a run's steps.jsonl)
  /// A run's steps.jsonl (cpu / cuda, with host.forward_s): when the step began (its host work
  /// before forward() first) and the requests waiting after it; -1 where the line has no such keys.
  double record_start_s = -1.0;
  int n_waiting = -1;
};

/// Every step of `path` in file order (each line by its own keys: measured_s, else duration_s and
/// roofline.shape); `run` non-empty keeps only lines of that run label. Throws std::runtime_error
/// naming path:line for a line that is not such a step, and when nothing is left.
std::vector<RecordedStep> read_recorded_steps(const std::string& path, const std::string& run);

/// The timings alone (read_recorded_steps).
std::vector<StepTiming> read_step_timings(const std::string& path, const std::string& run);

}  // namespace servelab
