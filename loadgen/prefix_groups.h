#pragma once
// Prefix groups: n system prompts, each the start of a fraction of the requests (after the one
// shared prefix), as a chat service with a few assistants shows a prefix cache.
#include <vector>

#include "engine/request.h"
#include "loadgen/rng.h"
#include "loadgen/scenario.h"

namespace servelab {

/// The token ids of each group's prompt and the choice of a group per request.
/// Group g's ids come from (seed, prefix_groups, g), uniform in [2, vocab); the choice is one
/// uniform draw per request from its own stream, in plan order: request i is in the first group
/// whose cumulative fraction exceeds its draw, or in none (−1) past the last.
class PrefixGroups {
 public:
  PrefixGroups() = default;
  PrefixGroups(const std::vector<PrefixGroupSpec>& groups, uint64_t seed, int vocab);
  bool empty() const { return prompts_.empty(); }
  /// The group of the next request (advances the choice stream); −1 = none.
  int choose(Rng& choice) const;
  /// Group g's tokens; empty for g = −1.
  const std::vector<TokenId>& tokens(int g) const;
  int size() const { return static_cast<int>(prompts_.size()); }

 private:
  std::vector<std::vector<TokenId>> prompts_;
  std::vector<double> cumulative_;  ///< running sum of the fractions
};

}  // namespace servelab
