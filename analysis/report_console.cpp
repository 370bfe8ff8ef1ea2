// Console output: the runs table, a terminal chart of a latency vs rate, gate verdicts.
#include <algorithm>
#include <cmath>
#include <ostream>

#include "analysis/report.h"
#include "analysis/report_table.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {

std::string metric_title(const std::string& metric) {
  const auto dot = metric.find('.');
  const std::string base = metric.substr(0, dot);
  const std::string stat = dot == std::string::npos ? "" : metric.substr(dot + 1) + " ";
  if (base == "ttft_ms") return stat + "TTFT (ms)";
  if (base == "tpot_ms") return stat + "TPOT (ms)";
  if (base == "itl_ms") return stat + "ITL (ms)";
  if (base == "e2e_ms") return stat + "E2E latency (ms)";
  if (base == "output_throughput" || base == "goodput") return base + " (tokens/s)";
  return metric;
}

}  // namespace

void print_console_summary(std::ostream& out, const Summary& s) {
  TextTable t(run_table_header(/*compact=*/true));
  for (const RunSummary* r : table_order(s)) t.add_row(run_table_cells(*r));
  t.print(out);
  out << "rate in req/s; TTFT, queue, prefill, TPOT, ITL, E2E in ms (TTFT = queue + prefill); throughput and goodput in output tokens/s; "
         "SLO TTFT <= "
      << format_plain(s.slo.ttft_ms) << " ms, TPOT <= " << format_plain(s.slo.tpot_ms) << " ms\n";
  const auto lines = method_lines(s);  // the first restates the SLO said above
  for (std::size_t i = 1; i < lines.size(); ++i) out << lines[i] << "\n";
  for (const RunSummary* r : table_order(s)) {  // roofline efficiency, one line a real run
    if (!r->roofline) continue;
    const RooflineEfficiency& e = *r->roofline;
    out << "roofline efficiency " << r->info.label << ": " << format_efficiency(r->roofline, r->info.backend);
    for (StepClass c : {StepClass::prefill, StepClass::decode, StepClass::mixed})
      if (e.of(c).n_steps > 0) out << ", " << to_string(c) << " " << format_number(e.of(c).efficiency());
    out << " (" << e.overall.n_steps << " steps)";
    if (e.host_pauses.n_over_1ms > 0) out << "; host pauses between steps " << format_host_pauses(e.host_pauses);
    out << "\n";
  }
  for (const RunSummary* r : table_order(s)) {  // structured output: validity and cost, one line a run
    if (!r->structured) continue;
    const StructuredStats& st = *r->structured;
    out << "structured output " << r->info.label << ": " << st.n_valid << " of " << st.n_constrained
        << " outputs valid against their schema (" << format_share(st.validity_rate) << ")";
    if (st.n_failed) out << ", " << st.n_failed << " constrained requests failed";
    out << "; TPOT p50 " << format_number(st.constrained.tpot_p50_ms) << " ms constrained vs "
        << format_number(st.unconstrained.tpot_p50_ms) << " ms not";
    if (std::isfinite(st.tpot_cost_pct)) out << " (" << format_change_pct(st.tpot_cost_pct) << ")";
    if (!st.invalid_reasons.empty()) out << "; most frequent invalid: " << st.invalid_reasons.front().first;
    out << "\n";
  }
}

void print_gate_results(std::ostream& out, const std::vector<GateResult>& gates) {
  std::size_t n_failed = 0;
  for (const auto& g : gates) {
    out << (g.passed ? "  PASS  " : "  FAIL  ") << g.name << "\n        " << g.message << "\n";
    n_failed += g.passed ? 0 : 1;
  }
  out << "gates: " << gates.size() - n_failed << " passed, " << n_failed << " failed\n";
}

void print_terminal_plot(std::ostream& out, const Summary& s, const std::string& metric, int width,
                         int height) {
  width = std::max(width, 10);
  height = std::max(height, 4);
  struct Point {
    double x, y;
  };
  const auto strategies = s.strategies();
  std::vector<std::vector<Point>> series(strategies.size());
  double xmin = HUGE_VAL, xmax = -HUGE_VAL, ymax = 0.0;
  bool any = false;
  for (const RunSummary* r : table_order(s)) {
    const auto v = run_metric(*r, metric);
    if (!v || !std::isfinite(*v) || !std::isfinite(r->info.rate)) continue;
    const auto i =
        std::find(strategies.begin(), strategies.end(), r->info.strategy_name()) - strategies.begin();
    series[i].push_back({r->info.rate, *v});
    xmin = std::min(xmin, r->info.rate);
    xmax = std::max(xmax, r->info.rate);
    ymax = std::max(ymax, *v);
    any = true;
  }
  const std::string title = metric_title(metric) + " vs request rate (req/s)";
  if (!any) {
    out << title << ": no data to plot\n";
    return;
  }
  if (ymax <= 0.0) ymax = 1.0;
  auto col_of = [&](double x) {
    if (xmax <= xmin) return width / 2;
    return static_cast<int>(std::lround((x - xmin) / (xmax - xmin) * (width - 1)));
  };
  auto row_of = [&](double y) {  // 0 = bottom
    return std::clamp(static_cast<int>(std::lround(y / ymax * (height - 1))), 0, height - 1);
  };
  std::vector<std::string> grid(height, std::string(width, ' '));
  // Dots between a strategy's consecutive points first, so markers overwrite them.
  for (const auto& pts : series)
    for (std::size_t k = 1; k < pts.size(); ++k) {
      const int c0 = col_of(pts[k - 1].x), c1 = col_of(pts[k].x);
      for (int c = c0 + 1; c < c1; ++c) {
        const double t = static_cast<double>(c - c0) / (c1 - c0);
        const int row = row_of(pts[k - 1].y + t * (pts[k].y - pts[k - 1].y));
        char& cell = grid[height - 1 - row][c];
        if (cell == ' ') cell = '.';
      }
    }
  for (std::size_t i = 0; i < series.size(); ++i) {
    const char marker = i < 26 ? static_cast<char>('A' + i) : '#';
    for (const auto& p : series[i]) {
      char& cell = grid[height - 1 - row_of(p.y)][col_of(p.x)];
      cell = (cell == ' ' || cell == '.' || cell == marker) ? marker : '*';
    }
  }
  const int mid_row = (height - 1) / 2;  // counted from the top
  const std::string top = format_number(ymax);
  const std::string mid = format_number(ymax * (height - 1 - mid_row) / (height - 1));
  const std::size_t label_w = std::max<std::size_t>({top.size(), mid.size(), 1});
  out << title << "\n";
  for (int row = 0; row < height; ++row) {
    std::string label;
    if (row == 0)
      label = top;
    else if (row == mid_row)
      label = mid;
    else if (row == height - 1)
      label = "0";
    std::string line = std::string(label_w - label.size(), ' ') + label + " |" + grid[row];
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  out << std::string(label_w, ' ') << " +" << std::string(width, '-') << "\n";
  const std::string lo = format_rate(xmin), hi = format_rate(xmax);
  std::string axis(width + 2, ' ');
  if (xmax > xmin) {
    axis.replace(2, lo.size(), lo);
    const std::size_t hi_pos = axis.size() - hi.size();
    axis.replace(hi_pos, hi.size(), hi);
  } else {
    axis.replace(2 + width / 2, lo.size(), lo);
  }
  while (!axis.empty() && axis.back() == ' ') axis.pop_back();
  out << std::string(label_w, ' ') << axis << "\n";
  out << std::string(label_w + 2, ' ') << "request rate (req/s)\n";
  std::string legend;
  for (std::size_t i = 0; i < strategies.size(); ++i)
    legend += std::string(legend.empty() ? "" : "   ") + (i < 26 ? static_cast<char>('A' + i) : '#') + " = " +
              strategies[i];
  out << "  " << legend << "   (* = overlap)\n";
}

}  // namespace servelab::analysis
