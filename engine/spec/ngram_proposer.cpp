#include "engine/spec/ngram_proposer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace servelab {

NgramProposer::NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n)
    throw std::invalid_argument("ngram proposer: need 1 <= prompt_lookup_min (" + std::to_string(min_n) +
                                ") <= prompt_lookup_max (" + std::to_string(max_n) + ")");
}

void NgramProposer::propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) {
  const std::vector<TokenId>& t = seq.tokens;
  const int len = static_cast<int>(t.size());
  for (int n = std::min(max_n_, len - 1); n >= min_n_; --n) {
    const auto suffix = t.end() - n;
    // Latest earlier match: search the positions before the suffix itself, last first.
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, t.end(), t.begin() + start)) continue;
      const int from = start + n;
      const int k = std::min(max_k, len - from);
      draft.insert(draft.end(), t.begin() + from, t.begin() + from + k);
      return;
    }
  }
}

}  // namespace servelab
