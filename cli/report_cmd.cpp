// servelab report DIR: re-render summary.json, report.md, results.csv, junit.xml, report.html and
// plots from the run folder's records.jsonl, steps.jsonl and runs.json.
#include <iostream>
#include <memory>

#include "analysis/report.h"
#include "cli/command.h"

namespace servelab::cli {
namespace {

struct ReportArgs {
  std::string dir;
  bool no_plots = false;
  bool quiet = false;
  std::string gnuplot = "gnuplot";
  std::string plot_metric = "ttft_ms.p50";
};

int report_main(const ReportArgs& a) {
  analysis::ReportOptions opts;
  opts.plots = !a.no_plots;
  opts.plot.gnuplot = a.gnuplot;
  analysis::check_metric_name(a.plot_metric);
  const auto outcome = analysis::render_reports(a.dir, opts);
  if (!a.quiet) {
    analysis::print_console_summary(std::cout, outcome.summary);
    std::cout << "\n";
    analysis::print_terminal_plot(std::cout, outcome.summary, a.plot_metric);
    if (!outcome.gates.empty()) {
      std::cout << "\n";
      analysis::print_gate_results(std::cout, outcome.gates);
    }
  }
  for (const auto& w : outcome.warnings) std::cerr << "warning: " << w << "\n";
  if (!a.quiet)
    std::cout << "\nwrote " << a.dir << "/{summary.json, report.md, results.csv, junit.xml, report.html}"
              << (outcome.plots.empty() ? "" : " and " + std::to_string(outcome.plots.size()) + " plots")
              << "\n";
  return outcome.exit_code();
}

const Registrar reg("report", "Re-render a run folder's summary, reports and plots from its records",
                    [](CLI::App& sub) -> CommandMain {
                      auto a = std::make_shared<ReportArgs>();
                      sub.add_option("DIR", a->dir, "run folder holding records.jsonl and runs.json")
                          ->required()
                          ->check(CLI::ExistingDirectory);
                      sub.add_flag("--no-plots", a->no_plots, "skip gnuplot figures");
                      sub.add_flag("-q,--quiet", a->quiet, "print only warnings and errors");
                      sub.add_option("--gnuplot", a->gnuplot, "gnuplot executable")->capture_default_str();
                      sub.add_option("--plot-metric", a->plot_metric,
                                     "metric of the terminal chart, e.g. tpot_ms.p50")
                          ->capture_default_str();
                      sub.footer(
                          "Writes summary.json (byte-identical to the run's), report.md, results.csv,\n"
                          "junit.xml, report.html and plots/ into DIR. Exit 1 when a gate fails,\n"
                          "2 on a missing or malformed input file.\n\n"
                          "Examples:\n"
                          "  servelab report results/runs/quickstart\n"
                          "  servelab report results/runs/sweep --plot-metric tpot_ms.p50 --no-plots\n");
                      return [a] { return report_main(*a); };
                    });

}  // namespace
}  // namespace servelab::cli
