#pragma once
// PromptMaker: the token ids of a plan's prompts, a pure function of the scenario's seed and the
// request. The planner makes every prompt with it; a plan made with prompts on demand keeps it
// and draws each prompt only when its request is sent (Plan::prompt), so a run of a million
// requests never holds every prompt at once (issue 28, item 5: the plan's prompts were most of
// the simulator's memory, page faults and allocations).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "loadgen/prefix_groups.h"
#include "loadgen/scenario.h"

namespace servelab {

/// What fixes one request's prompt ids beside the scenario (a PlannedRequest holds these).
struct PromptRecipe {
  uint64_t id = 0;           ///< request id: its ids come from the (seed, tokens, id) stream
  int n_own = 0;             ///< its own ids, after the shared prefix and group tokens
  bool with_prefix = false;  ///< shared prefix and group tokens first (a session's first turn)
  int group = -1;            ///< workload.prefix_groups index, −1 none
  int text = -1;             ///< the dataset text its own ids are cut from (add_text's index), −1 random
  bool copied_span = false;  ///< its own ids reproduce a document (loadgen/copied_spans.h)
};

class PromptMaker {
 public:
  /// Draws the shared prefix and the prefix groups' tokens from the scenario's seed. Throws
  /// std::invalid_argument when the scenario has no resolved vocabulary.
  explicit PromptMaker(const Scenario& scenario);

  /// Keeps a dataset text's ids (text prompts); returns its index for PromptRecipe::text.
  int add_text(std::vector<TokenId> ids);
  const PrefixGroups& groups() const { return groups_; }

  /// The prompt: [shared prefix + group tokens, when with_prefix] + n_own ids: the text's first
  /// n_own, else a copied-span prompt, else uniform ids in [2, vocab) from the request's stream.
  /// Its capacity leaves room for `room` more ids (the output a sequence appends to its prompt).
  std::vector<TokenId> tokens(const PromptRecipe& r, size_t room = 0) const;

 private:
  uint64_t seed_ = 0;
  int vocab_ = 0;
  CopiedSpansSpec copied_spans_;
  std::vector<TokenId> shared_prefix_;
  PrefixGroups groups_;
  std::vector<std::vector<TokenId>> texts_;
  const std::vector<TokenId> no_tokens_;  ///< no group tokens
};

}  // namespace servelab
