#pragma once
// Where the cost model's step error comes from: a real run's steps, each priced by the cost model
// (StepTiming), grouped by what the step did. The sum over a class says whether the profile is
// off for, say, large decode batches or for prefill chunks, which the run-level figures cannot.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loadgen/capacity_probe.h"

namespace servelab {

/// One class of steps: decode-only steps by batch size, steps of prefill chunks alone by tokens,
/// or mixed steps (chunks beside decodes) by tokens.
struct StepClassError {
  std::string name;           ///< e.g. "decode, 17-64 seqs", "prefill, 257-1024 tokens", "mixed, 257-1024 tokens"
  int64_t n_steps = 0;
  double measured_s = 0.0;    ///< Σ measured forward() time
  double predicted_s = 0.0;   ///< Σ the cost model's price for the same shapes
  double ratio_p50 = 0.0;     ///< median of measured / predicted over the class's steps
  /// (predicted − measured) / measured: the sim's error over the class, as the run figures sign it.
  double error() const { return measured_s > 0 ? (predicted_s - measured_s) / measured_s : 0.0; }
};

/// True when every sequence in the step computed one new token (no prefill chunk).
bool is_decode_only(const StepShape& shape);
/// The class a step belongs to (its StepClassError::name).
std::string step_class(const StepShape& shape);
/// The classes present in `steps`, decode classes first (by batch size), then prefill, then mixed
/// (each by tokens); empty classes are left out.
std::vector<StepClassError> step_class_errors(std::span<const StepTiming> steps);
/// step_class_errors as a table: a row per class (steps, Σ measured and predicted seconds, the
/// error) and a last row over every step, as price-steps and calibrate print it.
std::string step_class_table(std::span<const StepTiming> steps);
/// One JSON line (with '\n') for a step: its run label, shape, measured and predicted seconds.
std::string step_timing_line(const std::string& run, const StepTiming& step);

}  // namespace servelab
