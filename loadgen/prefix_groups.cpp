#include "loadgen/prefix_groups.h"

#include <algorithm>
#include <stdexcept>

namespace servelab {

PrefixGroups::PrefixGroups(const std::vector<PrefixGroupSpec>& groups, uint64_t seed, int vocab) {
  if (vocab < 1) throw std::invalid_argument("prefix groups need a vocabulary of >= 1 token");
  const int64_t lo = std::min(2, vocab - 1);
  double sum = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    Rng rng = Rng::stream(seed, RngStream::prefix_groups, g);
    std::vector<TokenId> ids;
    ids.reserve(static_cast<size_t>(std::max(0, groups[g].tokens)));
    for (int i = 0; i < groups[g].tokens; ++i) ids.push_back(static_cast<TokenId>(rng.uniform_int(lo, vocab - 1)));
    prompts_.push_back(std::move(ids));
    sum += groups[g].fraction;
    cumulative_.push_back(sum);
  }
}

int PrefixGroups::choose(Rng& choice) const {
  if (prompts_.empty()) return -1;
  const double u = choice.uniform();
  for (size_t g = 0; g < cumulative_.size(); ++g)
    if (u < cumulative_[g]) return static_cast<int>(g);
  return -1;
}

const std::vector<TokenId>& PrefixGroups::tokens(int g) const {
  static const std::vector<TokenId> none;
  if (g < 0 || g >= size()) return none;
  return prompts_[static_cast<size_t>(g)];
}

}  // namespace servelab
