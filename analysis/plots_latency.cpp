// The figures people look at first: latency CDFs per strategy at one rate, TTFT and queue length
// over time within a run, and goodput against rate with each strategy's capacity marked.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "analysis/plots.h"
#include "analysis/plots_internal.h"
#include "analysis/text_format.h"
#include "loadgen/records/rate.h"

namespace servelab::analysis {

std::vector<std::pair<std::string, double>> strategy_capacities(const Summary& summary) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& name : summary.strategies()) {
    double cap = NAN;
    for (const auto& r : summary.runs)
      if (r.info.strategy_name() == name && r.info.mode == RunMode::open && r.metrics.meets_slo(summary.slo) &&
          (std::isnan(cap) || r.info.rate > cap))
        cap = r.info.rate;
    out.emplace_back(name, cap);
  }
  return out;
}

namespace plot_detail {

bool ttft_queue_data(const std::filesystem::path& plots, const std::string& file, const std::string& label,
                     const std::vector<RequestRecord>& records, double& ttft_max_ms) {
  std::ostringstream t, qd;
  t << "# " << label << "\n# arrival_s ttft_ms (ok, measured requests)\n";
  std::vector<std::pair<double, int>> events;  // +1 at arrival, −1 when admitted to a batch
  bool any = false;
  for (const auto& r : records) {
    if (r.run != label) continue;
    const double admitted = r.scheduled_s >= 0.0 ? r.scheduled_s : r.first_token_s >= 0.0 ? r.first_token_s : r.end_s;
    events.emplace_back(r.arrival_s, +1);
    if (admitted >= 0.0) events.emplace_back(std::max(admitted, r.arrival_s), -1);
    if (r.warmup || r.status != RecordStatus::ok || r.first_token_s < 0.0) continue;
    const double ttft = (r.first_token_s - r.arrival_s) * 1000.0;
    t << dat(r.arrival_s) << " " << dat(ttft) << "\n";
    ttft_max_ms = std::max(ttft_max_ms, ttft);
    any = true;
  }
  if (!any) return false;
  std::sort(events.begin(), events.end());
  qd << "# " << label << "\n# time_s queued_requests (arrived, not yet admitted)\n";
  int depth = 0;
  const std::size_t stride = std::max<std::size_t>(1, (events.size() + 3999) / 4000);
  for (std::size_t i = 0; i < events.size(); ++i) {
    depth += events[i].second;
    if (i % stride == 0 || i + 1 == events.size()) qd << dat(events[i].first) << " " << depth << "\n";
  }
  write_file(plots / ("ttft_time_" + file + ".dat"), t.str());
  write_file(plots / ("queue_time_" + file + ".dat"), qd.str());
  return true;
}

namespace {

/// The records' labels of a run: its own, or every repetition's.
std::vector<std::string> run_labels(const RunSummary& r) {
  std::vector<std::string> out;
  for (int k = 1; k <= r.info.repeats; ++k) out.push_back(repetition_label(r.info.label, k, r.info.repeats));
  return out;
}

/// The rate of the CDFs: `wanted` when set, else the highest finite rate every strategy ran.
double pick_cdf_rate(const Summary& s, double wanted) {
  if (!std::isnan(wanted)) return wanted;
  double best = NAN;
  for (const auto& r : s.runs) {
    if (!std::isfinite(r.info.rate)) continue;
    bool everyone = true;
    for (const auto& name : s.strategies()) {
      bool has = false;
      for (const auto& o : s.runs) has = has || (o.info.strategy_name() == name && same_rate(o.info.rate, r.info.rate));
      everyone = everyone && has;
    }
    if (everyone && (std::isnan(best) || r.info.rate > best)) best = r.info.rate;
  }
  return best;
}

/// plots/cdf_<metric>_<strategy>.dat: ascending samples and their cumulative share (≤ 2000 points).
std::string cdf_data(const std::vector<double>& samples_in) {
  std::vector<double> xs = samples_in;
  std::sort(xs.begin(), xs.end());
  std::ostringstream d;
  d << "# latency_ms cumulative_share\n";
  const std::size_t n = xs.size();
  const std::size_t stride = std::max<std::size_t>(1, (n + 1999) / 2000);
  for (std::size_t i = 0; i < n; i += stride) d << dat(xs[i]) << " " << dat(static_cast<double>(i + 1) / n) << "\n";
  if (n > 0 && (n - 1) % stride != 0) d << dat(xs.back()) << " 1\n";
  return d.str();
}

std::string cdf_figure(const std::string& out, const std::string& title, const std::string& xlabel,
                       const std::vector<std::pair<std::string, std::string>>& lines) {
  std::ostringstream s;
  s << "reset\nset datafile missing 'NaN'\nset grid\nset key bottom right box opaque\n";
  s << "set output " << q(out) << "\nset title " << q(title) << "\n";
  s << "set xlabel " << q(xlabel) << "\nset ylabel 'share of samples'\nset yrange [0:1]\nset xrange [0:*]\nplot ";
  int lc = 1;
  for (const auto& [name, file] : lines) {
    s << (lc > 1 ? ", \\\n     " : "") << q(file) << " using 1:2 with steps lw 2 lc " << lc << " title " << q(name);
    ++lc;
  }
  s << "\n";
  return s.str();
}

std::string ttft_queue_figure(const std::string& out, const std::string& label, const std::string& file,
                              double slo_ms) {
  std::ostringstream s;
  s << "reset\nset datafile missing 'NaN'\nset grid\nset key below horizontal\n";
  s << "set output " << q(out) << "\nset title " << q("TTFT and queue length over time: " + label) << "\n";
  s << "set xlabel 'time since run start (s)'\nset ylabel 'TTFT (ms)'\nset y2label 'queued requests'\n"
       "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\n";
  s << "plot " << q("ttft_time_" + file + ".dat") << " using 1:2 with points pt 7 ps 0.6 lc 1 title 'TTFT at arrival' axes x1y1, \\\n"
    << "     " << q("queue_time_" + file + ".dat") << " using 1:2 with steps lw 1.5 lc 2 title 'queue length' axes x1y2";
  if (std::isfinite(slo_ms))  // only when the data come near it: a far line would flatten the points
    s << ", \\\n     " << dat(slo_ms) << " with lines lc rgb '#cc0000' dt 4 title " << q("TTFT SLO " + format_plain(slo_ms) + " ms")
      << " axes x1y1";
  s << "\n";
  return s.str();
}

}  // namespace

std::vector<Figure> latency_figures(const std::filesystem::path& plots, const Summary& summary,
                                    const std::vector<RequestRecord>& records, double cdf_rate,
                                    std::vector<std::string>& warnings) {
  std::vector<Figure> figures;
  auto add = [&](const std::string& base, const std::string& title, auto make) {
    figures.push_back({base, title, make(base + ".svg"), make(base + ".png")});
  };
  const auto strategies = summary.strategies();

  // CDFs: one run per strategy, at the chosen rate (or, without rates, the strategy's first run).
  const double rate = pick_cdf_rate(summary, cdf_rate);
  std::vector<std::pair<std::string, const RunSummary*>> at_rate;
  for (const auto& name : strategies) {
    const RunSummary* pick = nullptr;
    for (const auto& r : summary.runs)
      if (r.info.strategy_name() == name && (std::isnan(rate) ? !pick : same_rate(r.info.rate, rate))) pick = &r;
    if (pick) at_rate.emplace_back(name, pick);
  }
  if (!std::isnan(cdf_rate) && at_rate.empty())
    warnings.push_back("report.cdf_rate " + format_rate(cdf_rate) + ": no run at that rate; latency CDFs skipped");
  const std::string where = std::isnan(rate) ? std::string() : " at " + format_rate(rate) + " req/s";
  struct Which {
    const char* key;
    const char* title;
    std::vector<double> LatencySamples::*samples;
  };
  const Which which[] = {{"ttft", "TTFT", &LatencySamples::ttft_ms},
                         {"tpot", "TPOT", &LatencySamples::tpot_ms},
                         {"itl", "ITL", &LatencySamples::itl_ms},
                         {"e2e", "E2E latency", &LatencySamples::e2e_ms}};
  std::vector<LatencySamples> samples;
  for (const auto& [name, run] : at_rate) {
    LatencySamples pooled;
    for (const auto& label : run_labels(*run)) {
      LatencySamples one = latency_samples(label, records, summary.options.window);
      for (const auto& w : which) {
        auto& dst = pooled.*(w.samples);
        dst.insert(dst.end(), (one.*(w.samples)).begin(), (one.*(w.samples)).end());
      }
    }
    samples.push_back(std::move(pooled));
  }
  for (const auto& w : which) {
    std::vector<std::pair<std::string, std::string>> lines;
    for (std::size_t i = 0; i < at_rate.size(); ++i) {
      const auto& xs = samples[i].*(w.samples);
      if (xs.empty()) continue;
      const std::string file = std::string("cdf_") + w.key + "_" + slug(at_rate[i].first) + ".dat";
      write_file(plots / file, cdf_data(xs));
      lines.emplace_back(at_rate[i].first, file);
    }
    if (lines.empty()) continue;
    const std::string title = std::string(w.title) + " CDF" + where;
    add(std::string("cdf_") + w.key, title, [&](const std::string& o) {
      return cdf_figure(o, title, std::string(w.title) + " (ms)", lines);
    });
  }

  // TTFT and queue length over time, in each strategy's highest-rate run (its first repetition).
  for (const auto& name : strategies) {
    const RunSummary* top = nullptr;
    for (const auto& r : summary.runs)
      if (r.info.strategy_name() == name && (!top || (std::isfinite(r.info.rate) && r.info.rate > top->info.rate)))
        top = &r;
    if (!top) continue;
    const std::string label = repetition_label(top->info.label, 1, top->info.repeats);
    const std::string file = slug(name);
    double ttft_max = 0.0;
    if (!ttft_queue_data(plots, file, label, records, ttft_max)) continue;
    const double slo_line = ttft_max * 5 >= summary.slo.ttft_ms ? summary.slo.ttft_ms : NAN;
    add("ttft_queue_" + file, "TTFT and queue length over time: " + label,
        [&](const std::string& o) { return ttft_queue_figure(o, label, file, slo_line); });
  }

  // Goodput against rate, with each strategy's capacity marked.
  const auto caps = strategy_capacities(summary);
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& name : strategies) {
    std::vector<const RunSummary*> runs;
    for (const auto& r : summary.runs)
      if (r.info.strategy_name() == name && r.info.mode == RunMode::open) runs.push_back(&r);
    if (runs.empty()) continue;
    std::sort(runs.begin(), runs.end(), [](auto* a, auto* b) { return a->info.rate < b->info.rate; });
    std::ostringstream d;
    d << "# " << name << "\n# rate_req_s goodput_tok_s ci95_lo ci95_hi request_goodput_rps meets_slo\n";
    for (const RunSummary* r : runs) {
      const MetricStats* st = r->stat("goodput_tok_s");
      const double lo = st && std::isfinite(st->ci95_lo) ? st->ci95_lo : r->metrics.goodput;
      const double hi = st && std::isfinite(st->ci95_hi) ? st->ci95_hi : r->metrics.goodput;
      d << dat(r->info.rate) << " " << dat(r->metrics.goodput) << " " << dat(lo) << " " << dat(hi) << " "
        << dat(r->metrics.request_goodput) << " " << (r->metrics.meets_slo(summary.slo) ? 1 : 0) << "\n";
    }
    const std::string file = "goodput_" + slug(name) + ".dat";
    write_file(plots / file, d.str());
    lines.emplace_back(name, file);
  }
  if (!lines.empty()) {
    add("goodput_vs_rate", "Goodput vs request rate, capacity marked", [&](const std::string& o) {
      std::ostringstream s;
      s << "reset\nset datafile missing 'NaN'\nset grid\nset key top left box opaque\n";
      s << "set output " << q(o) << "\n";
      s << "set title " << q("Goodput vs request rate (bars: 95% CI over repeats; dotted: capacity at " +
                             format_share(summary.slo.attainment) + " SLO attainment)") << "\n";
      s << "set xlabel 'request rate (req/s)'\nset ylabel 'goodput (output tokens/s)'\nset yrange [0:*]\n";
      int lc = 1;
      for (const auto& [name, file] : lines) {
        double cap = NAN;
        for (const auto& [n, c] : caps)
          if (n == name) cap = c;
        if (std::isfinite(cap))
          s << "set arrow from " << dat(cap) << ", graph 0 to " << dat(cap) << ", graph 1 nohead dt 3 lw 2 lc " << lc
            << "\nset label " << q(name + " capacity " + format_rate(cap)) << " at " << dat(cap) << ", graph "
            << dat(0.95 - 0.06 * (lc - 1)) << " right offset -0.5,0 tc lt " << lc << "\n";
        ++lc;
      }
      s << "plot ";
      lc = 1;
      for (const auto& [name, file] : lines) {
        s << (lc > 1 ? ", \\\n     " : "") << q(file) << " using 1:2:3:4 with yerrorlines lw 2 pt 7 lc " << lc
          << " title " << q(name);
        ++lc;
      }
      s << "\n";
      return s.str();
    });
  }
  return figures;
}

}  // namespace plot_detail
}  // namespace servelab::analysis
