#pragma once
// When and how much to speculate. Two rules, both cheap enough to run every step:
// - per sequence, k follows its acceptance (Hugging Face assisted generation's schedule): +2
//   after a verification that accepted every draft, -1 after one that rejected any, in [1, k_max];
// - per step, drafts are proposed only when they pay at this batch: with α_s a sequence's
//   acceptance so far, its expected tokens from k_s drafts are (1 - α_s^(k_s+1)) / (1 - α_s); the
//   step speculates when Σ E_s / (T_verify + T_draft) > B / T_decode, the three priced by the cost
//   model (a decode step of the B sequences, the verification step of their 1 + k_s rows, and
//   k_max decode steps of the draft model, zero for n-gram). A larger batch moves decode from
//   bandwidth-bound towards compute-bound, T_verify / T_decode grows towards (B + Σk) / B, and
//   the rule turns speculation off.
#include <optional>
#include <span>

#include "engine/backend/cost_model.h"

namespace servelab {

/// k for the next verification of a sequence that drafted n_drafted tokens at k and had
/// n_accepted of them accepted.
int next_num_drafts(int k, int n_drafted, int n_accepted, int k_max);

/// Expected tokens one verification yields from k drafts accepted independently with
/// probability alpha each: 1 + alpha + ... + alpha^k.
double expected_tokens(double alpha, int k);

/// A sequence about to draw: its context (tokens after the step without drafts), its drafts k,
/// and its acceptance rate so far.
struct DrawingSeq {
  int context = 0;
  int k = 0;
  double alpha = 0.0;
};

/// The cost side of the per-step rule.
struct SpecPricing {
  SimCostModel cost;                 ///< prices the target's steps (and the draft's)
  ModelConfig target;
  std::optional<ModelConfig> draft;  ///< the draft model (self, draft_model); none for n-gram
};

/// The rule's figures for one step: seconds of plain decode, of verification, of drafting, and
/// the expected tokens with and without drafts.
struct SpecVerdict {
  double decode_s = 0.0, verify_s = 0.0, draft_s = 0.0;
  double tokens_plain = 0.0, tokens_spec = 0.0;
  bool speculate() const { return tokens_spec * decode_s > tokens_plain * (verify_s + draft_s); }
};

/// Prices one step of `seqs` with and without their drafts.
SpecVerdict price_speculation(const SpecPricing& pricing, std::span<const DrawingSeq> seqs);

}  // namespace servelab
