#include "engine/spec/adaptive.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "engine/backend/draft_pricer.h"

namespace servelab {

int next_num_drafts(int k, int n_drafted, int n_accepted, int k_max) {
  const int next = n_accepted >= n_drafted ? k + 2 : k - 1;
  return std::clamp(next, 1, std::max(1, k_max));
}

double expected_tokens(double alpha, int k) {
  alpha = std::clamp(alpha, 0.0, 1.0);
  double sum = 0.0, term = 1.0;
  for (int j = 0; j <= k; ++j, term *= alpha) sum += term;
  return sum;
}

namespace {

/// A step in which sequence s computes rows[s] positions ending at context[s] and draws each.
StepShape shape_of(std::span<const DrawingSeq> seqs, bool with_drafts) {
  StepShape s;
  for (const DrawingSeq& q : seqs) {
    const int rows = 1 + (with_drafts ? q.k : 0);
    const int end = q.context + (with_drafts ? q.k : 0);
    s.n_tokens += rows;
    s.n_sampled += rows;
    s.n_seqs += 1;
    s.sum_context += end;
    s.max_context = std::max<int64_t>(s.max_context, end);
    double pairs = 0.0;
    for (int r = 0; r < rows; ++r) pairs += end - rows + r + 1;
    s.attention_pairs += pairs;
    if (rows > 1) {  // a verification (priced as a prefill chunk by a profile without verification points)
      s.prefill_pairs += pairs;
      s.verify_rows += rows;
      s.verify_pairs += pairs;
    } else {
      s.decode_context += end;
    }
  }
  return s;
}

/// What SpecPricing's pricers were built from, cheaply: the models' names and shapes, and the cost
/// model's kind, source, device figures, degree, formats and scale. A SpecPricing whose fields
/// change after a price (a test swapping the draft) gets new pricers at the next one.
std::string pricing_key(const SpecPricing& p) {
  std::ostringstream k;
  k.precision(17);
  auto model = [&](const ModelConfig& m) { k << m.name << '|' << model_shape_hash(m) << '|'; };
  model(p.target);
  if (p.draft) model(*p.draft);
  const SimCostModel& c = p.cost;
  const SimDevice& d = c.device;
  k << int(c.kind) << '|' << c.source << '|' << c.scale << '|' << c.tensor_parallel << '|' << c.draft_profiles.size()
    << '|' << d.name << '|' << d.peak_flops << '|' << d.fp8_peak_flops << '|' << d.mem_bw_bytes_s << '|'
    << d.interconnect_bytes_s << '|' << d.allreduce_latency_s << '|' << d.step_overhead_s << '|' << d.kv_dtype_bytes
    << '|' << d.weight_dtype_bytes << '|' << d.host_link_bytes_s << '|' << int(c.formats.quant.method) << '|'
    << int(c.formats.quant.activations) << '|' << c.formats.quant.group_size << '|' << int(c.formats.kv_cache_dtype);
  return k.str();
}

}  // namespace

/// SpecPricing's pricers, over their own copies of its cost model and models (the pricers hold
/// references to them), so a SpecPricing moved or copied after its first price stays valid.
struct SpecPricers {
  std::string key;
  SimCostModel cost;
  ModelConfig target;
  std::optional<ModelConfig> draft;
  StepPricer step;
  std::optional<DraftPricer> draft_pricer;
  SpecPricers(const SpecPricing& p, std::string k)
      : key(std::move(k)), cost(p.cost), target(p.target), draft(p.draft), step(cost, target) {
    if (draft) draft_pricer.emplace(cost, target, *draft);
  }
  SpecPricers(const SpecPricers&) = delete;
  SpecPricers& operator=(const SpecPricers&) = delete;
};

SpecVerdict price_speculation(const SpecPricing& p, std::span<const DrawingSeq> seqs) {
  SpecVerdict v;
  if (seqs.empty()) return v;
  std::string key = pricing_key(p);
  if (!p.pricers || p.pricers->key != key) p.pricers = std::make_shared<const SpecPricers>(p, std::move(key));
  const SpecPricers& pr = *p.pricers;
  // The same arithmetic as SimCostModel::step_seconds and a DraftPricer built per call: the same bits.
  v.decode_s = pr.step.seconds(shape_of(seqs, false));
  v.verify_s = pr.step.seconds(shape_of(seqs, true));
  int k_max = 0;
  for (const DrawingSeq& q : seqs) {
    v.tokens_plain += 1.0;
    v.tokens_spec += expected_tokens(q.alpha, q.k);
    k_max = std::max(k_max, q.k);
  }
  // From the draft's own profile when the cost model carries one, else the target's scaled by the roofline.
  if (pr.draft_pricer) v.draft_s = k_max * pr.draft_pricer->seconds(shape_of(seqs, false));
  return v;
}

int SpecRateMeter::bucket_of(int batch) {
  int b = 0;
  while (b < 11 && (1 << b) < batch) ++b;
  return b;
}

bool SpecRateMeter::decided(int batch) const {
  const Bucket& b = buckets_[bucket_of(batch)];
  return b.seen[0] >= kWarm && b.seen[1] >= kWarm;
}

const SpecRateMeter::Bucket* SpecRateMeter::clear_neighbour(int i) const {
  for (int d = 1; d <= 2; ++d)
    for (const int j : {i - d, i + d}) {
      if (j < 0 || j >= 12) continue;
      const Bucket& n = buckets_[j];
      if (n.seen[0] < kWarm || n.seen[1] < kWarm) continue;
      const double hi = std::max(n.rate[0], n.rate[1]), lo = std::min(n.rate[0], n.rate[1]);
      if (hi > kFar * lo) return &n;
    }
  return nullptr;
}

bool SpecRateMeter::speculate(int batch, bool priced) {
  const int i = bucket_of(batch);
  Bucket& b = buckets_[i];
  ++b.steps;
  if (!decided(batch)) {
    if (const Bucket* n = clear_neighbour(i)) {  // follow it; measure the other choice now and then
      const bool best = n->rate[1] > n->rate[0];
      return b.seen[best ? 1 : 0] >= kWarm && b.steps % kExploreFar == 0 ? !best : best;
    }
    const int first = priced ? 1 : 0;  // the prior's choice is measured first, then the other
    return b.seen[first] < kWarm ? priced : !priced;
  }
  const bool best = b.rate[1] > b.rate[0];
  const double lead = best ? b.rate[1] / b.rate[0] : b.rate[0] / b.rate[1];
  const int every = lead > kFar ? kExploreFar : kExplore;
  return b.steps % every == 0 ? !best : best;
}

void SpecRateMeter::record(int batch, bool with_drafts, int tokens, double seconds) {
  if (tokens <= 0 || !(seconds > 0.0)) return;
  Bucket& b = buckets_[bucket_of(batch)];
  const int i = with_drafts ? 1 : 0;
  const double r = tokens / seconds;
  if (b.seen[i]++ == 0) return;  // a first step may pay one-time costs (graph capture)
  b.rate[i] = b.seen[i] == 2 ? r : (1.0 - kWeight) * b.rate[i] + kWeight * r;
}

double SpecRateMeter::rate(int batch, bool with_drafts) const {
  return buckets_[bucket_of(batch)].rate[with_drafts ? 1 : 0];
}

}  // namespace servelab
