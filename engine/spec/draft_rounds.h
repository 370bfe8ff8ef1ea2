#pragma once
// Times whole proposer rounds of a model draft (`servelab profile --draft-layers N` or
// `--draft-preset P`): ModelProposer::propose_batch for B sequences at k drafts, the way the
// engine calls it, so that the round's host work (rolling each copy back, catching its K/V up,
// building every draft step's input, sampling, copying the tokens back) is in the figure beside
// the draft's forward steps, which the profile's grid times alone. The sim's DraftPricer prices
// drafting from both: the forward steps from the grid, the rest from what these rounds took over
// them (engine/backend/draft_pricer.h).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/cost_model.h"
#include "engine/spec/model_proposer.h"

namespace servelab {

/// Which rounds to time. validate() names the bad field.
struct DraftRoundOptions {
  /// Steady rounds: B sequences at `context` drafting k each, every draft accepted between rounds
  /// (so each round catches up 2 rows a sequence: the last draft and the bonus token), for every
  /// batch size × k.
  std::vector<int> batch_sizes = {1, 2, 4, 8};
  std::vector<int> ks = {3};
  int context = 128;
  /// First rounds: B fresh sequences of prompt + 1 tokens (a sequence's first round, right after
  /// its prefill drew the first token: the draft catches its whole prompt up), at the largest k,
  /// for every batch size × prompt length with B × (prompt + 1) <= max_prompt_rows.
  std::vector<int> prompt_lens = {128};
  int max_prompt_rows = 8192;
  int warmup = 2;   ///< untimed rounds before a point's timed ones
  int repeats = 5;  ///< timed rounds a point; the median is kept
  uint64_t seed = 0;
  void validate() const;
};

/// Times the rounds on `proposer` (a fresh one: its sequences are created and forgotten here).
/// `vocab`: the tokens drawn for the sequences. `progress`, when set, gets a line per point.
std::vector<DraftRound> profile_draft_rounds(ModelProposer& proposer, int vocab, const DraftRoundOptions& options,
                                             const std::function<void(const std::string&)>& progress = {});

}  // namespace servelab
