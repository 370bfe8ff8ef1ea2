#include "engine/backend/draft_pricer.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace servelab {

DraftPricer::DraftPricer(const SimCostModel& cost, const ModelConfig& target, const ModelConfig& draft)
    : cost_(cost),
      target_((target.validate(), target)),
      draft_((draft.validate(), draft)),
      target_pricer_(cost_, target_),
      target_terms_(RooflineTerms::of(target_, cost_.device, cost_.tensor_parallel, cost_.formats)),
      draft_terms_(RooflineTerms::of(draft_, cost_.device, 1, {})) {
  if (cost_.kind != SimCostModel::Kind::profile) return;
  const std::string hash = model_shape_hash(draft_);
  for (const SimCostModel::DraftProfile& d : cost_.draft_profiles) {
    if (d.shape_hash != hash) continue;
    SimCostModel own;  // the draft's profile on the target's device, one GPU, its native formats
    own.kind = SimCostModel::Kind::profile;
    own.device = cost_.device;
    own.profiled = d.profiled;
    own.scale = cost_.scale;
    own.source = cost_.source + " (draft " + d.name + ")";
    draft_cost_ = std::move(own);
    draft_pricer_.emplace(*draft_cost_, draft_);
    fit_rounds(d.rounds);
    return;
  }
}

double DraftPricer::seconds(const StepShape& shape) const {
  if (cost_.kind == SimCostModel::Kind::roofline || !cost_.profiled)
    return cost_.scale * roofline_seconds(draft_terms_, shape);
  if (draft_pricer_) return draft_pricer_->seconds(shape);
  // The target's profile at this shape, scaled to the draft by the roofline.
  return target_pricer_.seconds(shape) * roofline_seconds(draft_terms_, shape) / roofline_seconds(target_terms_, shape);
}

std::vector<StepShape> draft_round_shapes(int n_seqs, int k, int context, int rows) {
  std::vector<StepShape> steps;
  for (int j = 0; j < k; ++j) {
    StepShape s;
    const int r = j == 0 ? rows : 1, end = context + j;
    for (int q = 0; q < n_seqs; ++q) {
      s.n_tokens += r;
      s.n_sampled += 1;
      s.n_seqs += 1;
      s.sum_context += end;
      s.max_context = std::max<int64_t>(s.max_context, end);
      double pairs = 0.0;
      for (int i = 0; i < r; ++i) pairs += end - r + i + 1;
      s.attention_pairs += pairs;
      if (r > 1) s.prefill_pairs += pairs;
      else s.decode_context += end;
    }
    steps.push_back(s);
  }
  return steps;
}

namespace draft_pricer_detail {

/// Piecewise linear through (0, 0) and `knots` (ascending x); beyond the last, proportional to x.
double knot_value(const std::vector<std::pair<double, double>>& knots, double x) {
  if (knots.empty() || x <= 0) return 0.0;
  double x0 = 0.0, y0 = 0.0;
  for (const auto& [x1, y1] : knots) {
    // std::lerp is exact at the knots and stays between them: the plain formula could round
    // (-y0 * dx) / dx to just past -y0 and return -1e-20 for a knot at 0.
    if (x <= x1) return std::lerp(y0, y1, (x - x0) / (x1 - x0));
    x0 = x1;
    y0 = y1;
  }
  return y0 * x / x0;
}

}  // namespace draft_pricer_detail

void DraftPricer::fit_rounds(const std::vector<DraftRound>& rounds) {
  auto forward = [&](const DraftRound& r) {
    double s = 0.0;
    for (const StepShape& step : draft_round_shapes(r.n_seqs, r.k, r.context, r.catchup_rows)) s += seconds(step);
    return s / cost_.scale;  // the work is measured against the unscaled forward; round_seconds scales it
  };
  // Steady rounds: the measured round over its priced forward steps, per draft step, averaged
  // over the k profiled at each batch.
  std::map<int, std::pair<double, int>> per_step;  // n_seqs -> (sum, count)
  for (const DraftRound& r : rounds) {
    if (r.catchup_rows > 2) continue;
    auto& [sum, n] = per_step[r.n_seqs];
    sum += (r.round_s - forward(r)) / r.k;
    ++n;
  }
  // The proposer's work is never negative: a round measured below its priced forward steps (the
  // CPU engine's rounds, timed back to back with warm caches, against grid points timed in
  // shuffled rounds) adds nothing rather than taking time away.
  for (const auto& [b, v] : per_step) step_work_.push_back({double(b), std::max(0.0, v.first / v.second)});
  // First rounds: what is left over the forward and the steady work, per caught-up prompt row.
  std::map<int64_t, std::pair<double, int>> per_prompt;  // prompt rows -> (sum, count)
  for (const DraftRound& r : rounds) {
    if (r.catchup_rows <= 2) continue;
    const int64_t rows = int64_t(r.n_seqs) * r.catchup_rows;
    auto& [sum, n] = per_prompt[rows];
    sum += r.round_s - forward(r) - r.k * step_work_s(r.n_seqs);
    ++n;
  }
  for (const auto& [rows, v] : per_prompt) prompt_work_.push_back({double(rows), std::max(0.0, v.first / v.second)});
}

double DraftPricer::step_work_s(int64_t n_seqs) const {
  return draft_pricer_detail::knot_value(step_work_, double(n_seqs));
}

double DraftPricer::prompt_work_s(int64_t prompt_rows) const {
  return draft_pricer_detail::knot_value(prompt_work_, double(prompt_rows));
}

double DraftPricer::round_seconds(std::span<const StepShape> steps, int64_t prompt_rows) const {
  double forward = 0.0, work = 0.0;
  for (const StepShape& s : steps) {
    forward += seconds(s);
    work += step_work_s(s.n_seqs);
  }
  work += prompt_work_s(prompt_rows);
  // Measured work may come out below the priced forward at some knot (noise): never below 0 in all.
  return std::max(0.0, forward + cost_.scale * work);
}

}  // namespace servelab
