#pragma once
// DraftPricer: prices the steps of a speculative draft model (a `self` draft of the target's first
// layers, or a smaller `draft_model`) on the device the target's cost model describes. The
// roofline prices any model directly. With a profile: when the profile carries one of the draft
// itself (SimCostModel::draft_profiles, `servelab profile --draft-layers N`), from that; otherwise
// the target's profiled price of the same step times the roofline's ratio draft / target (the
// scaling StepPricer applies to other weight formats), a fallback that misses what the roofline
// does not see (a one-layer draft's weights staying in cache: on the CPU engine it prices tiny's
// one-layer draft ~25% high).
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/backend/cost_model.h"

namespace servelab {

/// The steps of one proposer round as the sim prices it: a catch-up step in which each of n_seqs
/// sequences computes `rows` rows ending at `context` (drawing after the last), then k - 1
/// one-row steps at context + 1 .. context + k - 1.
std::vector<StepShape> draft_round_shapes(int n_seqs, int k, int context, int rows);

class DraftPricer {
 public:
  /// Holds a reference to `cost`: it must outlive the pricer and stay unchanged. Throws
  /// std::invalid_argument when either model is invalid.
  DraftPricer(const SimCostModel& cost, const ModelConfig& target, const ModelConfig& draft);
  DraftPricer(const DraftPricer&) = delete;  // the pricers point into target_, draft_ and draft_cost_
  DraftPricer& operator=(const DraftPricer&) = delete;

  /// Predicted seconds of one draft step of `shape` (its forward alone: no host overhead).
  double seconds(const StepShape& shape) const;
  /// Predicted seconds of one whole proposer round: its catch-up step and one-row steps (`steps`,
  /// in order, the catch-up first), each priced by seconds(), plus the proposer's own work that
  /// the profile's timed rounds measured beside them (none without rounds): per draft step,
  /// what the steady rounds (2 catch-up rows a sequence) took over their priced forwards,
  /// interpolated over the step's sequences; and, for the `prompt_rows` rows of sequences
  /// catching up their prompt (a first round), what the profile's first rounds took over that;
  /// each knot at least 0 (a round measured below its priced forward steps adds nothing).
  double round_seconds(std::span<const StepShape> steps, int64_t prompt_rows) const;
  /// Whether round_seconds adds the proposer's measured work (the profile timed rounds of this draft).
  bool rounds_profiled() const { return !step_work_.empty(); }
  /// The proposer's work per draft step of `n_seqs` sequences, and for `prompt_rows` caught-up
  /// prompt rows, that round_seconds adds (0 without rounds).
  double step_work_s(int64_t n_seqs) const;
  double prompt_work_s(int64_t prompt_rows) const;
  const ModelConfig& draft() const { return draft_; }
  /// Whether the draft's steps are priced from a profile of the draft itself.
  bool draft_profiled() const { return draft_pricer_.has_value(); }

 private:
  const SimCostModel& cost_;
  ModelConfig target_, draft_;
  StepPricer target_pricer_;
  RooflineTerms target_terms_, draft_terms_;
  std::optional<SimCostModel> draft_cost_;  // the draft's own profile, when the cost model has one
  std::optional<StepPricer> draft_pricer_;
  /// Knots (x, seconds) fitted from the profile's rounds: per draft step over its sequences, and
  /// per first round over its prompt rows (both 0 at x = 0; beyond the last knot, proportional).
  std::vector<std::pair<double, double>> step_work_, prompt_work_;
  void fit_rounds(const std::vector<DraftRound>& rounds);
};

}  // namespace servelab
