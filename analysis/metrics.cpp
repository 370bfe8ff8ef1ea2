#include "loadgen/records/json_int.h"
#include "analysis/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "analysis/json_format.h"

namespace servelab::analysis {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
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

void SloSpec::validate() const {
  if (!(ttft_ms > 0.0 && std::isfinite(ttft_ms)))
    throw std::invalid_argument("slo.ttft_ms must be > 0 (got " + std::to_string(ttft_ms) + ")");
  if (!(tpot_ms > 0.0 && std::isfinite(tpot_ms)))
    throw std::invalid_argument("slo.tpot_ms must be > 0 (got " + std::to_string(tpot_ms) + ")");
  if (!(attainment > 0.0 && attainment <= 1.0))
    throw std::invalid_argument("slo.attainment must be in (0, 1] (got " + std::to_string(attainment) + ")");
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

RunMetrics compute_metrics(const std::string& label, const std::vector<RequestRecord>& records,
                           const std::vector<StepRecord>& steps, const SloSpec& slo) {
  RunMetrics m;
  std::vector<double> ttft, tpot, itl, e2e, lateness, queue, prefill;
  double first_arrival = std::numeric_limits<double>::infinity();
  double last_finish = -std::numeric_limits<double>::infinity();
  for (const auto& r : records) {
    if (r.run != label) continue;
    if (r.warmup) {
      ++m.n_warmup;
      continue;
    }
    ++m.n_requests;
    m.n_preemptions += r.preemptions;
    lateness.push_back((r.sent_s - r.arrival_s) * 1000.0);
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
    bool meets = ttft_ms <= slo.ttft_ms + kSloSlackMs;
    if (r.output_tokens > 1) {
      const double tpot_ms = (e2e_ms - ttft_ms) / static_cast<double>(r.output_tokens - 1);
      tpot.push_back(tpot_ms);
      meets = meets && tpot_ms <= slo.tpot_ms + kSloSlackMs;
    }
    itl_gaps(r, itl);
    if (meets) {
      ++m.n_slo_met;
      m.goodput += r.output_tokens;  // a token count until divided by the window below
    }
  }
  m.ttft_ms = summarize(std::move(ttft));
  m.tpot_ms = summarize(std::move(tpot));
  m.itl_ms = summarize(std::move(itl));
  m.e2e_ms = summarize(std::move(e2e));
  m.lateness_ms = summarize(std::move(lateness));
  m.queue_ms = summarize(std::move(queue));
  m.prefill_ms = summarize(std::move(prefill));
  m.lateness_warning = !m.lateness_ms.empty() && m.lateness_ms.p99 > 1.0;

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

void to_json(nlohmann::ordered_json& j, const RunMetrics& m) {
  j = nlohmann::ordered_json::object();
  j["ttft_ms"] = m.ttft_ms;
  j["tpot_ms"] = m.tpot_ms;
  j["itl_ms"] = m.itl_ms;
  j["e2e_ms"] = m.e2e_ms;
  j["request_throughput"] = json_number(m.request_throughput);
  j["output_throughput"] = json_number(m.output_throughput);
  j["total_throughput"] = json_number(m.total_throughput);
  j["goodput"] = json_number(m.goodput);
  j["request_goodput"] = json_number(m.request_goodput);
  j["slo_attainment"] = json_number(m.slo_attainment);
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
  j["n_ok"] = m.n_ok;
  j["n_warmup"] = m.n_warmup;
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
  m.request_throughput = number_or_nan(j, "request_throughput");
  m.output_throughput = number_or_nan(j, "output_throughput");
  m.total_throughput = number_or_nan(j, "total_throughput");
  m.goodput = number_or_nan(j, "goodput");
  m.request_goodput = number_or_nan(j, "request_goodput");
  m.slo_attainment = number_or_nan(j, "slo_attainment");
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
  m.n_ok = j.value("n_ok", std::size_t{0});
  m.n_warmup = j.value("n_warmup", std::size_t{0});
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
