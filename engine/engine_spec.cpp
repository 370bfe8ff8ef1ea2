// The engine's speculative decoding: the proposer and its policy (set_proposer), and each step's
// drafts (propose_drafts): which running sequences draft and how many tokens, the measured rule's
// probes (engine/spec/adaptive.h) or the cost model's price deciding between drafts and a plain
// step, drafts trimmed to a structured-output constraint.
#include <algorithm>
#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_state.h"

namespace servelab {

void Engine::set_proposer(std::unique_ptr<Proposer> proposer, int num_speculative_tokens) {
  SpecPolicy policy;
  policy.num_speculative_tokens = num_speculative_tokens;
  policy.adaptive = false;
  set_proposer(std::move(proposer), std::move(policy));
}

void Engine::set_proposer(std::unique_ptr<Proposer> proposer, SpecPolicy policy) {
  if (proposer && config_.sched.kind != BatchingKind::continuous)
    throw std::invalid_argument(std::string("speculative decoding needs continuous batching (got ") +
                                to_string(config_.sched.kind) + ")");
  if (proposer && policy.num_speculative_tokens < 1)
    throw std::invalid_argument("num_speculative_tokens must be >= 1 (got " +
                                std::to_string(policy.num_speculative_tokens) + ")");
  proposer_ = std::move(proposer);
  spec_ = std::move(policy);
  state_->proposer = proposer_.get();
  state_->spec_stats.clear();
}

namespace {

/// Drops the drafts from the first one the constraint does not allow after the ones before it.
void trim_to_constraint(Sequence& s, TokenConstraint& constraint, std::vector<uint32_t>& words, int vocab) {
  words.resize(size_t(vocab + 31) / 32);
  for (size_t j = 0; j < s.spec_tokens.size(); ++j) {
    constraint.fill_mask(std::span<const TokenId>(s.spec_tokens.data(), j), words.data());
    const TokenId t = s.spec_tokens[j];
    if (t < 0 || t >= vocab || !((words[size_t(t) / 32] >> (t % 32)) & 1u)) {
      s.spec_tokens.resize(j);
      return;
    }
  }
}

}  // namespace

int Engine::propose_drafts(StepOutcome& out) {
  struct Candidate {
    Sequence* seq;
    RequestState* rs;
    int k;
  };
  std::vector<Candidate> cands;
  std::vector<DrawingSeq> priced;
  for (auto& [id, rs] : state_->requests) {
    if (rs->request.sampling.n > 1) continue;
    for (auto& seq : rs->seqs) {
      Sequence& s = *seq;
      if (s.status != SeqStatus::running || s.n_computed != s.n_tokens() - 1 || !s.spec_tokens.empty()) continue;
      const int room = s.n_final() - s.n_tokens() - 1;  // the bonus token must still fit
      if (room < 1) continue;
      State::SpecStats& st = state_->spec_stats[s.id];
      if (st.k == 0 || !spec_.adaptive) st.k = spec_.num_speculative_tokens;
      const int k = std::min(st.k, room);
      cands.push_back({&s, rs.get(), k});
      priced.push_back({s.n_tokens(), k, st.alpha()});
    }
  }
  if (cands.empty()) return 0;
  const int n_cands = static_cast<int>(cands.size());
  SpecChoice choice = SpecChoice::drafts;
  if (spec_.adaptive && spec_.measured) {  // measured: the cost model is not read
    choice = state_->spec_meter.choose(n_cands);
  } else if (spec_.pricing && !price_speculation(*spec_.pricing, priced).speculate()) {
    choice = SpecChoice::plain;
  }
  if (choice == SpecChoice::plain) {
    out.spec_off = true;
    return n_cands;
  }
  if (choice == SpecChoice::probe) {  // the sequences whose draft has least to catch up
    out.spec_probe = true;
    const size_t n = size_t(state_->spec_meter.next_probe_size(n_cands));
    std::vector<std::pair<int, Candidate>> by_rows;
    for (const Candidate& c : cands) by_rows.push_back({proposer_->catch_up_rows(*c.seq), c});
    std::sort(by_rows.begin(), by_rows.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second.seq->id < b.second.seq->id;
    });
    cands.clear();
    for (size_t i = 0; i < n && i < by_rows.size(); ++i) cands.push_back(by_rows[i].second);
  }
  // Requests iterate in hash order; draft in sequence-id order so a batched proposer sees one.
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.seq->id < b.seq->id; });
  std::vector<DraftTask> tasks;
  for (Candidate& c : cands) {
    c.seq->spec_probs.clear();
    tasks.push_back({c.seq, c.k, &c.seq->spec_tokens, &c.seq->spec_probs});
  }
  const auto t0 = std::chrono::steady_clock::now();
  proposer_->propose_batch(tasks);
  out.spec_draft_s = proposer_->priced_seconds().value_or(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  out.spec_catch_up_s = std::min(proposer_->catch_up_excess_s(), out.spec_draft_s);
  const bool with_q = backend_->caps().draft_probs;
  const int vocab = backend_->config().vocab_size;
  for (const Candidate& c : cands) {
    Sequence& s = *c.seq;
    if (static_cast<int>(s.spec_tokens.size()) > c.k) s.spec_tokens.resize(size_t(c.k));
    if (c.rs->request.constraint) trim_to_constraint(s, *c.rs->request.constraint, state_->mask_scratch, vocab);
    if (!with_q || s.spec_probs.size() < s.spec_tokens.size() * size_t(vocab)) s.spec_probs.clear();
  }
  return n_cands;
}

}  // namespace servelab
