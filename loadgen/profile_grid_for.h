#pragma once
// The profile grid for a scenario's own steps (`servelab profile --for-scenario FILE`): knots where
// its requests' prompt and context lengths and its strategies' batches fall, instead of the fixed
// lists, so the sim prices the steps the scenario will run from points that cover them (issue 28).
#include <string>
#include <vector>

#include "engine/backend/profiler.h"
#include "loadgen/scenario.h"

namespace servelab {

/// What profile_grid_for derived, and from what (printed by the CLI).
struct ScenarioGrid {
  ProfileOptions grid;
  /// The draft to profile beside the target: the first strategy with a `self` draft gives its
  /// layers, else the first `draft_model` its preset (0 and "" when none speculates with a model).
  int draft_layers = 0;
  std::string draft_preset;
  std::vector<std::string> notes;  ///< one line per list: where its knots come from
};

/// `base` with its lists replaced by the scenario's: the plan at the scenario's first rate (its
/// seed, its length distributions or dataset) gives the prompt lengths P and output lengths O:
///   prefill_lens  P's quantiles 0, 0.25, 0.5, 0.75, 0.95 and 1 (one-sequence prefills);
///   prompt_lens   P's median and maximum (batched prefills: static batching pads to the longest);
///   contexts      quantiles 0.05, 0.5 and 0.95 of P + O / 2 (where decodes run on average) and the
///                 longest P + O;
///   batch_sizes   every size up to min(16, B), then powers of two and B, where B is the largest
///                 batch any strategy can run (max_step_seqs);
///   chunk_lens    P's quartiles, capped at the strategies' largest chunk (max_num_batched_tokens
///                 where chunked prefill is on), plus that chunk when a prompt exceeds it and the
///                 quartiles of those prompts' last chunks (their length mod the chunk);
///   max_rows      the largest step any strategy runs (max_step_rows), at most B × the longest
///                 prompt (or the chunk, if larger);
///   verify_ks     the num_speculative_tokens of every strategy that speculates (verification
///                 points at those batches and contexts), and with adaptive k, 1 as well (a
///                 sequence drafts from 1 to k tokens).
/// Every value is at least 1, lists are sorted and unique. Throws std::invalid_argument when the
/// plan has no request.
ScenarioGrid profile_grid_for(const Scenario& scenario, const ProfileOptions& base);

}  // namespace servelab
