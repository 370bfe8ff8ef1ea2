#include "analysis/plots.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "analysis/plots_internal.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {

namespace fs = std::filesystem;

using plot_detail::dat;
using plot_detail::q;
using plot_detail::write_file;
using plot_detail::Figure;
using plot_detail::kSize;

/// The runs of one strategy: finite rates ascending (for the rate plots) and the highest-rate run.
struct StrategyRuns {
  std::string name;
  std::string file;  ///< slug for data file names
  std::vector<const RunSummary*> by_rate;
  const RunSummary* highest = nullptr;  ///< may have an infinite rate; closed/trace: the first run
};

/// A run's x on the rate plots: its offered rate, or for a closed-loop run (config.concurrency,
/// one point of a concurrency sweep) the rate it achieved (metrics.request_throughput).
double plot_rate(const RunSummary& r) {
  if (std::isfinite(r.info.rate) || !r.info.config.contains("concurrency")) return r.info.rate;
  return r.metrics.request_throughput > 0 ? r.metrics.request_throughput : r.info.rate;
}

std::vector<StrategyRuns> group_runs(const Summary& s) {
  std::vector<StrategyRuns> out;
  for (const auto& name : s.strategies()) {
    StrategyRuns g;
    g.name = name;
    g.file = slug(name);
    for (const auto& r : s.runs) {
      if (r.info.strategy_name() != name) continue;
      if (std::isfinite(plot_rate(r))) g.by_rate.push_back(&r);
      if (!std::isnan(r.info.rate) && (!g.highest || r.info.rate > g.highest->info.rate)) g.highest = &r;
    }
    if (!g.highest)  // closed loop or trace: no rate; the strategy's one run stands for it
      for (const auto& r : s.runs)
        if (!g.highest && r.info.strategy_name() == name) g.highest = &r;
    std::sort(g.by_rate.begin(), g.by_rate.end(),
              [](const RunSummary* a, const RunSummary* b) { return plot_rate(*a) < plot_rate(*b); });
    out.push_back(std::move(g));
  }
  return out;
}

/// Where `name` resolves to an executable, or "" when it does not.
std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string d;
  while (std::getline(ss, d, ':')) {
    const fs::path p = fs::path(d.empty() ? "." : d) / name;
    if (access(p.c_str(), X_OK) == 0 && !fs::is_directory(p)) return p.string();
  }
  return "";
}

/// Runs `exe script` in `cwd` with stdout and stderr to `log`; returns the exit status (-1 if it
/// could not start or was killed).
int run_in(const std::string& exe, const std::string& script, const fs::path& cwd, const fs::path& log) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (chdir(cwd.c_str()) != 0) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execl(exe.c_str(), exe.c_str(), script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string log_tail(const fs::path& log) {
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > 400) text = "..." + text.substr(text.size() - 400);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

/// One latency figure: p50 solid and p99 dashed per strategy, with the SLO as a horizontal line.
/// A log y axis where latency_log_scale says, so the curves stay readable.
std::string latency_figure(const std::vector<StrategyRuns>& groups, const std::string& out_name,
                           const std::string& title, const std::string& ylabel, int col_p50, double slo_ms,
                           const double (&data)[3]) {
  std::ostringstream s;
  s << "reset\nset datafile missing 'NaN'\nset grid\nset key top left box opaque\n";
  s << "set output " << q(out_name) << "\n";
  s << "set title " << q(title + " (solid: p50, dashed: p99)") << "\n";
  s << "set xlabel 'request rate (req/s)'\nset ylabel " << q(ylabel) << "\n";
  if (latency_log_scale(slo_ms, data[0], data[1], data[2]))
    s << "set logscale y\n";
  else
    s << "set yrange [0:*]\n";
  s << "plot ";
  int lc = 1;
  for (const auto& g : groups) {
    if (g.by_rate.empty()) continue;
    const std::string f = q("rate_" + g.file + ".dat");
    s << f << " using 1:" << col_p50 << " with linespoints lc " << lc << " lw 2 pt 7 dt 1 title "
      << q(g.name + " p50") << ", \\\n     " << f << " using 1:" << col_p50 + 1 << " with linespoints lc "
      << lc << " lw 2 pt 6 dt 2 title " << q(g.name + " p99") << ", \\\n     ";
    ++lc;
  }
  s << dat(slo_ms) << " with lines lc rgb '#cc0000' lw 1.5 dt 4 title "
    << q("SLO " + format_plain(slo_ms) + " ms") << "\n";
  return s.str();
}

std::string throughput_figure(const std::vector<StrategyRuns>& groups, const std::string& out_name) {
  std::ostringstream s;
  s << "reset\nset datafile missing 'NaN'\nset grid\nset key top left box opaque\n";
  s << "set output " << q(out_name) << "\n";
  s << "set title 'Output throughput (solid) and goodput (dashed) vs request rate'\n";
  s << "set xlabel 'request rate (req/s)'\nset ylabel 'output tokens/s'\nset yrange [0:*]\nplot ";
  int lc = 1;
  bool first = true;
  for (const auto& g : groups) {
    if (g.by_rate.empty()) continue;
    const std::string f = q("rate_" + g.file + ".dat");
    s << (first ? "" : ", \\\n     ") << f << " using 1:6 with linespoints lc " << lc
      << " lw 2 pt 7 dt 1 title " << q(g.name + " throughput") << ", \\\n     " << f
      << " using 1:7 with linespoints lc " << lc << " lw 2 pt 6 dt 2 title " << q(g.name + " goodput");
    first = false;
    ++lc;
  }
  s << "\n";
  return s.str();
}

std::string breakdown_figure(const std::string& out_name) {
  std::ostringstream s;
  s << "reset\nset datafile missing 'NaN'\nset grid ytics\n";
  s << "set output " << q(out_name) << "\n";
  s << "set title 'KV arena breakdown at each strategy''s highest rate (mean over steps)'\n";
  s << "set style data histograms\nset style histogram rowstacked\n"
       "set style fill solid 0.85 border -1\nset boxwidth 0.6\n"
       "set xlabel 'strategy @ rate (req/s)'\nset ylabel 'share of KV arena (%)'\n"
       "set yrange [0:100]\nset key outside right top\nset xtics rotate by -20 left\n";
  s << "plot 'kv_breakdown.dat' using 2:xtic(1) title 'stored' lc rgb '#2e7d32', \\\n"
       "     '' using 3 title 'reserved' lc rgb '#f9a825', \\\n"
       "     '' using 4 title 'internal frag' lc rgb '#ef6c00', \\\n"
       "     '' using 5 title 'external frag' lc rgb '#c62828', \\\n"
       "     '' using 6 title 'free' lc rgb '#b0bec5'\n";
  return s.str();
}

std::string timeline_figure(const StrategyRuns& g, const std::string& out_name) {
  std::ostringstream s;
  const std::string f = q("timeline_" + g.file + ".dat");
  s << "reset\nset datafile missing 'NaN'\nset grid\nset key below horizontal\n";
  s << "set output " << q(out_name) << "\n";
  s << "set title " << q("Batch size and KV use over time: " + g.highest->info.label) << "\n";
  s << "set xlabel 'time since run start (s)'\nset ylabel 'batch size (requests)'\n"
       "set y2label 'KV arena (% of capacity)'\nset ytics nomirror\nset y2tics\n"
       "set yrange [0:*]\nset y2range [0:100]\n";
  s << "plot " << f << " using 1:2 with steps lw 2 lc 1 title 'batch size' axes x1y1, \\\n     " << f
    << " using 1:3 with lines lw 1.5 lc 2 title 'KV arena in use (%)' axes x1y2, \\\n     " << f
    << " using 1:4 with lines lw 1.5 lc 3 dt 2 title 'KV utilization (%)' axes x1y2\n";
  return s.str();
}

}  // namespace

std::string slug(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "_" : out;
}

bool gnuplot_available(const std::string& gnuplot) { return !find_executable(gnuplot).empty(); }

bool latency_log_scale(double slo_ms, double p50_min, double p50_max, double p99_max) {
  if (!(p99_max > 0)) return false;
  return slo_ms > 5.0 * p99_max || (p50_min > 0 && p50_max > 100.0 * p50_min);
}

namespace {

/// What write_rate_data found: whether any strategy has finite-rate runs, the p99 maxima and the
/// range of the positive p50s.
struct RateData {
  bool any = false;
  double ttft_max = 0.0;
  double tpot_max = 0.0;
  double ttft_p50[2] = {0.0, 0.0};  ///< smallest positive, largest
  double tpot_p50[2] = {0.0, 0.0};
};

void widen(double (&range)[2], double v) {
  if (!std::isfinite(v) || v <= 0) return;
  if (range[0] == 0.0 || v < range[0]) range[0] = v;
  range[1] = std::max(range[1], v);
}

/// plots/rate_<strategy>.dat: one line per finite-rate run, rate ascending.
RateData write_rate_data(const fs::path& plots, const std::vector<StrategyRuns>& groups) {
  RateData out;
  for (const auto& g : groups) {
    if (g.by_rate.empty()) continue;
    out.any = true;
    std::ostringstream d;
    d << "# " << g.name
      << "\n# rate_req_s ttft_p50_ms ttft_p99_ms tpot_p50_ms tpot_p99_ms "
         "output_tok_s goodput_tok_s\n";
    for (const RunSummary* r : g.by_rate) {
      const auto& m = r->metrics;
      d << dat(plot_rate(*r)) << " " << dat(m.ttft_ms.p50) << " " << dat(m.ttft_ms.p99) << " "
        << dat(m.tpot_ms.p50) << " " << dat(m.tpot_ms.p99) << " " << dat(m.output_throughput) << " "
        << dat(m.goodput) << "\n";
      if (std::isfinite(m.ttft_ms.p99)) out.ttft_max = std::max(out.ttft_max, m.ttft_ms.p99);
      if (std::isfinite(m.tpot_ms.p99)) out.tpot_max = std::max(out.tpot_max, m.tpot_ms.p99);
      widen(out.ttft_p50, m.ttft_ms.p50);
      widen(out.tpot_p50, m.tpot_ms.p50);
    }
    write_file(plots / ("rate_" + g.file + ".dat"), d.str());
  }
  return out;
}

/// plots/timeline_<strategy>.dat from the steps of the strategy's highest-rate run (at most 4000
/// points); false when that run has no steps.
bool write_timeline_data(const fs::path& plots, const StrategyRuns& g, const std::vector<StepRecord>& steps) {
  std::vector<const StepRecord*> run_steps;
  for (const auto& s : steps)
    if (s.run == repetition_label(g.highest->info.label, 1, g.highest->info.repeats)) run_steps.push_back(&s);
  if (run_steps.empty()) return false;
  std::stable_sort(run_steps.begin(), run_steps.end(),
                   [](const StepRecord* a, const StepRecord* b) { return a->start_s < b->start_s; });
  const std::size_t stride = (run_steps.size() + 3999) / 4000;  // ≤ 4000 points per line
  std::ostringstream t;
  t << "# " << repetition_label(g.highest->info.label, 1, g.highest->info.repeats) << "\n# start_s batch_size kv_in_use_pct kv_utilization_pct\n";
  for (std::size_t i = 0; i < run_steps.size(); i += stride) {
    const StepRecord& s = *run_steps[i];
    const double used = static_cast<double>(s.kv_stored + s.kv_reserved + s.kv_internal_frag);
    const double use_pct = s.kv_capacity > 0 ? used * 100.0 / static_cast<double>(s.kv_capacity) : NAN;
    const double util_pct = used > 0 ? s.kv_utilization() * 100.0 : NAN;
    t << dat(s.start_s) << " " << s.batch_size << " " << dat(use_pct) << " " << dat(util_pct) << "\n";
  }
  write_file(plots / ("timeline_" + g.file + ".dat"), t.str());
  return true;
}

/// plots/kv_breakdown.dat (one bar per strategy at its highest rate) and the timelines; returns
/// whether any bar was written and appends the strategies that got a timeline.
bool write_kv_data(const fs::path& plots, const std::vector<StrategyRuns>& groups,
                   const std::vector<StepRecord>& steps, std::vector<const StrategyRuns*>& timelines) {
  std::ostringstream bars;
  bars << "# strategy@rate stored reserved internal_frag external_frag free (% of arena, mean over steps)\n";
  bool have_bars = false;
  for (const auto& g : groups) {
    if (!g.highest || g.highest->metrics.kv.n_steps == 0) continue;
    const auto& b = g.highest->metrics.kv.breakdown;
    if (!std::isnan(b.stored)) {
      std::string name = g.name + " @ " + format_run_rate(g.highest->info);
      std::replace(name.begin(), name.end(), '"', '\'');
      bars << "\"" << name << "\" " << dat(b.stored * 100) << " " << dat(b.reserved * 100) << " "
           << dat(b.internal_frag * 100) << " " << dat(b.external_frag * 100) << " " << dat(b.free * 100)
           << "\n";
      have_bars = true;
    }
    if (write_timeline_data(plots, g, steps)) timelines.push_back(&g);
  }
  if (have_bars) write_file(plots / "kv_breakdown.dat", bars.str());
  return have_bars;
}

/// plots.gp: every figure as SVG, then as PNG when gnuplot has a PNG terminal.
std::string gnuplot_script(const std::vector<Figure>& figures) {
  std::ostringstream script;
  script << "# Generated by servelab report. Re-draw with: cd plots && gnuplot plots.gp\n";
  script << "set terminal svg " << kSize << " noenhanced font 'Sans,12' background rgb 'white'\n";
  for (const auto& f : figures) script << f.body_svg;
  script << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
         << "set terminal pngcairo " << kSize << " noenhanced font 'Sans,11' background rgb 'white'\n";
  for (const auto& f : figures) script << f.body_png;
  script << "} else { if (strstrt(GPVAL_TERMINALS, 'png') > 0) {\n"
         << "set terminal png " << kSize << " noenhanced background rgb 'white'\n";
  for (const auto& f : figures) script << f.body_png;
  script << "} }\nunset output\n";
  return script.str();
}

}  // namespace

PlotResult write_plots(const std::string& dir, const Summary& summary, const std::vector<RequestRecord>& records,
                       const std::vector<StepRecord>& steps, const PlotOptions& options,
                       const std::vector<ServerSample>& server) {
  PlotResult result;
  const std::string exe = find_executable(options.gnuplot);
  if (exe.empty()) {
    result.warnings.push_back("gnuplot not found (" + options.gnuplot +
                              "): plots skipped; install gnuplot to get them");
    return result;
  }
  const fs::path plots = fs::path(dir) / "plots";
  std::error_code ec;
  fs::create_directories(plots, ec);
  if (ec) {
    result.warnings.push_back(plots.string() + ": cannot create (" + ec.message() + "): plots skipped");
    return result;
  }
  const auto groups = group_runs(summary);
  const RateData rates = write_rate_data(plots, groups);
  std::vector<const StrategyRuns*> timelines;
  const bool have_bars = write_kv_data(plots, groups, steps, timelines);

  std::vector<Figure> figures;
  auto add = [&](const std::string& base, const std::string& title, auto make) {
    figures.push_back({base, title, make(base + ".svg"), make(base + ".png")});
  };
  if (rates.any) {
    add("ttft_vs_rate", "TTFT vs request rate", [&](const std::string& o) {
      return latency_figure(groups, o, "TTFT vs request rate", "time to first token (ms)", 2,
                            summary.slo.ttft_ms, {rates.ttft_p50[0], rates.ttft_p50[1], rates.ttft_max});
    });
    add("tpot_vs_rate", "TPOT vs request rate", [&](const std::string& o) {
      return latency_figure(groups, o, "TPOT vs request rate", "time per output token (ms)", 4,
                            summary.slo.tpot_ms, {rates.tpot_p50[0], rates.tpot_p50[1], rates.tpot_max});
    });
    add("throughput_vs_rate", "Output throughput and goodput vs request rate",
        [&](const std::string& o) { return throughput_figure(groups, o); });
  }
  if (have_bars)
    add("kv_breakdown", "KV arena breakdown at the highest rate",
        [&](const std::string& o) { return breakdown_figure(o); });
  for (const StrategyRuns* g : timelines)
    add("timeline_" + g->file, "Batch size and KV use over time: " + g->highest->info.label,
        [&](const std::string& o) { return timeline_figure(*g, o); });
  // Latency CDFs at one rate, TTFT and queue length over time, goodput with capacity marked.
  for (auto& f : plot_detail::latency_figures(plots, summary, records, options.cdf_rate, result.warnings))
    figures.push_back(std::move(f));
  for (auto& f : plot_detail::server_state_figures(plots, summary, records, steps, server))
    figures.push_back(std::move(f));
  if (figures.empty()) {
    result.warnings.push_back("no run has data to plot: plots skipped");
    return result;
  }
  write_file(plots / "plots.gp", gnuplot_script(figures));
  for (const auto& f : figures) {  // stale figures from an earlier render must not survive
    fs::remove(plots / (f.base + ".svg"), ec);
    fs::remove(plots / (f.base + ".png"), ec);
  }

  const int rc = run_in(exe, "plots.gp", plots, plots / "gnuplot.log");
  if (rc != 0)
    result.warnings.push_back("gnuplot exited with status " + std::to_string(rc) + " (see " +
                              (plots / "gnuplot.log").string() + "): " + log_tail(plots / "gnuplot.log"));
  for (const auto& f : figures) {
    if (!fs::exists(plots / (f.base + ".svg"))) continue;
    PlotFile pf{f.title, "plots/" + f.base + ".svg", ""};
    if (fs::exists(plots / (f.base + ".png"))) pf.png = "plots/" + f.base + ".png";
    result.files.push_back(pf);
  }
  return result;
}

}  // namespace servelab::analysis
