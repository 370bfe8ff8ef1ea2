#pragma once
// The engine's own work per step, outside Backend::execute(): scheduling, KV bookkeeping,
// emitting tokens, retiring requests and the driver's records. A real run pays it between and
// around its forward passes; a profile's grid times execute() alone, so the sim adds this to every
// predicted step. `servelab profile` measures it on the machine it profiles
// (loadgen/host_overhead_probe.h) and writes it into the profile beside the samples.
#include <cstdint>
#include <span>
#include <utility>

namespace servelab {

/// Host seconds a step costs beyond execute(): per_step_s + per_seq_s × sequences in the batch.
struct HostOverhead {
  double per_step_s = 0.0;
  double per_seq_s = 0.0;

  double seconds(int64_t n_seqs) const { return per_step_s + per_seq_s * static_cast<double>(n_seqs); }
  bool zero() const { return per_step_s == 0.0 && per_seq_s == 0.0; }

  /// Least-squares line through (mean sequences per step, seconds per step) points; a negative
  /// slope or intercept is clamped to 0 and the other refitted. One point (or one distinct batch
  /// size) gives a constant. Throws std::invalid_argument on no points or a negative, NaN or
  /// infinite value.
  static HostOverhead fit(std::span<const std::pair<double, double>> seqs_seconds);
};

}  // namespace servelab
