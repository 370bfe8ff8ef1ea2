#include "engine/spec/adaptive.h"

#include <algorithm>
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

/// Whether two models have the same name and shape (what model_shape_hash hashes), compared in place.
bool same_model(const ModelConfig& a, const ModelConfig& b) {
  return a.name == b.name && a.hidden_size == b.hidden_size && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
         a.n_kv_heads == b.n_kv_heads && a.head_dim() == b.head_dim() && a.intermediate_size == b.intermediate_size &&
         a.vocab_size == b.vocab_size;
}

/// Whether a cost model has the kind, source, device figures, degree, formats and scale of another.
bool same_cost(const SimCostModel& a, const SimCostModel& b) {
  const SimDevice &d = a.device, &e = b.device;
  return a.kind == b.kind && a.source == b.source && a.scale == b.scale && a.tensor_parallel == b.tensor_parallel &&
         a.draft_profiles.size() == b.draft_profiles.size() && d.name == e.name && d.peak_flops == e.peak_flops &&
         d.fp8_peak_flops == e.fp8_peak_flops && d.mem_bw_bytes_s == e.mem_bw_bytes_s &&
         d.interconnect_bytes_s == e.interconnect_bytes_s && d.allreduce_latency_s == e.allreduce_latency_s &&
         d.step_overhead_s == e.step_overhead_s && d.kv_dtype_bytes == e.kv_dtype_bytes &&
         d.weight_dtype_bytes == e.weight_dtype_bytes && d.host_link_bytes_s == e.host_link_bytes_s &&
         a.formats.quant.method == b.formats.quant.method && a.formats.quant.activations == b.formats.quant.activations &&
         a.formats.quant.group_size == b.formats.quant.group_size && a.formats.kv_cache_dtype == b.formats.kv_cache_dtype;
}

}  // namespace

/// SpecPricing's pricers, over their own copies of its cost model and models (the pricers hold
/// references to them), so a SpecPricing moved or copied after its first price stays valid.
struct SpecPricers {
  SimCostModel cost;
  ModelConfig target;
  std::optional<ModelConfig> draft;
  StepPricer step;
  std::optional<DraftPricer> draft_pricer;
  explicit SpecPricers(const SpecPricing& p)
      : cost(p.cost), target(p.target), draft(p.draft), step(cost, target) {
    if (draft) draft_pricer.emplace(cost, target, *draft);
  }
  /// Whether `p` still has the models and cost model these were built from (a SpecPricing whose
  /// fields change after a price, a test swapping the draft, gets new pricers at the next one).
  /// Compared field by field: no string is built per verdict.
  bool built_from(const SpecPricing& p) const {
    return same_model(target, p.target) && draft.has_value() == p.draft.has_value() &&
           (!draft || same_model(*draft, *p.draft)) && same_cost(cost, p.cost);
  }
  SpecPricers(const SpecPricers&) = delete;
  SpecPricers& operator=(const SpecPricers&) = delete;
};

SpecVerdict price_speculation(const SpecPricing& p, std::span<const DrawingSeq> seqs) {
  SpecVerdict v;
  if (seqs.empty()) return v;
  if (!p.pricers || !p.pricers->built_from(p)) p.pricers = std::make_shared<const SpecPricers>(p);
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

bool SpecRateMeter::decided(int batch) const { return is_decided(buckets_[bucket_of(batch)]); }

int SpecRateMeter::interval_of(const Bucket& b) {
  const bool best = drafts_win(b);
  const double lead = best ? b.rate[1] / b.rate[0] : b.rate[0] / b.rate[1];
  const int base = lead > kFar ? kExploreFar : kExplore;
  return best ? base : std::max(base, b.backoff);
}

int SpecRateMeter::explore_interval(int batch) const {
  const Bucket& b = buckets_[bucket_of(batch)];
  return is_decided(b) ? interval_of(b) : 0;
}

const SpecRateMeter::Bucket* SpecRateMeter::clear_neighbour(int i) const {
  for (int d = 1; d <= 2; ++d)
    for (const int j : {i - d, i + d}) {
      if (j < 0 || j >= 12) continue;
      const Bucket& n = buckets_[j];
      if (!is_decided(n)) continue;
      const double hi = std::max(n.rate[0], n.rate[1]), lo = std::min(n.rate[0], n.rate[1]);
      if (hi > kFar * lo) return &n;
    }
  return nullptr;
}

int SpecRateMeter::probe_size(int batch) {
  return std::max(std::min(batch, kProbeMin), (batch + kProbeShare - 1) / kProbeShare);
}

int SpecRateMeter::large_probe_size(int batch) { return std::min(batch, 2 * probe_size(batch)); }

int SpecRateMeter::next_probe_size(int batch) const {
  return buckets_[bucket_of(batch)].next_large ? large_probe_size(batch) : probe_size(batch);
}

double SpecRateMeter::extra_for_all(const Bucket& b, int batch, const ProbePoint& p) {
  // The two sizes give the shape, extra(n) = fixed + n per_seq, and the probe `p` its level
  // (extra_s times extra(batch) / extra(p.n)): the other point may be an exploration old, taken at
  // another acceptance. A larger probe that took less reads as all fixed; a part per sequence
  // steeper than proportional (no fixed part left, a point from before acceptance moved) as none
  // fixed, which is the one-size scaling.
  const ProbePoint &s = b.probes[0], &l = b.probes[1];
  const double proportional = p.extra_s * batch / p.n;
  if (s.n <= 0 || l.n <= s.n) return proportional;
  const double per_seq = (l.extra_s - s.extra_s) / (l.n - s.n);
  if (per_seq <= 0.0) return p.extra_s;
  const double fixed = s.extra_s - per_seq * s.n;
  if (fixed <= 0.0) return proportional;
  return p.extra_s * (fixed + per_seq * batch) / (fixed + per_seq * p.n);
}

SpecChoice SpecRateMeter::choose(int batch) {
  const int i = bucket_of(batch);
  Bucket& b = buckets_[i];
  ++b.steps;
  // Drafts run for all only where measured (here or at a clear neighbour) to win; elsewhere
  // they are measured by probes.
  auto with_drafts = [](bool drafts_win) { return drafts_win ? SpecChoice::drafts : SpecChoice::probe; };
  if (!is_decided(b)) {
    if (const Bucket* n = clear_neighbour(i)) {  // follow it; measure the other choice at its interval
      const bool best = drafts_win(*n);
      const bool other = b.seen[best ? 1 : 0] >= kWarm && b.steps % interval_of(*n) == 0;
      return best != other ? with_drafts(best) : SpecChoice::plain;
    }
    // Plain first: a probe is scaled by the plain rate.
    return b.seen[0] < kWarm ? SpecChoice::plain : SpecChoice::probe;
  }
  const bool best = drafts_win(b);
  const bool explore = ++b.since >= interval_of(b);
  if (explore) b.since = 0;
  return best != explore ? with_drafts(best) : SpecChoice::plain;
}

void SpecRateMeter::add(Bucket& b, bool with_drafts, double r, bool probe, int drafted) {
  const int i = with_drafts ? 1 : 0;
  const bool drafts_led = is_decided(b) && drafts_win(b);
  const bool warming = !is_decided(b);
  if (b.seen[i]++ == 0) return;  // one-time costs: a graph's eager first run, a prompt's catch-up
  if (b.seen[i] == 2) b.rate[i] = r;
  else if (!with_drafts && b.seen[i] <= kWarm) b.rate[i] = std::max(b.rate[i], r);  // a graph capture slows one
  else b.rate[i] = (1.0 - kWeight) * b.rate[i] + kWeight * r;
  const bool still_losing = !drafts_win(b);
  if (with_drafts && !probe && drafts_led && still_losing) {  // its own drafting turned it back
    b.backoff = std::min(kExploreMax, 2 * std::max(kExplore, b.backoff));
    return;
  }
  // A counted probe where drafts did not lead: the warm-up's, or an exploring one. One that turned
  // the bucket to drafts keeps the backoff, so if drafting for all then measures a loss the next
  // exploration waits longer than the last.
  if (!probe || drafts_led || !still_losing) return;
  // One that measured a gain the average has not taken in (its own estimate above the plain rate)
  // brings the next exploration back to the base interval, to confirm it or not; one that confirms
  // the loss doubles the interval. The warm-up's counted probes do so only with kConfirmDrafts
  // draft tokens or more (then the first exploration comes after 4 base intervals): the 3-4 of a
  // probe at batch 1 tell too little of acceptance to put off the next look.
  const int base = b.rate[0] > kFar * b.rate[1] ? kExploreFar : kExplore;
  if (r > kMargin * b.rate[0]) b.backoff = 0;
  else if (!warming || drafted >= kConfirmDrafts) b.backoff = std::min(kExploreMax, 2 * std::max(base, b.backoff));
}

void SpecRateMeter::record(int batch, bool with_drafts, int tokens, double seconds) {
  if (tokens <= 0 || !(seconds > 0.0)) return;
  add(buckets_[bucket_of(batch)], with_drafts, tokens / seconds, false, 0);
}

void SpecRateMeter::record_probe(int batch, const ProbeStep& p) {
  Bucket& b = buckets_[bucket_of(batch)];
  if (p.tokens <= 0 || p.n_probed <= 0 || !(p.seconds > 0.0) || !(b.rate[0] > 0.0)) return;
  const int all = std::max(batch, p.n_probed);
  const double plain_s = p.tokens / b.rate[0];
  const ProbePoint point{p.n_probed, std::max(0.0, p.seconds - std::max(0.0, p.catch_up_s) - plain_s)};
  // The first probe's point too (its catch-up taken off): add() leaves its rate out.
  const bool large = p.n_probed > probe_size(batch);
  b.probes[large ? 1 : 0] = point;
  b.next_large = !large;
  const double tokens = p.tokens + double(all) / p.n_probed * p.accepted;
  add(b, true, tokens / (plain_s + extra_for_all(b, all, point)), true, p.drafted);
}

double SpecRateMeter::rate(int batch, bool with_drafts) const {
  return buckets_[bucket_of(batch)].rate[with_drafts ? 1 : 0];
}

}  // namespace servelab
