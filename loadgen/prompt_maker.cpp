#include "loadgen/prompt_maker.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "loadgen/copied_spans.h"
#include "loadgen/rng.h"

namespace servelab {

PromptMaker::PromptMaker(const Scenario& scenario)
    : seed_(scenario.seed), vocab_(scenario.model.vocab_size), copied_spans_(scenario.workload.copied_spans) {
  if (vocab_ < 1) throw std::invalid_argument("scenario has no resolved model vocabulary (call Scenario::resolve)");
  Rng rng = Rng::stream(seed_, RngStream::shared_prefix);
  const int64_t lo = std::min(2, vocab_ - 1);
  for (int i = 0; i < scenario.workload.shared_prefix_tokens; ++i)
    shared_prefix_.push_back(static_cast<TokenId>(rng.uniform_int(lo, vocab_ - 1)));
  groups_ = PrefixGroups(scenario.workload.prefix_groups, seed_, vocab_);
}

int PromptMaker::add_text(std::vector<TokenId> ids) {
  texts_.push_back(std::move(ids));
  return static_cast<int>(texts_.size()) - 1;
}

std::vector<TokenId> PromptMaker::tokens(const PromptRecipe& r, size_t room) const {
  std::vector<TokenId> out;
  const size_t n_own = static_cast<size_t>(std::max(0, r.n_own));
  const std::vector<TokenId>& group = r.with_prefix ? groups_.tokens(r.group) : no_tokens_;
  out.reserve((r.with_prefix ? shared_prefix_.size() + group.size() : 0) + n_own + room);  // one allocation
  if (r.with_prefix) {
    out.insert(out.end(), shared_prefix_.begin(), shared_prefix_.end());
    out.insert(out.end(), group.begin(), group.end());
  }
  const std::vector<TokenId>* text = r.text >= 0 ? &texts_.at(static_cast<size_t>(r.text)) : nullptr;
  if (text && !text->empty()) {  // the dataset prompt's own ids, cut to n_own when it was clipped
    out.insert(out.end(), text->begin(), text->begin() + static_cast<long>(std::min(n_own, text->size())));
    return out;
  }
  Rng ids = Rng::stream(seed_, RngStream::tokens, r.id);
  if (r.copied_span) {
    // The span stream as the plan left it: its first draw chose the copied span, the rest are edits.
    Rng edits = Rng::stream(seed_, RngStream::copied_spans, r.id);
    if (!draws_copied_span(copied_spans_, edits))
      throw std::logic_error("request " + std::to_string(r.id) + " was planned with a copied span its stream does not draw");
    const std::vector<TokenId> own = copied_span_prompt(copied_spans_, r.n_own, vocab_, ids, edits);
    out.insert(out.end(), own.begin(), own.end());
    return out;
  }
  const size_t head = out.size();
  out.resize(head + n_own);  // sized once, drawn in place
  ids.uniform_ints(std::min(2, vocab_ - 1), vocab_ - 1, out.data() + head, n_own);
  return out;
}

}  // namespace servelab
