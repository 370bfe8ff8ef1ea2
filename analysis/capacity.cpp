#include "analysis/capacity.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "analysis/metrics.h"
#include "analysis/plots.h"

namespace servelab::analysis {

namespace {

void require(bool ok, const std::string& field, const std::string& rule, double got) {
  if (!ok) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", got);
    throw std::invalid_argument(field + " must be " + rule + " (got " + buf + ")");
  }
}

/// "8", "0.0625", "4.4e+12": the rate as a reader wants it (6 significant digits).
std::string format_rate_text(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", rate);
  return buf;
}

}  // namespace

void BisectionOptions::validate() const {
  require(target > 0 && target <= 1, "capacity target attainment", "in (0, 1]", target);
  require(rate_lo >= 0, "capacity.rate_lo", ">= 0", rate_lo);
  require(rate_hi >= 0, "capacity.rate_hi", ">= 0", rate_hi);
  require(rate_hi == 0 || rate_hi > rate_lo, "capacity.rate_hi", "> rate_lo", rate_hi);
  require(precision >= 0, "capacity.precision", ">= 0", precision);
  require(precision_pct >= 0 && precision_pct < 100, "capacity.precision_pct", "in [0, 100)", precision_pct);
  require(precision > 0 || precision_pct > 0, "capacity.precision or precision_pct", "> 0", 0);
  require(max_probes >= 2 && max_probes <= 1000, "capacity.max_probes", "in [2, 1000]", max_probes);
}

CapacityProbe probe_from_metrics(double rate, const RunMetrics& m, double wall_s) {
  CapacityProbe p;
  p.rate = rate;
  p.slo_attainment = m.slo_attainment;
  p.objectives_met = m.slo_percentiles_met();
  p.n_requests = static_cast<int>(m.n_requests);
  p.request_throughput = m.request_throughput;
  p.output_throughput = m.output_throughput;
  p.goodput = m.goodput;
  p.ttft_p50_ms = m.ttft_ms.p50;
  p.ttft_p99_ms = m.ttft_ms.p99;
  p.tpot_p50_ms = m.tpot_ms.p50;
  p.tpot_p99_ms = m.tpot_ms.p99;
  p.run_s = m.window_end_s;
  p.wall_s = wall_s;
  return p;
}

CapacityProbe probe_from_runs(double rate, const std::vector<RunMetrics>& runs, double wall_s) {
  if (runs.empty()) throw std::invalid_argument("probe_from_runs: no runs");
  if (runs.size() == 1) return probe_from_metrics(rate, runs[0], wall_s);
  CapacityProbe p = probe_from_metrics(rate, mean_metrics(runs), wall_s);
  p.repeats = static_cast<int>(runs.size());
  for (const RunMetrics& m : runs) p.attainment_runs.push_back(m.slo_attainment);
  p.attainment_stats = stats_of(p.attainment_runs);
  return p;
}

double BisectionOptions::tolerance(double lo) const { return std::max(precision, precision_pct / 100.0 * lo); }

StrategyCapacity find_capacity(const std::string& strategy, const std::function<CapacityProbe(double)>& probe,
                               const BisectionOptions& o) {
  o.validate();
  StrategyCapacity c;
  c.strategy = strategy;
  double ok = 0.0, bad = 0.0;  // highest meeting, lowest missing (0 = none yet)
  auto run = [&](double rate) {
    CapacityProbe p = probe(rate);
    p.rate = rate;
    const double judged = o.decide_on_ci95_lo && p.repeats > 1 ? p.attainment_stats.ci95_lo : p.slo_attainment;
    p.meets = judged >= o.target && p.objectives_met;  // per-run percentile objectives too
    c.probes.push_back(p);
    if (p.meets) {
      if (rate > ok) {
        ok = rate;
        c.at_capacity = p;
      }
    } else if (bad == 0.0 || rate < bad) {
      bad = rate;
    }
    return p.meets;
  };
  auto budget_left = [&] { return static_cast<int>(c.probes.size()) < o.max_probes; };

  double r = o.rate_lo > 0 ? o.rate_lo : (o.rate_hi > 0 ? o.rate_hi / 8.0 : 1.0);
  if (run(r)) {
    if (o.rate_hi > 0 && budget_left()) run(o.rate_hi);
    // Double until one misses, up to kMaxProbeRate: a rate no server reaches means the probes
    // are too short to load it (every request done before the next is due), not a capacity.
    for (r = std::max(r, ok); bad == 0.0 && budget_left() && r < kMaxProbeRate;) run(r *= 2.0);
    if (bad == 0.0)
      c.note = "not bracketed: >= " + format_rate_text(ok) + " req/s (every probed rate met the target; raise "
               "capacity.rate_hi, capacity.max_probes or capacity.n_requests)";
  } else {
    for (; ok == 0.0 && budget_left() && r > 1e-6;) run(r /= 2.0);  // halve until one meets
    if (ok == 0.0)
      c.note = "below the lowest probe: < " + format_rate_text(r) + " req/s (no probed rate met the target)";
  }
  while (ok > 0.0 && bad > 0.0 && bad - ok > o.tolerance(ok) && budget_left()) {
    // A probe that contradicts monotonicity (a lower rate missing) can leave bad below ok.
    if (bad < ok) {
      c.note = "attainment is not monotone in the rate near " + std::to_string(bad) + " req/s";
      break;
    }
    // The midpoint to 6 significant digits, so run labels read "static@0.0359375", not "...0004".
    const double mid = 0.5 * (ok + bad);
    const double unit = std::pow(10.0, std::floor(std::log10(mid)) - 5);
    double rounded = std::round(mid / unit) * unit;
    if (!(rounded > ok && rounded < bad)) rounded = mid;
    run(rounded);
  }
  if (ok > 0.0 && bad > 0.0 && bad - ok > o.tolerance(ok) && c.note.empty())
    c.note = "stopped after " + std::to_string(o.max_probes) + " probes";
  // A capacity needs both ends: the highest rate meeting the target below a rate missing it.
  // Without a missing rate, ok is only a lower bound; reported as such, never as the capacity.
  c.found = ok > 0.0 && bad > 0.0;
  c.lower_bound = bad == 0.0 ? ok : 0.0;
  c.capacity = c.found ? ok : 0.0;
  c.failing_rate = bad;
  c.precision = (ok > 0.0 && bad > ok) ? bad - ok : 0.0;
  return c;
}

void plan_deployment(StrategyCapacity& c, double target_rate, int gpus_per_replica, double gpu_hour_usd) {
  c.replicas = c.gpus = 0;
  c.usd_per_m_output_tokens = c.requests_per_usd = c.fleet_usd_per_hour = 0.0;
  c.target_rate = target_rate;
  c.gpus_per_replica = gpus_per_replica;
  c.gpu_hour_usd = gpu_hour_usd;
  if (!c.found) return;
  if (target_rate > 0) {
    c.replicas = static_cast<int>(std::ceil(target_rate / c.capacity - 1e-12));
    c.gpus = c.replicas * gpus_per_replica;
    c.fleet_usd_per_hour = c.gpus * gpu_hour_usd;
  }
  if (gpu_hour_usd > 0) {
    const double usd_per_hour = gpu_hour_usd * gpus_per_replica;
    const CapacityProbe& p = c.at_capacity;
    c.usd_per_m_output_tokens = p.output_throughput > 0 ? usd_per_hour / (p.output_throughput * 3600.0) * 1e6 : 0.0;
    c.requests_per_usd = p.request_throughput * 3600.0 / usd_per_hour;
  }
}

std::string capacity_table(const std::vector<StrategyCapacity>& results, double target) {
  std::ostringstream out;
  char line[320];
  std::snprintf(line, sizeof line, "capacity at SLO attainment >= %.0f%%\n", target * 100.0);
  out << line;
  std::snprintf(line, sizeof line, "%-22s %10s %10s %8s %10s %10s %9s %6s %10s %10s\n", "strategy", "capacity",
                "+-", "attain", "out_tok/s", "ttft_p99", "tpot_p99", "GPUs", "$/1M_out", "req/$");
  out << line;
  for (const StrategyCapacity& c : results) {
    if (!c.found) {
      std::snprintf(line, sizeof line, "%-22s %10s  %s\n", c.strategy.c_str(), "-", c.note.c_str());
      out << line;
      continue;
    }
    const CapacityProbe& p = c.at_capacity;
    char gpus[16] = "-", usd[32] = "-", rpd[32] = "-";
    if (c.replicas > 0) std::snprintf(gpus, sizeof gpus, "%d", c.gpus);
    if (c.gpu_hour_usd > 0) {
      std::snprintf(usd, sizeof usd, "%.3f", c.usd_per_m_output_tokens);
      std::snprintf(rpd, sizeof rpd, "%.0f", c.requests_per_usd);
    }
    std::snprintf(line, sizeof line, "%-22s %10.3f %10.3f %7.1f%% %10.1f %10.1f %9.1f %6s %10s %10s\n",
                  c.strategy.c_str(), c.capacity, c.precision, p.slo_attainment * 100.0, p.output_throughput,
                  p.ttft_p99_ms, p.tpot_p99_ms, gpus, usd, rpd);
    out << line;
  }
  for (const StrategyCapacity& c : results) {
    if (c.found && c.target_rate > 0) {
      std::snprintf(line, sizeof line, "%s: %.6g req/s needs %d replica(s) x %d GPU = %d GPU(s)", c.strategy.c_str(),
                    c.target_rate, c.replicas, c.gpus_per_replica, c.gpus);
      out << line;
      if (c.gpu_hour_usd > 0) {
        std::snprintf(line, sizeof line, ", $%.2f/hour", c.fleet_usd_per_hour);
        out << line;
      }
      out << "\n";
    }
    if (!c.note.empty() && c.found) out << c.strategy << ": note: " << c.note << "\n";
  }
  for (const StrategyCapacity& c : results) {
    if (c.step_cost_margin <= 0) continue;
    std::snprintf(line, sizeof line, "%s: with every step %.3g%% slower (capacity.step_cost_margin): ", c.strategy.c_str(),
                  c.step_cost_margin * 100.0);
    out << line;
    if (!c.found_at_margin) {
      out << "not found\n";
    } else if (c.found && c.capacity > 0) {
      std::snprintf(line, sizeof line, "%.3f req/s (%+.1f%%)\n", c.capacity_at_margin,
                    100.0 * (c.capacity_at_margin / c.capacity - 1.0));
      out << line;
    } else {
      std::snprintf(line, sizeof line, "%.3f req/s\n", c.capacity_at_margin);
      out << line;
    }
  }
  // With workload.repeat, each probe's runs and the range of their attainments (min-max).
  bool repeated = false;
  for (const StrategyCapacity& c : results)
    for (const CapacityProbe& p : c.probes) repeated = repeated || p.repeats > 1;
  out << "\nprobes (in order" << (repeated ? "; attain = the mean over the probe's runs" : "") << "):\n";
  std::snprintf(line, sizeof line, "%-22s %4s %10s %8s %5s %10s %10s %10s %9s %9s", "strategy", "#", "rate",
                "attain", "meets", "out_tok/s", "ttft_p50", "ttft_p99", "tpot_p99", "wall_s");
  out << line << (repeated ? "  runs  attain_range\n" : "\n");
  for (const StrategyCapacity& c : results)
    for (size_t i = 0; i < c.probes.size(); ++i) {
      const CapacityProbe& p = c.probes[i];
      std::snprintf(line, sizeof line, "%-22s %4zu %10.4g %7.1f%% %5s %10.1f %10.1f %10.1f %9.1f %9.2f",
                    c.strategy.c_str(), i + 1, p.rate, p.slo_attainment * 100.0, p.meets ? "yes" : "no",
                    p.output_throughput, p.ttft_p50_ms, p.ttft_p99_ms, p.tpot_p99_ms, p.wall_s);
      out << line;
      if (repeated && p.repeats > 1) {
        std::snprintf(line, sizeof line, "  %4d  %.1f-%.1f%%\n", p.repeats, p.attainment_stats.min * 100.0,
                      p.attainment_stats.max * 100.0);
        out << line;
      } else {
        out << (repeated ? "     1\n" : "\n");
      }
    }
  return out.str();
}

namespace {

nlohmann::ordered_json probe_json(const CapacityProbe& p) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr); };
  return {{"rate", p.rate},
          {"slo_attainment", num(p.slo_attainment)},
          {"meets", p.meets},
          {"n_requests", p.n_requests},
          {"request_throughput", num(p.request_throughput)},
          {"output_throughput", num(p.output_throughput)},
          {"goodput", num(p.goodput)},
          {"ttft_p50_ms", num(p.ttft_p50_ms)},
          {"ttft_p99_ms", num(p.ttft_p99_ms)},
          {"tpot_p50_ms", num(p.tpot_p50_ms)},
          {"tpot_p99_ms", num(p.tpot_p99_ms)},
          {"run_s", num(p.run_s)},
          {"wall_s", num(p.wall_s)},
          {"repeats", p.repeats},
          {"attainment_runs", p.repeats > 1 ? nlohmann::ordered_json(p.attainment_runs) : nlohmann::ordered_json(nullptr)},
          {"attainment_stats", p.repeats > 1 ? nlohmann::ordered_json(p.attainment_stats) : nlohmann::ordered_json(nullptr)}};
}

}  // namespace

nlohmann::ordered_json capacity_json(const std::vector<StrategyCapacity>& results, double target,
                                     const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json j;
  j["schema"] = "servelab.capacity/1";
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  j["target_attainment"] = target;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const StrategyCapacity& c : results) {
    nlohmann::ordered_json s;
    s["strategy"] = c.strategy;
    s["found"] = c.found;
    s["capacity_rps"] = c.found ? nlohmann::ordered_json(c.capacity) : nlohmann::ordered_json(nullptr);
    s["lower_bound_rps"] = c.lower_bound > 0 ? nlohmann::ordered_json(c.lower_bound) : nlohmann::ordered_json(nullptr);
    s["failing_rps"] = c.failing_rate > 0 ? nlohmann::ordered_json(c.failing_rate) : nlohmann::ordered_json(nullptr);
    s["precision_rps"] = c.precision;
    s["note"] = c.note;
    s["at_capacity"] = c.found ? probe_json(c.at_capacity) : nlohmann::ordered_json(nullptr);
    if (c.step_cost_margin > 0)
      s["step_cost_margin"] = {{"margin", c.step_cost_margin},
                               {"found", c.found_at_margin},
                               {"capacity_rps", c.found_at_margin ? nlohmann::ordered_json(c.capacity_at_margin)
                                                                  : nlohmann::ordered_json(nullptr)}};
    s["deployment"] = {{"target_rate", c.target_rate},
                       {"gpus_per_replica", c.gpus_per_replica},
                       {"replicas", c.replicas},
                       {"gpus", c.gpus},
                       {"gpu_hour_usd", c.gpu_hour_usd},
                       {"usd_per_million_output_tokens", c.usd_per_m_output_tokens},
                       {"requests_per_usd", c.requests_per_usd},
                       {"fleet_usd_per_hour", c.fleet_usd_per_hour}};
    nlohmann::ordered_json probes = nlohmann::ordered_json::array();
    for (const CapacityProbe& p : c.probes) probes.push_back(probe_json(p));
    s["probes"] = std::move(probes);
    list.push_back(std::move(s));
  }
  j["strategies"] = std::move(list);
  return j;
}

std::vector<std::string> write_capacity_plot(const std::string& dir, const std::vector<StrategyCapacity>& results,
                                             double target) {
  namespace fs = std::filesystem;
  std::vector<std::string> warnings;
  if (!gnuplot_available()) return {"gnuplot not found: the capacity plot was skipped"};
  const fs::path plots = fs::path(dir) / "plots";
  std::error_code ec;
  fs::create_directories(plots, ec);
  std::ostringstream script, marks;
  script << "# Generated by servelab capacity. Re-draw with: cd plots && gnuplot capacity.gp\n"
         << "set datafile missing 'NaN'\nset key outside right\nset grid\n"
         << "set xlabel 'request rate (req/s)'\nset ylabel 'SLO attainment (%)'\nset yrange [0:105]\n"

         << "set title 'SLO attainment vs request rate (target " << target * 100.0 << "%)'\n";
  // The x range padded by 3% each side: the end probes (and their error bars) clear the frame, and
  // the target line spans it.
  double lo = 0, hi = 0;
  bool any = false;
  for (const StrategyCapacity& c : results)
    for (const CapacityProbe& p : c.probes) {
      lo = any ? std::min(lo, p.rate) : p.rate;
      hi = any ? std::max(hi, p.rate) : p.rate;
      any = true;
    }
  if (any && hi > lo) script << "set xrange [" << lo - 0.03 * (hi - lo) << ":" << hi + 0.03 * (hi - lo) << "]\n";
  std::string plot_cmd = "plot " + std::to_string(target * 100.0) + " with lines dt 2 lc rgb 'red' title 'target'";
  for (size_t i = 0; i < results.size(); ++i) {
    const StrategyCapacity& c = results[i];
    std::vector<CapacityProbe> sorted = c.probes;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.rate < b.rate; });
    const std::string file = "capacity_" + slug(c.strategy) + ".dat";
    std::ofstream dat(plots / file);
    // With workload.repeat, each probe's runs span [min, max] around the mean: drawn as error bars.
    dat << "# rate slo_attainment_pct min_run_pct max_run_pct\n";
    bool repeated = false;
    for (const CapacityProbe& p : sorted) {
      const bool r = p.repeats > 1;
      repeated = repeated || r;
      dat << p.rate << " " << p.slo_attainment * 100.0 << " " << (r ? p.attainment_stats.min : p.slo_attainment) * 100.0
          << " " << (r ? p.attainment_stats.max : p.slo_attainment) * 100.0 << "\n";
    }
    plot_cmd += ", '" + file + "' using 1:2 with linespoints lt " + std::to_string(i + 1) + " title '" + c.strategy + "'";
    if (repeated)
      plot_cmd += ", '" + file + "' using 1:2:3:4 with yerrorbars lt " + std::to_string(i + 1) + " pt 0 title '" +
                  c.strategy + ": runs (min-max)'";
    if (c.found) {
      marks << "set arrow from " << c.capacity << ",0 to " << c.capacity << "," << c.at_capacity.slo_attainment * 100.0
            << " nohead dt 3 lt " << i + 1 << "\n";
      marks << "set label '" << c.strategy << ": " << c.capacity << " req/s' at " << c.capacity << ","
            << 5 + 6 * static_cast<int>(i) << " left offset 0.5,0\n";
    }
  }
  script << marks.str();
  script << "set terminal svg size 900,540 noenhanced font 'Sans,12' background rgb 'white'\n"
         << "set output 'capacity.svg'\n" << plot_cmd << "\n"
         << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
         << "set terminal pngcairo size 900,540 noenhanced font 'Sans,11' background rgb 'white'\n"
         << "set output 'capacity.png'\n" << plot_cmd << "\n}\nunset output\n";
  std::ofstream(plots / "capacity.gp") << script.str();
  const pid_t pid = fork();
  if (pid < 0) return {"could not start gnuplot: the capacity plot was skipped"};
  if (pid == 0) {
    if (chdir(plots.c_str()) != 0) _exit(127);
    const int fd = open("capacity.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execlp("gnuplot", "gnuplot", "capacity.gp", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) break;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::exists(plots / "capacity.svg"))
    warnings.push_back("gnuplot failed on " + (plots / "capacity.gp").string() + " (see capacity.log)");
  return warnings;
}

}  // namespace servelab::analysis
