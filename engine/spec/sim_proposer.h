#pragma once
// SimProposer: speculative decoding on the sim backend, which runs no model. It drafts k tokens
// for every sequence the engine asks about (the sim backend decides which are accepted, at the
// rates SimBackend::set_acceptance was given), and prices the drafting the real proposer would do:
// - ngram: nothing (a prompt lookup is host work of microseconds; not priced);
// - self, draft_model: the steps a ModelProposer runs (model_proposer.h) — one catch-up step per
//   call in which each sequence computes the tokens its draft K/V lacks (its whole prompt the first
//   time, then the bonus token, and the last accepted draft when every draft was accepted), then
//   one one-row step per further draft position — each priced for the draft's ModelConfig on the
//   target's device (DraftPricer) and charged to the sim backend's next step.
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/backend/draft_pricer.h"
#include "engine/backend/sim_backend.h"
#include "engine/spec/proposer.h"
#include "engine/spec/spec_config.h"

namespace servelab {

class SimProposer final : public Proposer {
 public:
  /// `draft`: the draft model's config for self and draft_model (none for ngram). `target` must
  /// outlive the proposer (the engine owns both).
  SimProposer(SpecMethod method, SimBackend& target, std::optional<ModelConfig> draft);
  const char* name() const override { return to_string(method_); }
  void propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) override;
  void propose_batch(std::span<const DraftTask> tasks) override;
  void forget(uint64_t seq_id) override { copies_.erase(seq_id); }
  /// The predicted seconds of the last propose_batch (0 for ngram).
  std::optional<double> priced_seconds() const override { return last_s_; }
  /// The round's price less the same round with each catch-up capped at 2 rows.
  double catch_up_excess_s() const override { return excess_s_; }
  /// seq's tokens beyond the draft K/V positions still valid for it.
  int catch_up_rows(const Sequence& seq) const override {
    return pricer_ ? seq.n_tokens() - valid_positions(seq) : 0;
  }
  /// What prices the drafting (none for ngram).
  const DraftPricer* draft_pricer() const { return pricer_.get(); }

 private:
  /// What the draft model holds of a sequence after the last call: the sequence's tokens up to
  /// `base`, then `drafts`; K/V computed for the first base + drafts.size() - 1 positions.
  struct DraftCopy {
    int base = 0;
    std::vector<TokenId> drafts;
  };
  /// The draft's K/V positions still valid for `seq` (the copy's computed prefix that `seq` kept).
  int valid_positions(const Sequence& seq) const;

  SpecMethod method_;
  SimBackend& target_;
  std::unique_ptr<DraftPricer> pricer_;  // none for ngram
  std::unordered_map<uint64_t, DraftCopy> copies_;  // by sequence id
  double last_s_ = 0.0;
  double excess_s_ = 0.0;
};

/// The sim's proposer for `config` (its sim_acceptance set on `target`): self drafts with the
/// target's first num_layers layers, draft_model with the preset or folder config `model`.
/// Throws std::invalid_argument without config.sim_acceptance.
std::unique_ptr<Proposer> make_sim_proposer(const SpeculativeConfig& config, SimBackend& target);

}  // namespace servelab
