// ProfiledStepModel::fit: the weighted least-squares fit of a profile's step samples (M, P and
// the scalar terms jointly; then G, the eager row function and c_mixed, and V, each to what the
// rest leaves).
#include <algorithm>
#include <map>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/backend/cost_model.h"
#include "engine/backend/cost_model_knots.h"
#include "engine/backend/least_squares.h"

namespace servelab {

using profiled::knot_weights;
using profiled::mixed_step;

namespace {

constexpr int kScalarCols = 3;  // sampled, prefill pairs, decode context

/// Whether column `c` of W·A lies in the span of the other active columns (relative residual of
/// its weighted least-squares fit on them below 1e-6): the samples cannot tell its coefficient
/// from a shift of theirs.
bool spanned_by_others(const std::vector<std::vector<double>>& a, const std::vector<double>& w,
                       const std::vector<bool>& active, size_t c) {
  std::vector<double> y(a.size());
  double norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    y[i] = a[i][c];
    norm += (y[i] * w[i]) * (y[i] * w[i]);
  }
  if (!(norm > 0)) return true;  // nothing samples: nothing to split
  std::vector<bool> others = active;
  others[c] = false;
  const std::vector<double> x = weighted_least_squares(a, y, w, others);
  double residual = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    double fit = 0.0;
    for (size_t j = 0; j < x.size(); ++j) fit += a[i][j] * x[j];
    residual += ((y[i] - fit) * w[i]) * ((y[i] - fit) * w[i]);
  }
  return residual <= 1e-12 * norm;
}

}  // namespace

ProfiledStepModel ProfiledStepModel::fit(std::span<const TimedStep> samples, std::span<const int> graph_buckets) {
  if (samples.empty()) throw std::invalid_argument("a profile needs at least one step sample");
  // a_spread, then V and a_verify, are fitted after the rest, to what it leaves.
  std::vector<TimedStep> base, verify, spread;
  for (const TimedStep& t : samples)
    (t.shape.verify_rows > 0 ? verify : t.shape.decode_spread() > 0 ? spread : base).push_back(t);
  if (!verify.empty() || !spread.empty()) {
    if (base.empty())
      throw std::invalid_argument("a profile needs at least one step that verifies no drafts and whose sequences "
                                  "share one context or are not all decodes");
    ProfiledStepModel m = fit(base, graph_buckets);
    if (!spread.empty()) m.fit_spread(spread);
    if (!verify.empty()) m.fit_verification(verify);
    return m;
  }
  ProfiledStepModel m;
  m.buckets_.assign(graph_buckets.begin(), graph_buckets.end());
  std::sort(m.buckets_.begin(), m.buckets_.end());
  if (!m.buckets_.empty() && m.buckets_.front() < 1) throw std::invalid_argument("graph buckets must be >= 1");
  auto sorted_unique = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  for (size_t i = 0; i < samples.size(); ++i) {
    const TimedStep& t = samples[i];
    if (!(t.step_s > 0) || !std::isfinite(t.step_s) || t.shape.n_rows() < 1)
      throw std::invalid_argument("step sample " + std::to_string(i) + " needs rows >= 1 and step_s > 0");
    (t.shape.padded_decode() ? m.pad_knots_ : m.knots_).push_back(static_cast<double>(t.shape.n_rows()));
    m.max_sampled_ = std::max(m.max_sampled_, t.shape.n_sampled);
    m.max_sum_context_ = std::max(m.max_sum_context_, t.shape.sum_context);
    m.max_context_ = std::max(m.max_context_, t.shape.max_context);
    m.max_prefill_pairs_ = std::max(m.max_prefill_pairs_, t.shape.prefill_pairs);
    m.max_decode_context_ = std::max(m.max_decode_context_, t.shape.decode_context);
    m.min_step_s_ = i == 0 ? t.step_s : std::min(m.min_step_s_, t.step_s);
  }
  if (m.knots_.empty())
    throw std::invalid_argument("a profile needs at least one step without padding rows (all " +
                                std::to_string(samples.size()) + " samples are padded decodes)");
  sorted_unique(m.knots_);
  sorted_unique(m.pad_knots_);
  // Columns: M's knots, P's knots, then the scalar terms.
  const size_t n_knots = m.knots_.size(), n_pad = m.pad_knots_.size(), first_scalar = n_knots + n_pad;
  const size_t n_cols = first_scalar + kScalarCols;

  std::vector<std::vector<double>> a(samples.size(), std::vector<double>(n_cols, 0.0));
  std::vector<double> b(samples.size()), w(samples.size());
  for (size_t r = 0; r < samples.size(); ++r) {
    const StepShape& s = samples[r].shape;
    const bool padded = s.padded_decode();
    const std::vector<double>& knots = padded ? m.pad_knots_ : m.knots_;
    const size_t offset = padded ? n_knots : 0;
    size_t i = 0;
    double u = 0.0;
    knot_weights(knots, static_cast<double>(s.n_rows()), i, u);
    a[r][offset + i] += 1.0 - u;
    if (knots.size() > 1) a[r][offset + i + 1] += u;
    a[r][first_scalar + 0] = static_cast<double>(s.n_sampled);
    a[r][first_scalar + 1] = s.prefill_pairs;
    a[r][first_scalar + 2] = s.decode_context;
    b[r] = samples[r].step_s;
    w[r] = 1.0 / samples[r].step_s;
  }
  std::vector<bool> active(n_cols, true);
  // The sampled term only where the samples tell it apart from M. Where every sample sits on a knot
  // whose other samples sample as many rows (decodes, rows = sampled rows, on knots no eager step
  // measured; each eager step on a knot of its own), n_sampled is a combination of M's columns:
  // any split between the two fits equally well, and the solver's least-norm one put a decode's
  // cost into the sampled term and drove M below 0 on those knots, so a prefill chunk of their
  // rows (one sampled row) was priced near 0. Then it is pinned to 0 and M carries the cost.
  if (spanned_by_others(a, w, active, first_scalar)) active[first_scalar] = false;
  // Active set: a scalar coefficient the fit drives negative (noise) is pinned to 0 and refitted.
  std::vector<double> x;
  for (int round = 0; round <= kScalarCols; ++round) {
    x = weighted_least_squares(a, b, w, active);
    size_t worst = n_cols;
    for (size_t c = first_scalar; c < n_cols; ++c)
      if (active[c] && x[c] < 0 && (worst == n_cols || x[c] < x[worst])) worst = c;
    if (worst == n_cols) break;
    active[worst] = false;
  }
  m.knot_s_.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n_knots));
  m.pad_knot_s_.assign(x.begin() + static_cast<std::ptrdiff_t>(n_knots), x.begin() + static_cast<std::ptrdiff_t>(first_scalar));
  m.s_per_sampled_ = x[first_scalar + 0];
  m.s_per_prefill_pair_ = x[first_scalar + 1];
  m.s_per_decode_context_ = x[first_scalar + 2];
  m.fit_graphs(samples);
  if (!m.graph_knots_.empty()) m.fit_eager(samples);
  return m;
}


void ProfiledStepModel::fit_eager(std::span<const TimedStep> samples) {
  std::vector<const TimedStep*> eager;
  std::vector<double> rows_pure, rows_mixed;
  for (const TimedStep& t : samples) {
    if (graphable(t.shape) || t.shape.padded_decode()) continue;
    eager.push_back(&t);
    (mixed_step(t.shape) ? rows_mixed : rows_pure).push_back(static_cast<double>(t.shape.n_rows()));
  }
  if (eager.empty()) return;
  if (rows_pure.empty()) rows_pure = rows_mixed;  // only mixed eager steps: they set the knots
  const auto [lo, hi] = std::minmax_element(rows_pure.begin(), rows_pure.end());
  const double first = *lo, last = *hi;
  std::vector<double> knots = rows_pure;
  for (double r : rows_mixed)
    if (r < first || r > last) knots.push_back(r);  // a mixed step past the pure ones: its own knot
  std::sort(knots.begin(), knots.end());
  knots.erase(std::unique(knots.begin(), knots.end()), knots.end());
  // Columns: the eager knots, then c_mixed and b_mixed (seconds a row of a mixed step); targets:
  // what the joint fit's scalars leave.
  const size_t n_knots = knots.size(), n_cols = n_knots + 2;
  std::vector<std::vector<double>> a(eager.size(), std::vector<double>(n_cols, 0.0));
  std::vector<double> b(eager.size()), w(eager.size());
  for (size_t r = 0; r < eager.size(); ++r) {
    const StepShape& s = eager[r]->shape;
    size_t i = 0;
    double u = 0.0;
    knot_weights(knots, static_cast<double>(s.n_rows()), i, u);
    a[r][i] += 1.0 - u;
    if (n_knots > 1) a[r][i + 1] += u;
    a[r][n_knots] = mixed_step(s) ? 1.0 : 0.0;
    a[r][n_knots + 1] = mixed_step(s) ? static_cast<double>(s.n_rows()) : 0.0;
    b[r] = eager[r]->step_s - s_per_sampled_ * static_cast<double>(s.n_sampled) - s_per_prefill_pair_ * s.prefill_pairs -
           s_per_decode_context_ * s.decode_context;
    w[r] = 1.0 / eager[r]->step_s;
  }
  std::vector<bool> active(n_cols, true);
  // b_mixed only where the mixed steps' rows tell it from c_mixed and the knots (mixed steps of
  // two or more row counts within the pure steps' range); c_mixed only off the mixed steps' own knots.
  if (spanned_by_others(a, w, active, n_knots + 1)) active[n_knots + 1] = false;
  if (spanned_by_others(a, w, active, n_knots)) active[n_knots] = false;
  std::vector<double> x = weighted_least_squares(a, b, w, active);
  for (int round = 0; round < 2; ++round) {  // noise: a mixed step does not cost less than its parts
    const size_t c = x[n_knots + 1] < 0 && active[n_knots + 1] ? n_knots + 1 : x[n_knots] < 0 && active[n_knots] ? n_knots : n_cols;
    if (c == n_cols) break;
    active[c] = false;
    x = weighted_least_squares(a, b, w, active);
  }
  // The joint fit's knots outside the eager range (graphed decodes' rows) keep their values, those
  // below it at least the eager row function extended down from its first two knots: an eager
  // step of fewer rows than the grid's eager steps still launches every kernel a CUDA graph would
  // replay (llama3-8b on an H200: a prompt's last chunk of 1-63 rows beside decodes took 7.9-9.9
  // ms, priced 21-27% low from the graphed decodes' knots; results/sim-validation/mixed-2026-11-30/).
  const double slope = n_knots > 1 ? std::max(0.0, (x[1] - x[0]) / (knots[1] - knots[0])) : 0.0;
  std::vector<std::pair<double, double>> merged;
  for (size_t k = 0; k < knots_.size(); ++k)
    if (knots_[k] < knots.front())
      merged.push_back({knots_[k], std::max(knot_s_[k], x[0] - slope * (knots.front() - knots_[k]))});
    else if (knots_[k] > knots.back())
      merged.push_back({knots_[k], knot_s_[k]});
  for (size_t k = 0; k < n_knots; ++k) merged.push_back({knots[k], x[k]});
  std::sort(merged.begin(), merged.end());
  knots_.clear();
  knot_s_.clear();
  for (const auto& [k, v] : merged) {
    knots_.push_back(k);
    knot_s_.push_back(v);
  }
  mixed_step_s_ = active[n_knots] ? x[n_knots] : 0.0;
  mixed_row_s_ = active[n_knots + 1] ? x[n_knots + 1] : 0.0;
}

void ProfiledStepModel::fit_graphs(std::span<const TimedStep> samples) {
  // Every graphed sample lies on its bucket's knot: G there is the mean, weighted by 1 / step_s^2
  // as the fit above weighs relative error, of what the attention term leaves of its time.
  std::vector<double> sum, weight;
  for (const TimedStep& t : samples) {
    if (!graphable(t.shape)) continue;
    const double g = static_cast<double>(bucket_rows(t.shape.n_seqs));
    auto it = std::lower_bound(graph_knots_.begin(), graph_knots_.end(), g);
    const size_t i = static_cast<size_t>(it - graph_knots_.begin());
    if (it == graph_knots_.end() || *it != g) {
      graph_knots_.insert(it, g);
      sum.insert(sum.begin() + static_cast<std::ptrdiff_t>(i), 0.0);
      weight.insert(weight.begin() + static_cast<std::ptrdiff_t>(i), 0.0);
    }
    const double w = 1.0 / (t.step_s * t.step_s);
    sum[i] += w * (t.step_s - s_per_prefill_pair_ * t.shape.prefill_pairs - s_per_decode_context_ * t.shape.decode_context);
    weight[i] += w;
  }
  graph_knot_s_.resize(graph_knots_.size());
  for (size_t i = 0; i < graph_knots_.size(); ++i) graph_knot_s_[i] = std::max(0.0, sum[i] / weight[i]);
}

void ProfiledStepModel::fit_spread(std::span<const TimedStep> samples) {
  // Per bucket, one coefficient weighted like the rest by relative error: Σ w x r / Σ w x²,
  // w = 1 / step_s², over the samples priced as graphed decodes (eager decodes past the buckets
  // keep M's price), clamped at 0 unless the bucket holds served samples (a calibration run's:
  // serving's mix of lengths may cost less than the grid's equal contexts, and must be able to say so).
  for (const TimedStep& t : samples) {
    if (!(t.step_s > 0) || !std::isfinite(t.step_s))
      throw std::invalid_argument("spread decode sample needs step_s > 0");
    max_sum_context_ = std::max(max_sum_context_, t.shape.sum_context);
    max_context_ = std::max(max_context_, t.shape.max_context);
    max_decode_context_ = std::max(max_decode_context_, t.shape.decode_context);
    max_sampled_ = std::max(max_sampled_, t.shape.n_sampled);
  }
  // A bucket's served samples count only when there are enough of them for one coefficient
  // (kMinServedSpreadSamples): a calibration run that reached a bucket in a couple of steps would
  // otherwise set that bucket's price for every serving step in it (two steps of 161-192
  // sequences once priced 908 such steps of a later run 16% high, where the grid alone was -3.6%).
  // Without them the bucket keeps the grid's spread samples or none (its neighbours' knots).
  std::map<double, int> n_served;  // bucket rows -> served samples
  for (const TimedStep& t : samples) {
    const StepShape s = clamp(t.shape);
    if (t.served && graphed(s) && s.decode_spread() > 0) ++n_served[static_cast<double>(bucket_rows(s.n_seqs))];
  }
  std::map<double, std::pair<double, double>> by_bucket;  // bucket rows -> (Σ w x r, Σ w x²)
  std::map<double, bool> served;                          // bucket rows -> served samples used
  for (const TimedStep& t : samples) {
    const StepShape s = clamp(t.shape);
    const double x = s.decode_spread();
    if (!graphed(s) || !(x > 0)) continue;
    const double w = 1.0 / (t.step_s * t.step_s);
    const double bucket = static_cast<double>(bucket_rows(s.n_seqs));
    if (t.served && n_served[bucket] < kMinServedSpreadSamples) continue;
    served[bucket] = served[bucket] || t.served;
    auto& [num, den] = by_bucket[bucket];
    num += w * x * (t.step_s - predict_base(s));
    den += w * x * x;
  }
  for (const auto& [rows, nd] : by_bucket) {
    spread_knots_.push_back(rows);
    spread_knot_a_.push_back(served[rows] ? nd.first / nd.second : std::max(0.0, nd.first / nd.second));
  }
}

void ProfiledStepModel::fit_verification(std::span<const TimedStep> samples) {
  for (size_t i = 0; i < samples.size(); ++i) {
    const TimedStep& t = samples[i];
    if (!(t.step_s > 0) || !std::isfinite(t.step_s) || t.shape.verify_rows > t.shape.n_tokens)
      throw std::invalid_argument("verification sample " + std::to_string(i) + " needs step_s > 0 and verify_rows <= n_tokens");
    verify_knots_.push_back(static_cast<double>(t.shape.verify_rows));
    max_sampled_ = std::max(max_sampled_, t.shape.n_sampled);
    max_sum_context_ = std::max(max_sum_context_, t.shape.sum_context);
    max_context_ = std::max(max_context_, t.shape.max_context);
    max_verify_rows_ = std::max(max_verify_rows_, t.shape.verify_rows);
    max_verify_pairs_ = std::max(max_verify_pairs_, t.shape.verify_pairs);
  }
  std::sort(verify_knots_.begin(), verify_knots_.end());
  verify_knots_.erase(std::unique(verify_knots_.begin(), verify_knots_.end()), verify_knots_.end());
  // Columns: V's knots (hat functions over 0, knots...; V(0) = 0), then a_verify.
  const size_t n_knots = verify_knots_.size(), n_cols = n_knots + 1;
  std::vector<std::vector<double>> a(samples.size(), std::vector<double>(n_cols, 0.0));
  std::vector<double> b(samples.size()), w(samples.size());
  for (size_t r = 0; r < samples.size(); ++r) {
    const StepShape& s = samples[r].shape;
    const double rows = static_cast<double>(s.verify_rows);
    if (rows <= verify_knots_.front()) {
      a[r][0] = rows / verify_knots_.front();
    } else {
      size_t i = 0;
      double u = 0.0;
      knot_weights(verify_knots_, rows, i, u);
      a[r][i] += 1.0 - u;
      if (n_knots > 1) a[r][i + 1] += u;
    }
    a[r][n_knots] = s.verify_pairs;
    b[r] = samples[r].step_s - predict_base(clamp(s));  // what the other terms leave
    w[r] = 1.0 / samples[r].step_s;
  }
  std::vector<bool> active(n_cols, true);
  std::vector<double> x = weighted_least_squares(a, b, w, active);
  if (x[n_knots] < 0) {  // noise: a verification step does not get cheaper with context
    active[n_knots] = false;
    x = weighted_least_squares(a, b, w, active);
  }
  verify_knot_s_.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n_knots));
  s_per_verify_pair_ = x[n_knots];
}

}  // namespace servelab
