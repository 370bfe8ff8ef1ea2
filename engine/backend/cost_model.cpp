#include "engine/backend/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "engine/backend/cost_model_knots.h"
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

}  // namespace

using profiled::knot_weights;
using profiled::mixed_step;

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
  return t > 0.0 ? t : min_step_s_;
}

double ProfiledStepModel::s_per_decode_spread(int64_t n_seqs) const {
  if (spread_knots_.empty()) return 0.0;
  const int64_t bucket = bucket_rows(n_seqs);  // 0 past the largest bucket: its last knot
  const double rows = bucket > 0 ? std::clamp(static_cast<double>(bucket), spread_knots_.front(), spread_knots_.back())
                                 : spread_knots_.back();
  size_t i = 0;
  double u = 0.0;
  knot_weights(spread_knots_, rows, i, u);
  return (1.0 - u) * spread_knot_a_[i] + (spread_knots_.size() > 1 ? u * spread_knot_a_[i + 1] : 0.0);
}

double ProfiledStepModel::predict_base(const StepShape& s) const {
  if (graphed(s)) {
    size_t i = 0;
    double u = 0.0;
    knot_weights(graph_knots_, static_cast<double>(bucket_rows(s.n_seqs)), i, u);
    return (1.0 - u) * graph_knot_s_[i] + (graph_knots_.size() > 1 ? u * graph_knot_s_[i + 1] : 0.0) +
           s_per_prefill_pair_ * (s.prefill_pairs - s.verify_pairs) + s_per_decode_context_ * s.decode_context +
           (spread_knots_.empty() ? 0.0 : s_per_decode_spread(s.n_seqs) * s.decode_spread());
  }
  const bool padded = use_padded(s);
  const std::vector<double>& knots = padded ? pad_knots_ : knots_;
  const std::vector<double>& values = padded ? pad_knot_s_ : knot_s_;
  size_t i = 0;
  double u = 0.0;
  knot_weights(knots, static_cast<double>(s.n_rows()), i, u);
  double t = (1.0 - u) * values[i] + (knots.size() > 1 ? u * values[i + 1] : 0.0);
  t += s_per_sampled_ * static_cast<double>(s.n_sampled) + s_per_prefill_pair_ * (s.prefill_pairs - s.verify_pairs) +
       s_per_decode_context_ * s.decode_context +
       (mixed_step(s) ? mixed_step_s_ + mixed_row_s_ * static_cast<double>(s.n_rows()) : 0.0);
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
