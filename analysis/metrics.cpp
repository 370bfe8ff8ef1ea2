#include "loadgen/records/json_int.h"
#include "analysis/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "analysis/json_format.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {

/// Slack for SLO comparisons, so a TTFT of exactly the SLO computed as (1.3 − 1.0) × 1000 =
/// 300.00000000000006 still meets a 300 ms SLO. 1 ns: far below any clock's resolution.
constexpr double kSloSlackMs = 1e-6;

std::string where(const RequestRecord& r) { return "run " + r.run + ", request " + std::to_string(r.id); }

/// The time the request's last token arrived (E2E's end), or -1 when none is known.
double last_token_time(const RequestRecord& r) {
  if (!r.token_times_s.empty()) return r.token_times_s.back();
  return r.end_s;
}

/// When the request left the system (the window's end), or -1 when unknown.
double finish_time(const RequestRecord& r) {
  if (r.end_s >= 0.0) return r.end_s;
  if (!r.token_times_s.empty()) return r.token_times_s.back();
  return r.first_token_s;
}

/// count / duration, or NaN (JSON null) when the window is empty: no rate was measured.
double per_second(double count, double duration_s) { return duration_s > 0.0 ? count / duration_s : kNaN; }

}  // namespace

const char* to_string(SloMetric m) {
  switch (m) {
    case SloMetric::ttft: return "ttft";
    case SloMetric::tpot: return "tpot";
    case SloMetric::itl: return "itl";
    case SloMetric::e2e: return "e2e";
  }
  return "?";
}

SloMetric parse_slo_metric(const std::string& s) {
  for (SloMetric m : {SloMetric::ttft, SloMetric::tpot, SloMetric::itl, SloMetric::e2e})
    if (s == to_string(m)) return m;
  throw std::invalid_argument("metric must be ttft, tpot, itl or e2e (got '" + s + "')");
}

std::string PercentileSlo::name() const {
  std::string m = to_string(metric);
  for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return m + " " + percentile_key(percentile) + " <= " + format_plain(max_ms) + " ms";
}

void SloSpec::validate() const {
  const std::pair<const char*, double> bounds[] = {
      {"ttft_ms", ttft_ms}, {"tpot_ms", tpot_ms}, {"itl_ms", itl_ms}, {"e2e_ms", e2e_ms}};
  for (const auto& [name, v] : bounds)
    if (!(v > 0.0))
      throw std::invalid_argument(std::string("slo.") + name + " must be > 0 ms (.inf = no bound) (got " +
                                  format_plain(v) + ")");
  if (!(attainment > 0.0 && attainment <= 1.0))
    throw std::invalid_argument("slo.attainment must be in (0, 1] (got " + std::to_string(attainment) + ")");
  for (std::size_t i = 0; i < percentiles.size(); ++i) {
    const auto& p = percentiles[i];
    const std::string at = "slo.percentiles[" + std::to_string(i) + "]";
    if (!(p.percentile > 0.0 && p.percentile <= 100.0))
      throw std::invalid_argument(at + ".percentile must be in (0, 100] (got " + format_plain(p.percentile) + ")");
    if (!(p.max_ms > 0.0 && std::isfinite(p.max_ms)))
      throw std::invalid_argument(at + ".max_ms must be finite and > 0 (got " + format_plain(p.max_ms) + ")");
  }
}

std::string SloSpec::describe() const {
  std::string per_request;
  const std::pair<const char*, double> bounds[] = {
      {"TTFT", ttft_ms}, {"TPOT", tpot_ms}, {"ITL", itl_ms}, {"E2E", e2e_ms}};
  for (const auto& [name, v] : bounds)
    if (std::isfinite(v)) per_request += (per_request.empty() ? "" : " and ") + std::string(name) + " <= " + format_plain(v) + " ms";
  std::string out = per_request.empty() ? "no per-request bound" : per_request + " per request";
  if (!percentiles.empty()) {
    std::string ps;
    for (const auto& p : percentiles) ps += (ps.empty() ? "" : " and ") + p.name();
    out += "; " + ps + " per run";
  }
  return out;
}

void WindowSpec::validate() const {
  const std::pair<const char*, double> secs[] = {{"skip_first_s", skip_first_s}, {"skip_last_s", skip_last_s}};
  for (const auto& [name, v] : secs)
    if (!(v >= 0.0 && std::isfinite(v)))
      throw std::invalid_argument(std::string("report.window.") + name + " must be finite and >= 0 (got " +
                                  format_plain(v) + ")");
  if (skip_first_requests < 0 || skip_last_requests < 0)
    throw std::invalid_argument("report.window.skip_first_requests and skip_last_requests must be >= 0");
  if ((skip_first_s > 0 || skip_last_s > 0) && (skip_first_requests > 0 || skip_last_requests > 0))
    throw std::invalid_argument("report.window: give seconds (skip_first_s, skip_last_s) or requests "
                                "(skip_first_requests, skip_last_requests), not both");
}

std::string WindowSpec::describe() const {
  if (!enabled()) return "all measured requests";
  if (skip_first_requests > 0 || skip_last_requests > 0)
    return "dropping the first " + std::to_string(skip_first_requests) + " and last " +
           std::to_string(skip_last_requests) + " measured requests by arrival";
  return "dropping requests arriving in the first " + format_plain(skip_first_s) + " s and last " +
         format_plain(skip_last_s) + " s of the run's arrivals";
}

void MetricsOptions::validate() const {
  for (double q : percentiles)
    if (!(q >= 0.0 && q <= 100.0))
      throw std::invalid_argument("report.percentiles entries must be in [0, 100] (got " + format_plain(q) + ")");
  window.validate();
}

bool RunMetrics::slo_percentiles_met() const {
  for (const auto& p : slo_percentiles)
    if (!p.met) return false;
  return true;
}

bool RunMetrics::meets_slo(const SloSpec& slo) const {
  return n_requests > 0 && slo_attainment >= slo.attainment - 1e-12 && slo_percentiles_met();
}

void itl_gaps(const RequestRecord& r, std::vector<double>& out) {
  const auto& t = r.token_times_s;
  const std::size_t m = t.size();
  if (m == 0) return;
  const auto n = static_cast<std::size_t>(std::max(r.output_tokens, 0));
  if (m > n)
    throw std::invalid_argument(where(r) + ": token_times_s has " + std::to_string(m) +
                                " entries but output_tokens is " + std::to_string(n));
  for (std::size_t i = 1; i < m; ++i)
    if (t[i] < t[i - 1])
      throw std::invalid_argument(where(r) + ": token_times_s is not ascending at index " +
                                  std::to_string(i));
  if (m == n) {
    // One entry per token; runs of equal times are chunks.
    std::size_t i = 0;
    while (i < m && t[i] == t[0]) ++i;
    out.insert(out.end(), i - 1, 0.0);  // the first chunk's extra tokens
    double prev = t[0];
    while (i < m) {
      std::size_t j = i;
      while (j < m && t[j] == t[i]) ++j;
      const std::size_t k = j - i;
      out.insert(out.end(), k, (t[i] - prev) * 1000.0 / static_cast<double>(k));
      prev = t[i];
      i = j;
    }
    return;
  }
  // One entry per chunk, counts unknown: spread the n − 1 later tokens over the m − 1 later chunks.
  const std::size_t later_chunks = m - 1;
  const std::size_t later_tokens = n - 1;
  if (later_chunks == 0) {
    out.insert(out.end(), later_tokens, 0.0);
    return;
  }
  const std::size_t base = later_tokens / later_chunks;  // ≥ 1 since n > m
  const std::size_t extra = later_tokens % later_chunks;
  for (std::size_t c = 1; c < m; ++c) {
    const std::size_t k = base + (c - 1 < extra ? 1 : 0);
    out.insert(out.end(), k, (t[c] - t[c - 1]) * 1000.0 / static_cast<double>(k));
  }
}

namespace {

/// A duration-weighted mean, summed in ascending (value, weight) order so the result does not
/// depend on step order. NaN when the weights sum to 0.
class WeightedMean {
 public:
  void add(double value, double weight) { samples_.emplace_back(value, weight); }
  double value() const {
    std::vector<std::pair<double, double>> xs = samples_;
    std::sort(xs.begin(), xs.end());
    double sum = 0.0, total = 0.0;
    for (const auto& [v, w] : xs) {
      sum += v * w;
      total += w;
    }
    return total > 0.0 ? sum / total : kNaN;
  }

 private:
  std::vector<std::pair<double, double>> samples_;
};

}  // namespace

KvMetrics compute_kv_metrics(const std::string& label, const std::vector<StepRecord>& steps,
                             double window_start_s, double window_end_s) {
  KvMetrics kv;
  WeightedMean util, stored, reserved, internal, external, free_share, batch;
  double util_max = kNaN;
  double peak = kNaN;
  for (const auto& s : steps) {
    if (s.run != label) continue;
    // The step's time inside the window; a step that only touches an edge counts with weight 0.
    const double lo = std::max(s.start_s, window_start_s);
    const double hi = std::min(s.start_s + std::max(s.duration_s, 0.0), window_end_s);
    if (hi < lo || (hi == lo && !(s.start_s >= window_start_s && s.start_s < window_end_s))) continue;
    const double w = hi - lo;
    ++kv.n_steps;
    kv.spec_num_drafts += s.spec_drafts;
    kv.spec_num_draft_tokens += s.spec_draft_tokens;
    kv.spec_num_accepted_tokens += s.spec_accepted_tokens;
    if (kv.spec_num_accepted_tokens_per_pos.size() < s.spec_accepted_per_pos.size())
      kv.spec_num_accepted_tokens_per_pos.resize(s.spec_accepted_per_pos.size(), 0);
    for (size_t p = 0; p < s.spec_accepted_per_pos.size(); ++p) kv.spec_num_accepted_tokens_per_pos[p] += s.spec_accepted_per_pos[p];
    if (kv.spec_num_draft_tokens_per_pos.size() < s.spec_drafted_per_pos.size())
      kv.spec_num_draft_tokens_per_pos.resize(s.spec_drafted_per_pos.size(), 0);
    for (size_t p = 0; p < s.spec_drafted_per_pos.size(); ++p) kv.spec_num_draft_tokens_per_pos[p] += s.spec_drafted_per_pos[p];
    kv.structured_masks += s.n_masks;
    kv.structured_mask_s += s.mask_s;
    kv.jump_forward_tokens += s.jump_forward_tokens;
    batch.add(s.batch_size, w);
    kv.batch_size_max = std::max(kv.batch_size_max, s.batch_size);
    const int64_t used = s.kv_stored + s.kv_reserved + s.kv_internal_frag;
    if (s.kv_capacity > 0) {
      const double use = static_cast<double>(used) / static_cast<double>(s.kv_capacity);
      peak = std::isnan(peak) ? use : std::max(peak, use);
    }
    if (used <= 0) continue;
    ++kv.n_steps_used;
    util.add(s.kv_utilization(), w);
    util_max = std::isnan(util_max) ? s.kv_utilization() : std::max(util_max, s.kv_utilization());
    if (s.kv_capacity > 0) {
      const auto cap = static_cast<double>(s.kv_capacity);
      stored.add(static_cast<double>(s.kv_stored) / cap, w);
      reserved.add(static_cast<double>(s.kv_reserved) / cap, w);
      internal.add(static_cast<double>(s.kv_internal_frag) / cap, w);
      external.add(static_cast<double>(s.kv_external_frag) / cap, w);
      free_share.add(static_cast<double>(s.kv_free) / cap, w);
    }
  }
  kv.utilization_mean = util.value();
  kv.utilization_max = util_max;
  kv.breakdown = {stored.value(), reserved.value(), internal.value(), external.value(), free_share.value()};
  kv.peak_use = peak;
  kv.batch_size_mean = batch.value();
  return kv;
}

namespace {

/// The measured (non-warm-up) records of `label` that the window keeps, in record order;
/// `n_dropped` counts the others.
std::vector<const RequestRecord*> windowed(const std::string& label, const std::vector<RequestRecord>& records,
                                           const WindowSpec& w, std::size_t& n_warmup, std::size_t& n_dropped) {
  std::vector<const RequestRecord*> measured;
  for (const auto& r : records) {
    if (r.run != label) continue;
    if (r.warmup) ++n_warmup;
    else measured.push_back(&r);
  }
  n_dropped = 0;
  if (!w.enabled() || measured.empty()) return measured;
  std::vector<const RequestRecord*> by_arrival = measured;
  std::stable_sort(by_arrival.begin(), by_arrival.end(), [](const RequestRecord* a, const RequestRecord* b) {
    return a->arrival_s != b->arrival_s ? a->arrival_s < b->arrival_s : a->id < b->id;
  });
  std::vector<const RequestRecord*> keep;
  if (w.skip_first_requests > 0 || w.skip_last_requests > 0) {
    const std::size_t n = by_arrival.size();
    const auto first = std::min<std::size_t>(static_cast<std::size_t>(w.skip_first_requests), n);
    const auto last = std::min<std::size_t>(static_cast<std::size_t>(w.skip_last_requests), n - first);
    keep.assign(by_arrival.begin() + static_cast<std::ptrdiff_t>(first),
                by_arrival.end() - static_cast<std::ptrdiff_t>(last));
  } else {
    const double lo = by_arrival.front()->arrival_s + w.skip_first_s;
    const double hi = by_arrival.back()->arrival_s - w.skip_last_s;
    for (const RequestRecord* r : by_arrival)
      if (r->arrival_s >= lo && r->arrival_s <= hi) keep.push_back(r);
  }
  n_dropped = measured.size() - keep.size();
  // Back to record order, so sums run in the same order as without a window.
  const std::unordered_set<const RequestRecord*> kept(keep.begin(), keep.end());
  std::vector<const RequestRecord*> out;
  for (const RequestRecord* r : measured)
    if (kept.count(r)) out.push_back(r);
  return out;
}

}  // namespace

RunMetrics compute_metrics(const std::string& label, const std::vector<RequestRecord>& records,
                           const std::vector<StepRecord>& steps, const SloSpec& slo, const MetricsOptions& options) {
  RunMetrics m;
  std::vector<double> ttft, tpot, itl, e2e, lateness, queue, prefill;
  double first_arrival = std::numeric_limits<double>::infinity();
  double last_finish = -std::numeric_limits<double>::infinity();
  const auto kept = windowed(label, records, options.window, m.n_warmup, m.n_window_dropped);
  for (const RequestRecord* rp : kept) {
    const RequestRecord& r = *rp;
    ++m.n_requests;
    m.n_preemptions += r.preemptions;
    lateness.push_back(r.lateness_s() * 1000.0);  // a max-concurrency cap's wait is not lateness
    first_arrival = std::min(first_arrival, r.arrival_s);
    const double fin = finish_time(r);
    if (fin >= 0.0) last_finish = std::max(last_finish, fin);
    if (r.status != RecordStatus::ok) {
      ++m.n_failed;
      continue;
    }
    ++m.n_ok;
    m.n_prompt_tokens += r.prompt_tokens;
    m.n_output_tokens += r.output_tokens;
    if (r.output_tokens <= 0) continue;  // nothing delivered: no latency, no SLO credit
    if (r.first_token_s < 0.0)
      throw std::invalid_argument(where(r) + ": status ok with " + std::to_string(r.output_tokens) +
                                  " output tokens but no first_token_s");
    const double last = last_token_time(r);
    if (last < 0.0)
      throw std::invalid_argument(where(r) + ": status ok but neither token_times_s nor end_s is set");
    const double ttft_ms = (r.first_token_s - r.arrival_s) * 1000.0;
    const double e2e_ms = (last - r.arrival_s) * 1000.0;
    ttft.push_back(ttft_ms);
    e2e.push_back(e2e_ms);
    if (r.scheduled_s >= 0.0) {
      queue.push_back((r.scheduled_s - r.arrival_s) * 1000.0);
      prefill.push_back((r.first_token_s - r.scheduled_s) * 1000.0);
    }
    bool meets = ttft_ms <= slo.ttft_ms + kSloSlackMs && e2e_ms <= slo.e2e_ms + kSloSlackMs;
    if (r.output_tokens > 1) {
      const double tpot_ms = (e2e_ms - ttft_ms) / static_cast<double>(r.output_tokens - 1);
      tpot.push_back(tpot_ms);
      meets = meets && tpot_ms <= slo.tpot_ms + kSloSlackMs;
    }
    const std::size_t gaps_from = itl.size();
    itl_gaps(r, itl);
    for (std::size_t g = gaps_from; g < itl.size(); ++g) meets = meets && itl[g] <= slo.itl_ms + kSloSlackMs;
    if (meets) {
      ++m.n_slo_met;
      m.goodput += r.output_tokens;  // a token count until divided by the window below
    }
  }
  // Percentile objectives need percentiles the distributions may not hold by default.
  std::vector<double> qs = options.percentiles;
  for (const auto& p : slo.percentiles) qs.push_back(p.percentile);
  m.ttft_ms = summarize(std::move(ttft), qs);
  m.tpot_ms = summarize(std::move(tpot), qs);
  m.itl_ms = summarize(std::move(itl), qs);
  m.e2e_ms = summarize(std::move(e2e), qs);
  m.lateness_ms = summarize(std::move(lateness));
  m.queue_ms = summarize(std::move(queue));
  m.prefill_ms = summarize(std::move(prefill));
  m.lateness_warning = !m.lateness_ms.empty() && m.lateness_ms.p99 > 1.0;
  for (const auto& p : slo.percentiles) {
    const Distribution& d = p.metric == SloMetric::ttft   ? m.ttft_ms
                            : p.metric == SloMetric::tpot ? m.tpot_ms
                            : p.metric == SloMetric::itl  ? m.itl_ms
                                                          : m.e2e_ms;
    const double v = d.at(p.percentile);
    m.slo_percentiles.push_back({p, v, std::isfinite(v) && v <= p.max_ms + kSloSlackMs});
  }

  if (m.n_requests > 0 && last_finish >= first_arrival) {
    m.window_start_s = first_arrival;
    m.window_end_s = last_finish;
    m.duration_s = last_finish - first_arrival;
  } else if (m.n_requests > 0) {
    m.window_start_s = m.window_end_s = first_arrival;
  }
  const double d = m.duration_s;
  m.request_throughput = per_second(static_cast<double>(m.n_ok), d);
  m.output_throughput = per_second(static_cast<double>(m.n_output_tokens), d);
  m.total_throughput = per_second(static_cast<double>(m.n_prompt_tokens + m.n_output_tokens), d);
  m.goodput = per_second(m.goodput, d);
  m.request_goodput = per_second(static_cast<double>(m.n_slo_met), d);
  m.slo_attainment =
      m.n_requests > 0 ? static_cast<double>(m.n_slo_met) / static_cast<double>(m.n_requests) : kNaN;
  if (m.n_requests > 0) m.kv = compute_kv_metrics(label, steps, m.window_start_s, m.window_end_s);
  else m.kv = compute_kv_metrics(label, {}, 0.0, 0.0);  // no window: every KV figure null
  return m;
}

LatencySamples latency_samples(const std::string& label, const std::vector<RequestRecord>& records,
                               const WindowSpec& window) {
  LatencySamples out;
  std::size_t n_warmup = 0, n_dropped = 0;
  for (const RequestRecord* r : windowed(label, records, window, n_warmup, n_dropped)) {
    if (r->status != RecordStatus::ok || r->output_tokens <= 0 || r->first_token_s < 0.0) continue;
    const double last = last_token_time(*r);
    if (last < 0.0) continue;
    const double ttft_ms = (r->first_token_s - r->arrival_s) * 1000.0;
    const double e2e_ms = (last - r->arrival_s) * 1000.0;
    out.ttft_ms.push_back(ttft_ms);
    out.e2e_ms.push_back(e2e_ms);
    if (r->output_tokens > 1) out.tpot_ms.push_back((e2e_ms - ttft_ms) / static_cast<double>(r->output_tokens - 1));
    itl_gaps(*r, out.itl_ms);
  }
  return out;
}

void to_json(nlohmann::ordered_json& j, const RunMetrics& m) {
  j = nlohmann::ordered_json::object();
  j["ttft_ms"] = m.ttft_ms;
  j["tpot_ms"] = m.tpot_ms;
  j["itl_ms"] = m.itl_ms;
  j["e2e_ms"] = m.e2e_ms;
  j["request_throughput_rps"] = json_number(m.request_throughput);
  j["output_throughput_tok_s"] = json_number(m.output_throughput);
  j["total_throughput_tok_s"] = json_number(m.total_throughput);
  j["goodput_tok_s"] = json_number(m.goodput);
  j["request_goodput_rps"] = json_number(m.request_goodput);
  j["slo_attainment"] = json_number(m.slo_attainment);
  if (!m.slo_percentiles.empty()) {
    auto& a = j["slo_percentiles"] = nlohmann::ordered_json::array();
    for (const auto& p : m.slo_percentiles)
      a.push_back({{"metric", to_string(p.slo.metric)},
                   {"percentile", exact_number(p.slo.percentile)},
                   {"max_ms", exact_number(p.slo.max_ms)},
                   {"value_ms", json_number(p.value_ms)},
                   {"met", p.met}});
  }
  j["kv_utilization"] = {{"mean", json_number(m.kv.utilization_mean)},
                         {"max", json_number(m.kv.utilization_max)}};
  j["lateness_ms"] = m.lateness_ms;
  // Extras beyond DESIGN.md's contract.
  j["queue_ms"] = m.queue_ms;
  j["prefill_ms"] = m.prefill_ms;
  const auto& b = m.kv.breakdown;
  j["kv_breakdown"] = {{"stored", json_number(b.stored)},
                       {"reserved", json_number(b.reserved)},
                       {"internal_frag", json_number(b.internal_frag)},
                       {"external_frag", json_number(b.external_frag)},
                       {"free", json_number(b.free)}};
  j["kv_peak_use"] = json_number(m.kv.peak_use);
  j["batch_size"] = {{"mean", json_number(m.kv.batch_size_mean)}, {"max", m.kv.batch_size_max}};
  j["n_steps"] = m.kv.n_steps;
  j["n_steps_kv_used"] = m.kv.n_steps_used;
  if (m.kv.spec_num_drafts > 0) {
    const double drafts = static_cast<double>(m.kv.spec_num_drafts);
    const double drafted = static_cast<double>(m.kv.spec_num_draft_tokens);
    const double accepted = static_cast<double>(m.kv.spec_num_accepted_tokens);
    j["spec_decode"] = {{"num_drafts", m.kv.spec_num_drafts},
                        {"num_draft_tokens", m.kv.spec_num_draft_tokens},
                        {"num_accepted_tokens", m.kv.spec_num_accepted_tokens},
                        {"acceptance_rate", json_number(drafted > 0 ? accepted / drafted : kNaN)},
                        {"mean_acceptance_length", json_number(1.0 + accepted / drafts)},
                        {"num_accepted_tokens_per_pos", m.kv.spec_num_accepted_tokens_per_pos},
                        {"num_draft_tokens_per_pos", m.kv.spec_num_draft_tokens_per_pos}};
    if (m.kv.spec_from_server) j["spec_decode"]["source"] = "server_metrics";
  }
  if (m.kv.structured_masks > 0 || m.kv.jump_forward_tokens > 0)
    j["structured_engine"] = {{"n_masks", m.kv.structured_masks},
                              {"mask_s", json_number(m.kv.structured_mask_s)},
                              {"jump_forward_tokens", m.kv.jump_forward_tokens}};
  j["n_ok"] = m.n_ok;
  j["n_warmup"] = m.n_warmup;
  if (m.n_window_dropped > 0) j["n_window_dropped"] = m.n_window_dropped;
  j["n_slo_met"] = m.n_slo_met;
  j["n_prompt_tokens"] = m.n_prompt_tokens;
  j["n_output_tokens"] = m.n_output_tokens;
  j["n_preemptions"] = m.n_preemptions;
  j["n_itl_samples"] = m.itl_ms.n;
  j["window_start_s"] = json_number(m.window_start_s);
  j["duration_s"] = json_number(m.duration_s);
  j["lateness_warning"] = m.lateness_warning;
}

void from_json(const nlohmann::ordered_json& j, RunMetrics& m) {
  if (!j.is_object()) throw std::invalid_argument("\"metrics\" must be an object");
  m.ttft_ms = j.at("ttft_ms").get<Distribution>();
  m.tpot_ms = j.at("tpot_ms").get<Distribution>();
  m.itl_ms = j.at("itl_ms").get<Distribution>();
  m.e2e_ms = j.at("e2e_ms").get<Distribution>();
  m.lateness_ms = j.contains("lateness_ms") ? j["lateness_ms"].get<Distribution>() : summarize({});
  m.queue_ms = j.contains("queue_ms") ? j["queue_ms"].get<Distribution>() : summarize({});
  m.prefill_ms = j.contains("prefill_ms") ? j["prefill_ms"].get<Distribution>() : summarize({});
  // The unit-named keys, else the names summaries had before units were added.
  auto rate = [&](const char* key, const char* old_key) {
    return j.contains(key) ? number_or_nan(j, key) : number_or_nan(j, old_key);
  };
  m.request_throughput = rate("request_throughput_rps", "request_throughput");
  m.output_throughput = rate("output_throughput_tok_s", "output_throughput");
  m.total_throughput = rate("total_throughput_tok_s", "total_throughput");
  m.goodput = rate("goodput_tok_s", "goodput");
  m.request_goodput = rate("request_goodput_rps", "request_goodput");
  m.slo_attainment = number_or_nan(j, "slo_attainment");
  m.slo_percentiles.clear();
  if (auto it = j.find("slo_percentiles"); it != j.end() && it->is_array()) {
    for (const auto& p : *it) {
      RunMetrics::PercentileSloResult r;
      r.slo.metric = parse_slo_metric(p.at("metric").get<std::string>());
      r.slo.percentile = p.at("percentile").get<double>();
      r.slo.max_ms = p.at("max_ms").get<double>();
      r.value_ms = number_or_nan(p, "value_ms");
      r.met = p.value("met", false);
      m.slo_percentiles.push_back(r);
    }
  }
  if (auto it = j.find("kv_utilization"); it != j.end() && it->is_object()) {
    m.kv.utilization_mean = number_or_nan(*it, "mean");
    m.kv.utilization_max = number_or_nan(*it, "max");
  } else {
    m.kv.utilization_mean = m.kv.utilization_max = kNaN;
  }
  if (auto it = j.find("kv_breakdown"); it != j.end() && it->is_object()) {
    m.kv.breakdown = {number_or_nan(*it, "stored"), number_or_nan(*it, "reserved"),
                      number_or_nan(*it, "internal_frag"), number_or_nan(*it, "external_frag"),
                      number_or_nan(*it, "free")};
  } else {
    m.kv.breakdown = {kNaN, kNaN, kNaN, kNaN, kNaN};
  }
  m.kv.peak_use = number_or_nan(j, "kv_peak_use");
  if (auto it = j.find("batch_size"); it != j.end() && it->is_object()) {
    m.kv.batch_size_mean = number_or_nan(*it, "mean");
    m.kv.batch_size_max = json_int_or(*it, "max", 0);
  }
  m.kv.n_steps = j.value("n_steps", std::size_t{0});
  m.kv.n_steps_used = j.value("n_steps_kv_used", std::size_t{0});
  if (auto it = j.find("spec_decode"); it != j.end() && it->is_object()) {
    m.kv.spec_num_drafts = json_int_or(*it, "num_drafts", int64_t{0});
    m.kv.spec_num_draft_tokens = json_int_or(*it, "num_draft_tokens", int64_t{0});
    m.kv.spec_num_accepted_tokens = json_int_or(*it, "num_accepted_tokens", int64_t{0});
    if (auto pp = it->find("num_accepted_tokens_per_pos"); pp != it->end() && pp->is_array())
      for (const auto& v : *pp) m.kv.spec_num_accepted_tokens_per_pos.push_back(json_int<int64_t>(v));
    if (auto dp = it->find("num_draft_tokens_per_pos"); dp != it->end() && dp->is_array())
      for (const auto& v : *dp) m.kv.spec_num_draft_tokens_per_pos.push_back(json_int<int64_t>(v));
    m.kv.spec_from_server = it->value("source", std::string()) == "server_metrics";
  }
  if (auto it = j.find("structured_engine"); it != j.end() && it->is_object()) {
    m.kv.structured_masks = json_int_or(*it, "n_masks", int64_t{0});
    m.kv.structured_mask_s = number_or_nan(*it, "mask_s");
    m.kv.jump_forward_tokens = json_int_or(*it, "jump_forward_tokens", int64_t{0});
  }
  m.n_ok = j.value("n_ok", std::size_t{0});
  m.n_warmup = j.value("n_warmup", std::size_t{0});
  m.n_window_dropped = j.value("n_window_dropped", std::size_t{0});
  m.n_slo_met = j.value("n_slo_met", std::size_t{0});
  m.n_prompt_tokens = json_int_or(j, "n_prompt_tokens", int64_t{0});
  m.n_output_tokens = json_int_or(j, "n_output_tokens", int64_t{0});
  m.n_preemptions = json_int_or(j, "n_preemptions", int64_t{0});
  m.itl_ms.n = j.value("n_itl_samples", m.itl_ms.n);
  m.window_start_s = j.value("window_start_s", 0.0);
  m.duration_s = j.value("duration_s", 0.0);
  m.window_end_s = m.window_start_s + m.duration_s;
  m.lateness_warning = j.value("lateness_warning", false);
}

}  // namespace servelab::analysis
