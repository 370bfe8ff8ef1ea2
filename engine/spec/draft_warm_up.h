#pragma once
// What a model proposer runs before serving so that its draft backend's first use of each step
// shape (Backend::warm_shapes: on cuda a decode graph's eager first run and capture per batch and
// context bucket, a cuBLASLt kernel's load per row bucket) is paid at start-up, not inside the
// first serving steps that draft at that shape. On an H200 (llama2-7b, `self` of one layer,
// results/sim-validation/gpu-llama2-7b-spec-final) such first uses took 6-23 ms of drafting where
// the same step later took 1.2-1.7 ms, and held 11% / 18% of the drafting time at 32 / 64 users.
// Plain C++: the plan is tested without a GPU (tests/engine/draft_warm_up_test.cpp).
#include <vector>

#include "engine/backend/backend.h"

namespace servelab {

/// One warm-up round: propose_batch over fresh sequences of these lengths (their whole tokens
/// caught up in the first draft step, then k - 1 one-row steps), greedy or sampled (with q, as a
/// sampled target asks), after which the proposer forgets them.
struct DraftWarmRound {
  std::vector<int> lengths;  ///< tokens of each sequence
  int k = 1;                 ///< drafts asked of each
  bool sampled = false;
};

/// The rounds that run every shape of `shapes` once more than its first use needs, within
/// `limits` (max_rows: the most rows a draft step holds; max_seqs; max_context: the longest
/// sequence drafted for):
/// - an eager step of each `step_rows` count R (<= max_rows): sequences of at most
///   max_context - 1 tokens summing to R, k = 1 (the catch-up step alone), and one of S
///   sequences of 2 tokens for each count S in {1} and `step_rows` up to max_seqs (the LM head's
///   rows are the draws: a catch-up step of S sequences);
/// - for each of `decode_contexts` C and `decode_batches` B (largest first, sampled before
///   greedy, so any buffer that grows does so before the first capture): B sequences, one of
///   them long enough that its one-row steps reach a context of min(C, max_context - 1), the
///   rest of 2 tokens, k = 3, so that two one-row steps of B sequences run at that context
///   bucket (the eager first run and the capture).
/// Empty when `shapes` is.
std::vector<DraftWarmRound> draft_warm_up_plan(const WarmShapes& shapes, const StepLimits& limits);

/// What a warm-up ran and took (ModelProposer::warm_up).
struct DraftWarmUpStats {
  int rounds = 0;
  int steps = 0;         ///< draft backend steps
  double seconds = 0.0;  ///< wall time
};

}  // namespace servelab
