#include "engine/spec/sim_proposer.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <stdexcept>

#include "engine/splitmix64.h"

namespace servelab {

namespace sim_proposer_detail {

/// Adds one sequence of a step to `shape`: `rows` positions ending at context `end`, each drawn.
void add_rows(StepShape& shape, int rows, int end) {
  shape.n_tokens += rows;
  shape.n_sampled += 1;  // the draft draws after its last row only
  shape.n_seqs += 1;
  shape.sum_context += end;
  shape.max_context = std::max<int64_t>(shape.max_context, end);
  double pairs = 0.0;
  for (int r = 0; r < rows; ++r) pairs += end - rows + r + 1;
  shape.attention_pairs += pairs;
  if (rows > 1) shape.prefill_pairs += pairs;
  else shape.decode_context += end;
}

}  // namespace sim_proposer_detail

SimProposer::SimProposer(SpecMethod method, SimBackend& target, std::optional<ModelConfig> draft)
    : method_(method), target_(target) {
  if (method != SpecMethod::ngram) {
    if (!draft) throw std::invalid_argument(std::string("SimProposer: method ") + to_string(method) + " needs the draft's config");
    pricer_ = std::make_unique<DraftPricer>(target.cost(), target.config(), *draft);
  }
}

void SimProposer::propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) {
  const DraftTask task{&seq, max_k, &draft, nullptr};
  propose_batch(std::span<const DraftTask>(&task, 1));
}

int SimProposer::valid_positions(const Sequence& seq) const {
  const auto it = copies_.find(seq.id);
  if (it == copies_.end()) return 0;
  const DraftCopy& c = it->second;
  int kept = 0;  // leading drafts the sequence kept
  while (size_t(kept) < c.drafts.size() && c.base + kept < seq.n_tokens() &&
         seq.tokens[size_t(c.base + kept)] == c.drafts[size_t(kept)])
    ++kept;
  const int computed = c.base + std::max(0, static_cast<int>(c.drafts.size()) - 1);
  return std::min({computed, c.base + kept, seq.n_tokens()});
}

void SimProposer::propose_batch(std::span<const DraftTask> tasks) {
  const ModelConfig& model = target_.config();
  const int64_t span = std::max(1, model.vocab_size - 2);
  int k_max = 0;
  StepShape catch_up, steady;  // steady: each catch-up capped at a steady round's 2 rows
  int64_t prompt_rows = 0;  // rows of sequences catching up more than a steady round's 2 (their prompt)
  for (const DraftTask& t : tasks) {
    if (t.max_k < 1 || t.seq->n_tokens() < 1) continue;
    const Sequence& s = *t.seq;
    if (pricer_) {
      const int rows = s.n_tokens() - valid_positions(s);
      sim_proposer_detail::add_rows(catch_up, rows, s.n_tokens());
      sim_proposer_detail::add_rows(steady, std::min(rows, 2), s.n_tokens());
      if (rows > 2) prompt_rows += rows;
    }
    DraftCopy& c = copies_[s.id];
    c.base = s.n_tokens();
    c.drafts.clear();
    for (int j = 0; j < t.max_k; ++j) {  // any tokens: the sim backend decides what is accepted
      const uint64_t h = splitmix64(splitmix64(s.id) + static_cast<uint64_t>(s.n_tokens() + j));
      TokenId x = static_cast<TokenId>(2 + static_cast<int64_t>(h % uint64_t(span)));
      if (x == model.eos_token) x = static_cast<TokenId>(2 + (x - 2 + 1) % span);
      c.drafts.push_back(x);
      t.tokens->push_back(x);
    }
    k_max = std::max(k_max, t.max_k);
  }
  last_s_ = 0.0;
  excess_s_ = 0.0;
  if (!pricer_ || k_max == 0) return;
  std::vector<StepShape> steps{catch_up};
  for (int j = 1; j < k_max; ++j) {  // one-row steps for the tasks that want a (j + 1)-th draft
    StepShape step;
    for (const DraftTask& t : tasks)
      if (t.max_k > j && t.seq->n_tokens() >= 1) sim_proposer_detail::add_rows(step, 1, t.seq->n_tokens() + j);
    steps.push_back(step);
  }
  // The forward steps, plus the proposer's own work where the profile timed whole rounds.
  last_s_ = pricer_->round_seconds(steps, prompt_rows);
  target_.charge_seconds(last_s_);
  if (prompt_rows > 0) {
    steps.front() = steady;
    excess_s_ = std::max(0.0, last_s_ - pricer_->round_seconds(steps, 0));
  }
}

std::unique_ptr<Proposer> make_sim_proposer(const SpeculativeConfig& config, SimBackend& target) {
  config.validate();
  if (!config.sim_acceptance)
    throw std::invalid_argument(std::string("speculative method ") + to_string(config.method) +
                                " on backend sim needs sim_acceptance (the rates at which drafts are accepted)");
  target.set_acceptance(config.sim_acceptance->per_position, config.sim_acceptance->request_scale);
  std::optional<ModelConfig> draft;
  if (config.method == SpecMethod::self) {
    if (config.num_layers >= target.config().n_layers)
      throw std::invalid_argument("speculative.num_layers must be below the target's " +
                                  std::to_string(target.config().n_layers) + " layers (got " +
                                  std::to_string(config.num_layers) + ")");
    draft = target.config();
    draft->n_layers = config.num_layers;
  } else if (config.method == SpecMethod::draft_model) {
    draft = resolve_model_config(config.model);
  }
  // Say when a profile leaves the sim to approximate (the validation measured what each costs).
  const SimCostModel& cost = target.cost();
  if (cost.kind == SimCostModel::Kind::profile && cost.profiled && !cost.profiled->has_verification())
    std::cerr << "sim: " << cost.source << " has no verification points: a verifying sequence is priced as a "
              << "prefill chunk (profile with --verify-k " << config.num_speculative_tokens << ")\n";
  if (const std::vector<double>& s = config.sim_acceptance->request_scale; !s.empty()) {
    double mean = 0.0, ss = 0.0;
    for (double v : s) mean += v;
    mean /= static_cast<double>(s.size());
    for (double v : s) ss += (v - mean) * (v - mean);
    std::cerr << "sim: requests differ in acceptance: each draws one of " << s.size()
              << " measured rejection scales (mean " << mean << ", sd "
              << (s.size() > 1 ? std::sqrt(ss / static_cast<double>(s.size() - 1)) : 0.0) << ")\n";
  }
  auto proposer = std::make_unique<SimProposer>(config.method, target, std::move(draft));
  if (proposer->draft_pricer() && cost.kind == SimCostModel::Kind::profile && !proposer->draft_pricer()->draft_profiled())
    std::cerr << "sim: " << cost.source << " holds no profile of the draft " << proposer->draft_pricer()->draft().name
              << " (n_layers " << proposer->draft_pricer()->draft().n_layers << "): its steps are the target's "
              << "profiled price times the roofline's draft / target ratio (profile with --draft-layers or "
              << "--draft-preset)\n";
  else if (proposer->draft_pricer() && proposer->draft_pricer()->draft_profiled() && !proposer->draft_pricer()->rounds_profiled())
    std::cerr << "sim: " << cost.source << " holds no timed proposer rounds of the draft: drafting is priced as its "
              << "forward steps alone, without the proposer's own work (profile it again with --draft-layers or "
              << "--draft-preset)\n";
  return proposer;
}

}  // namespace servelab
