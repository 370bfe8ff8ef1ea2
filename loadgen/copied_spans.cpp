#include "loadgen/copied_spans.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "loadgen/rng.h"

namespace servelab {

bool draws_copied_span(const CopiedSpansSpec& spec, Rng& stream) {
  return spec.enabled() && stream.uniform() < spec.fraction;
}

std::vector<TokenId> copied_span_prompt(const CopiedSpansSpec& spec, int n_own, int vocab, Rng& ids, Rng& edits) {
  if (n_own < kCopiedSpanMinPrompt)
    throw std::invalid_argument("a copied span needs an own prompt of >= " + std::to_string(kCopiedSpanMinPrompt) +
                                " tokens (got " + std::to_string(n_own) + ")");
  const int64_t lo = std::min(2, vocab - 1);
  auto draw = [&] { return static_cast<TokenId>(ids.uniform_int(lo, vocab - 1)); };
  const int n_doc = std::min(spec.span_tokens, n_own - 1 - kCopiedSpanLeadTokens);
  std::vector<TokenId> out;
  out.reserve(static_cast<size_t>(n_own));
  for (int i = 0; i < n_doc; ++i) out.push_back(draw());
  // Edits: a repeated bigram whose continuation differs from its first occurrence's.
  for (int q = kCopiedSpanMinDocument; q + 1 < n_doc; ++q) {
    if (!(edits.uniform() < spec.edit_rate)) continue;
    const int p = static_cast<int>(edits.uniform_int(0, q - 3));
    out[size_t(q)] = out[size_t(p)];
    out[size_t(q) + 1] = out[size_t(p) + 1];
    ++q;
  }
  for (int i = n_doc + kCopiedSpanLeadTokens; i < n_own; ++i) out.push_back(draw());  // the request
  const std::vector<TokenId> lead(out.begin(), out.begin() + kCopiedSpanLeadTokens);
  out.insert(out.end(), lead.begin(), lead.end());
  return out;
}

}  // namespace servelab
