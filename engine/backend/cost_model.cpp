#include "engine/backend/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "engine/model/quantize_weights.h"

namespace servelab {

namespace {

/// Parameters every row multiplies through: all layers plus the final norm, not the embedding
/// table (a lookup) nor the LM head (only sampled rows use it).
double layer_params(const ModelConfig& m) {
  double p = static_cast<double>(m.n_params()) - static_cast<double>(m.vocab_size) * m.hidden_size;
  if (!m.tie_embeddings) p -= static_cast<double>(m.vocab_size) * m.hidden_size;
  return p;
}

/// Solves min ‖W(Ax − b)‖ over the columns in `active` by the normal equations (columns scaled
/// to unit max, a 1e-12 ridge so columns the samples cannot tell apart get the least-norm split).
std::vector<double> weighted_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                                           const std::vector<double>& w, const std::vector<bool>& active) {
  const size_t n_cols = active.size();
  std::vector<size_t> cols;
  for (size_t c = 0; c < n_cols; ++c)
    if (active[c]) cols.push_back(c);
  const size_t k = cols.size();
  std::vector<double> scale(k, 0.0);
  for (size_t j = 0; j < k; ++j)
    for (size_t i = 0; i < a.size(); ++i) scale[j] = std::max(scale[j], std::abs(a[i][cols[j]] * w[i]));
  for (double& s : scale) s = s > 0 ? s : 1.0;
  std::vector<std::vector<double>> m(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t p = 0; p < k; ++p) {
      const double xp = a[i][cols[p]] * w[i] / scale[p];
      if (xp == 0.0) continue;
      for (size_t q = 0; q < k; ++q) m[p][q] += xp * a[i][cols[q]] * w[i] / scale[q];
      m[p][k] += xp * b[i] * w[i];
    }
  }
  for (size_t p = 0; p < k; ++p) m[p][p] += 1e-12;
  for (size_t c = 0; c < k; ++c) {  // Gaussian elimination, partial pivoting
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
    std::swap(m[c], m[piv]);
    for (size_t r = 0; r < k; ++r) {
      if (r == c || m[r][c] == 0.0) continue;
      const double f = m[r][c] / m[c][c];
      for (size_t j = c; j <= k; ++j) m[r][j] -= f * m[c][j];
    }
  }
  std::vector<double> x(n_cols, 0.0);
  for (size_t j = 0; j < k; ++j) x[cols[j]] = m[j][k] / m[j][j] / scale[j];
  return x;
}

/// Hat-function weights of `rows` over the knots: (index, weight) pairs, rows clamped to the ends.
void knot_weights(const std::vector<double>& knots, double rows, size_t& i, double& u) {
  if (rows <= knots.front() || knots.size() == 1) {
    i = 0;
    u = 0.0;
    return;
  }
  if (rows >= knots.back()) {
    i = knots.size() - 2;
    u = 1.0;
    return;
  }
  i = static_cast<size_t>(std::upper_bound(knots.begin(), knots.end(), rows) - knots.begin()) - 1;
  u = (rows - knots[i]) / (knots[i + 1] - knots[i]);
}

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

const char* to_string(CostSource s) {
  switch (s) {
    case CostSource::profile: return "profile";
    case CostSource::profile_roofline: return "profile+roofline";
    case CostSource::roofline: return "roofline";
  }
  return "?";
}

void CostCounts::add(CostSource s) {
  switch (s) {
    case CostSource::profile: ++profile; break;
    case CostSource::profile_roofline: ++profile_roofline; break;
    case CostSource::roofline: ++roofline; break;
  }
}

StepShape StepShape::of(const Step& step) {
  const kernels::StepInput& in = step.in;
  StepShape s;
  int draw = 0;  // draws follow entry order: those of entry q are next when q comes up
  const int n_draws = in.n_samples();
  const bool drafts = in.draft_token.size() >= size_t(n_draws);
  int q = 0;
  if (in.decode_only) {
    // Every sequence one row (a decode): no verification (it needs > 1 row), and the draws' rows
    // are counted in one walk of their own. The same sums in the same order as the walk below.
    for (; q < in.n_seqs() && in.query_start[q + 1] - in.query_start[q] == 1; ++q) {
      const int64_t end = in.context_lens[q], begin = end - 1;
      const double pairs = static_cast<double>(begin) + 1.0;  // n·begin + n(n + 1)/2 at n = 1
      s.n_tokens += 1;
      s.sum_context += end;
      s.attention_pairs += pairs;
      if (begin > 0) s.decode_context += static_cast<double>(end);
      else s.prefill_pairs += pairs;
      s.max_context = std::max(s.max_context, end);
    }
    if (q == in.n_seqs()) {
      for (; draw < n_draws; ++draw) s.n_sampled += draw == 0 || in.sample_rows[draw] != in.sample_rows[draw - 1];
    } else {  // not one row each after all: the draws of the sequences done, as the walk below takes them
      for (int k = 0; k < q; ++k)
        for (; draw < n_draws && in.sample_rows[draw] < in.query_start[k + 1]; ++draw)
          s.n_sampled += draw == 0 || in.sample_rows[draw] != in.sample_rows[draw - 1];
    }
  }
  for (; q < in.n_seqs(); ++q) {
    bool verifying = false;  // an entry verifies drafts when a draw of its rows carries a draft token
    // Rows through the LM head are counted here too: distinct drawn rows (n parallel samples
    // share theirs), in the one walk over the draws.
    for (; draw < n_draws && in.sample_rows[draw] < in.query_start[q + 1]; ++draw) {
      verifying |= drafts ? in.draft_token[draw] >= 0 : size_t(draw) < in.draft_token.size() && in.draft_token[draw] >= 0;
      s.n_sampled += draw == 0 || in.sample_rows[draw] != in.sample_rows[draw - 1];
    }
    const int64_t n = in.query_start[q + 1] - in.query_start[q], end = in.context_lens[q], begin = end - n;
    s.n_tokens += n;
    s.sum_context += end;
    // positions begin..end-1 attend to begin+1 .. end keys
    const double pairs = static_cast<double>(n) * static_cast<double>(begin) + 0.5 * n * (n + 1.0);
    s.attention_pairs += pairs;
    if (n == 1 && begin > 0) s.decode_context += static_cast<double>(end);
    else s.prefill_pairs += pairs;
    if (n > 1 && verifying) {
      s.verify_rows += n;
      s.verify_pairs += pairs;
    }
    s.max_context = std::max(s.max_context, end);
  }
  // Draws past the last sequence's rows (a malformed step) are rows through the LM head too.
  for (; draw < n_draws; ++draw) s.n_sampled += draw == 0 || in.sample_rows[draw] != in.sample_rows[draw - 1];
  s.n_seqs = in.n_seqs();
  s.n_padding_tokens = step.n_padding;
  s.attention_pairs += static_cast<double>(step.n_padding) * static_cast<double>(s.max_context);
  return s;
}

RooflineTerms RooflineTerms::of(const ModelConfig& model, const SimDevice& device, int tensor_parallel,
                                const StorageFormats& formats) {
  RooflineTerms t;
  t.model = &model;
  t.device = &device;
  t.tensor_parallel = tensor_parallel;
  t.formats = formats;
  t.n_layer_params = layer_params(model);
  t.n_linear_params = static_cast<double>(linear_weight_bytes(model, QuantScheme{})) / 2.0;
  t.linear_bytes = formats.quant.quantized() ? static_cast<double>(linear_weight_bytes(model, formats.quant))
                                             : t.n_linear_params * device.weight_dtype_bytes;
  return t;
}

double roofline_seconds(const ModelConfig& model, const SimDevice& device, int tensor_parallel,
                        const StepShape& s, const StorageFormats& formats) {
  return roofline_seconds(RooflineTerms::of(model, device, tensor_parallel, formats), s);
}

RooflineBound roofline_bound(const RooflineTerms& terms, const StepShape& s) {
  const ModelConfig& model = *terms.model;
  const SimDevice& device = *terms.device;
  const StorageFormats& formats = terms.formats;
  const double tp = std::max(1, terms.tensor_parallel);
  const double d = model.hidden_size, vocab = model.vocab_size;
  const double rows = static_cast<double>(s.n_rows());
  const bool fp8_kv = formats.kv_cache_dtype == KvCacheDType::fp8;
  const double kv_slot_bytes =
      fp8_kv ? 2.0 * model.n_layers * model.n_kv_heads * (model.head_dim() + 4.0)
             : 2.0 * model.n_layers * model.kv_dim() * device.kv_dtype_bytes;
  // The decoder Linears (all of layer_params but the norms) in their format.
  const double linear_params = terms.n_linear_params;
  const double linear_bytes = terms.linear_bytes;
  const bool w8a8 = formats.quant.method == Quantization::fp8 && formats.quant.activations != ActivationQuant::none &&
                    device.fp8_peak_flops > 0;
  const double linear_flops = 2.0 * linear_params * rows;
  const double other_flops = 2.0 * (terms.n_layer_params - linear_params) * rows + 2.0 * d * vocab * s.n_sampled +
                             4.0 * model.n_layers * model.n_heads * model.head_dim() * s.attention_pairs;
  const double weight_bytes =
      (terms.n_layer_params - linear_params + (s.n_sampled > 0 ? d * vocab : 0.0)) * device.weight_dtype_bytes + linear_bytes;
  const double kv_bytes = kv_slot_bytes * static_cast<double>(s.sum_context + s.n_tokens);  // read + write
  RooflineBound b;
  b.flops = linear_flops + other_flops;
  b.bytes = weight_bytes + kv_bytes;
  b.compute_s =
      (linear_flops / (w8a8 ? device.fp8_peak_flops : device.peak_flops) + other_flops / device.peak_flops) / tp;
  b.memory_s = (weight_bytes + kv_bytes) / (device.mem_bw_bytes_s * tp);
  return b;
}

double roofline_seconds(const RooflineTerms& terms, const StepShape& s) {
  const ModelConfig& model = *terms.model;
  const SimDevice& device = *terms.device;
  const int tensor_parallel = terms.tensor_parallel;
  const double tp = std::max(1, tensor_parallel);
  const double d = model.hidden_size;
  const double rows = static_cast<double>(s.n_rows());
  const RooflineBound bound = roofline_bound(terms, s);
  double allreduce_s = 0.0;
  if (tensor_parallel > 1) {
    const double bytes = rows * d * device.weight_dtype_bytes;
    const double one = device.allreduce_latency_s + 2.0 * (tp - 1.0) / tp * bytes / (0.5 * device.interconnect_bytes_s);
    allreduce_s = 2.0 * model.n_layers * one;
  }
  const double swap_s = static_cast<double>(s.swap_bytes) / device.host_link_bytes_s;
  return std::max(bound.compute_s, bound.memory_s) + device.step_overhead_s + allreduce_s + swap_s;
}

ProfiledStepModel ProfiledStepModel::fit(std::span<const TimedStep> samples, std::span<const int> graph_buckets) {
  if (samples.empty()) throw std::invalid_argument("a profile needs at least one step sample");
  std::vector<TimedStep> base, verify;  // V and a_verify are fitted after the rest, to what it leaves
  for (const TimedStep& t : samples) (t.shape.verify_rows > 0 ? verify : base).push_back(t);
  if (!verify.empty()) {
    if (base.empty()) throw std::invalid_argument("a profile needs at least one step that verifies no drafts");
    ProfiledStepModel m = fit(base, graph_buckets);
    m.fit_verification(verify);
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
  return m;
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

StepShape ProfiledStepModel::folded(const StepShape& s) const {
  StepShape f = s;
  if (!has_verification()) {  // priced as before verification points existed: prefill chunks
    f.verify_rows = 0;
    f.verify_pairs = 0.0;
  }
  return f;
}

int64_t ProfiledStepModel::bucket_rows(int64_t n_seqs) const {
  const auto it = std::lower_bound(buckets_.begin(), buckets_.end(), n_seqs);
  return it == buckets_.end() ? 0 : *it;
}

bool ProfiledStepModel::graphable(const StepShape& s) const {
  return !buckets_.empty() && s.n_seqs >= 1 && s.n_tokens == s.n_seqs && s.n_padding_tokens == 0 && s.verify_rows == 0 &&
         s.n_seqs <= buckets_.back();
}

bool ProfiledStepModel::graphed(const StepShape& s) const {
  if (graph_knots_.empty() || !graphable(s)) return false;
  const double rows = static_cast<double>(bucket_rows(s.n_seqs));
  return rows >= graph_knots_.front() && rows <= graph_knots_.back();
}

bool ProfiledStepModel::use_padded(const StepShape& s) const {
  const double rows = static_cast<double>(s.n_rows());
  return s.padded_decode() && !pad_knots_.empty() && rows >= pad_knots_.front() && rows <= pad_knots_.back();
}

bool ProfiledStepModel::inside(const StepShape& shape) const {
  const StepShape s = folded(shape);
  const double rows = static_cast<double>(s.n_rows());
  return (graphed(s) || (rows >= knots_.front() && rows <= knots_.back())) && s.n_sampled <= max_sampled_ &&
         s.sum_context <= max_sum_context_ && s.max_context <= max_context_ &&
         s.prefill_pairs - s.verify_pairs <= max_prefill_pairs_ && s.decode_context <= max_decode_context_ &&
         s.verify_rows <= max_verify_rows_ && s.verify_pairs <= max_verify_pairs_;
}

StepShape ProfiledStepModel::clamp(const StepShape& shape) const {
  const StepShape s = folded(shape);
  StepShape c;
  c.n_tokens = std::clamp<int64_t>(s.n_rows(), static_cast<int64_t>(knots_.front()), static_cast<int64_t>(knots_.back()));
  c.n_padding_tokens = 0;
  if (graphed(s)) c.n_tokens = s.n_tokens;  // a graphed decode stays one: priced with G
  if (use_padded(s)) {  // keep the padding: the clamped shape is still priced with P
    c.n_tokens = s.n_tokens;
    c.n_padding_tokens = s.n_padding_tokens;
  }
  c.n_sampled = std::min(s.n_sampled, max_sampled_);
  c.n_seqs = s.n_seqs;
  c.sum_context = std::min(s.sum_context, max_sum_context_);
  c.max_context = std::min(s.max_context, max_context_);
  c.verify_rows = std::min(s.verify_rows, max_verify_rows_);
  c.verify_pairs = std::min(s.verify_pairs, max_verify_pairs_);
  c.prefill_pairs = std::min(s.prefill_pairs - s.verify_pairs, max_prefill_pairs_) + c.verify_pairs;
  c.decode_context = std::min(s.decode_context, max_decode_context_);
  c.attention_pairs = c.prefill_pairs + c.decode_context;
  return c;
}

double ProfiledStepModel::predict_clamped(const StepShape& shape) const {
  const StepShape s = clamp(shape);
  double t = predict_base(s);
  if (s.verify_rows > 0) {  // V (V(0) = 0 below its first knot) and the verification pairs
    const double rows = static_cast<double>(s.verify_rows);
    if (rows <= verify_knots_.front()) {
      t += rows / verify_knots_.front() * verify_knot_s_.front();
    } else {
      size_t i = 0;
      double u = 0.0;
      knot_weights(verify_knots_, rows, i, u);
      t += (1.0 - u) * verify_knot_s_[i] + (verify_knots_.size() > 1 ? u * verify_knot_s_[i + 1] : 0.0);
    }
    t += s_per_verify_pair_ * s.verify_pairs;
  }
  return std::max(t, 0.0);
}

double ProfiledStepModel::predict_base(const StepShape& s) const {
  if (graphed(s)) {
    size_t i = 0;
    double u = 0.0;
    knot_weights(graph_knots_, static_cast<double>(bucket_rows(s.n_seqs)), i, u);
    return (1.0 - u) * graph_knot_s_[i] + (graph_knots_.size() > 1 ? u * graph_knot_s_[i + 1] : 0.0) +
           s_per_prefill_pair_ * (s.prefill_pairs - s.verify_pairs) + s_per_decode_context_ * s.decode_context;
  }
  const bool padded = use_padded(s);
  const std::vector<double>& knots = padded ? pad_knots_ : knots_;
  const std::vector<double>& values = padded ? pad_knot_s_ : knot_s_;
  size_t i = 0;
  double u = 0.0;
  knot_weights(knots, static_cast<double>(s.n_rows()), i, u);
  double t = (1.0 - u) * values[i] + (knots.size() > 1 ? u * values[i + 1] : 0.0);
  t += s_per_sampled_ * static_cast<double>(s.n_sampled) + s_per_prefill_pair_ * (s.prefill_pairs - s.verify_pairs) +
       s_per_decode_context_ * s.decode_context;
  return t;
}

double ProfiledStepModel::fixed_seconds() const {
  if (knots_.size() < 2) return knot_s_.front();
  const double slope = (knot_s_[1] - knot_s_[0]) / (knots_[1] - knots_[0]);
  return std::max(0.0, knot_s_[0] - slope * knots_[0]);
}

std::string model_shape_hash(const ModelConfig& m) {
  const int64_t dims[] = {m.hidden_size, m.n_layers,          m.n_heads,   m.n_kv_heads,
                          m.head_dim(),  m.intermediate_size, m.vocab_size};
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : dims)
    for (int byte = 0; byte < 8; ++byte) {
      h ^= static_cast<uint64_t>(v >> (8 * byte)) & 0xffu;
      h *= 1099511628211ull;
    }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

SimDevice fit_allreduce(const SimDevice& device, int tensor_parallel,
                        const std::vector<std::pair<double, double>>& bytes_seconds) {
  if (tensor_parallel < 2) throw std::invalid_argument("fit_allreduce: tensor_parallel must be >= 2");
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : bytes_seconds) {
    if (!(x > 0) || !(y > 0)) throw std::invalid_argument("fit_allreduce: bytes and seconds must be > 0");
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double var = n * sxx - sx * sx;
  if (n < 2 || !(var > 0)) throw std::invalid_argument("fit_allreduce: needs two or more distinct message sizes");
  const double per_byte = (n * sxy - sx * sy) / var;
  const double latency = (sy - per_byte * sx) / n;
  if (!(per_byte > 0)) throw std::invalid_argument("fit_allreduce: time does not grow with the message size");
  const double tp = tensor_parallel;
  SimDevice d = device;
  d.allreduce_latency_s = std::max(0.0, latency);
  d.interconnect_bytes_s = 4.0 * (tp - 1.0) / (tp * per_byte);
  return d;
}

SimCostModel SimCostModel::roofline(const SimDevice& device, int tensor_parallel) {
  device.validate();
  if (tensor_parallel < 1)
    throw std::invalid_argument("tensor_parallel must be >= 1 (got " + std::to_string(tensor_parallel) + ")");
  SimCostModel m;
  m.kind = Kind::roofline;
  m.device = device;
  m.tensor_parallel = tensor_parallel;
  m.source = "roofline:" + device.name + (tensor_parallel > 1 ? " tp" + std::to_string(tensor_parallel) : "");
  return m;
}


double SimCostModel::step_seconds(const ModelConfig& model, const StepShape& s, CostSource* used) const {
  return StepPricer(*this, model).seconds(s, used);
}

StepPricer::StepPricer(const SimCostModel& cost, const ModelConfig& model)
    : cost_(cost),
      native_(RooflineTerms::of(model, cost.device, cost.tensor_parallel)),
      formatted_(RooflineTerms::of(model, cost.device, cost.tensor_parallel, cost.formats)) {}

double StepPricer::seconds(const StepShape& s, CostSource* used) const { return cost_.scale * unscaled(s, used); }

double StepPricer::unscaled(const StepShape& s, CostSource* used) const {
  const SimCostModel& c = cost_;
  if (c.kind == SimCostModel::Kind::roofline || !c.profiled) {
    if (used) *used = CostSource::roofline;
    return roofline_seconds(formatted_, s);
  }
  const double swap_s = static_cast<double>(s.swap_bytes) / c.device.host_link_bytes_s;
  StepShape no_swap = s;
  no_swap.swap_bytes = 0;
  // The profile measured the backend's own formats; other formats scale it by the roofline.
  const bool reformatted = c.formats.quant.quantized() || c.formats.kv_cache_dtype != KvCacheDType::auto_dtype;
  const double format_ratio =
      reformatted ? roofline_seconds(formatted_, no_swap) / roofline_seconds(native_, no_swap) : 1.0;
  if (c.profiled->inside(no_swap)) {
    if (used) *used = CostSource::profile;
    return c.profiled->predict_clamped(no_swap) * format_ratio + swap_s;
  }
  if (used) *used = CostSource::profile_roofline;
  const double edge = c.profiled->predict_clamped(no_swap);
  const double ratio = roofline_seconds(native_, no_swap) / roofline_seconds(native_, c.profiled->clamp(no_swap));
  return edge * ratio * format_ratio + swap_s;
}

}  // namespace servelab
