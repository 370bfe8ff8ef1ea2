// servelab compare BASE NEW: per-run deltas of key metrics between two summaries; exit 1 on a
// regression beyond the threshold (latency up or throughput down), 0 otherwise, 2 on bad input.
#include <iostream>
#include <memory>

#include "analysis/compare.h"
#include "analysis/import_results.h"
#include "analysis/summary.h"
#include "cli/command.h"
#include "cli/report_input.h"

namespace servelab::cli {
namespace {

struct CompareArgs {
  std::string base;
  std::string current;
  double threshold_pct = 10.0;
  std::vector<std::string> metrics;
  bool allow_missing = false;
};

int compare_main(const CompareArgs& a) {
  // Either may be another tool's result file (vLLM, GenAI-Perf, guidellm, LLMPerf).
  const auto base = analysis::read_any_summary(a.base);
  const auto current = analysis::read_any_summary(a.current);
  // Either spelling: the summary path (ttft_ms.p99) or the gates' flat name (ttft_p99_ms).
  std::vector<std::string> metrics;
  for (const auto& m : a.metrics) metrics.push_back(analysis_metric_name(m));
  if (metrics.empty()) metrics = analysis::default_compare_metrics();
  const auto c = analysis::compare_summaries(base, current, a.threshold_pct, metrics, a.allow_missing);
  std::cout << "base: " << a.base << "\nnew:  " << a.current << "\n\n";
  analysis::print_comparison(std::cout, c);
  if (c.runs.empty()) {
    std::cerr << "servelab compare: error: no run of NEW matches a run of BASE by label and rate\n";
    return 2;
  }
  return c.exit_code();
}

const Registrar register_compare("compare", "Compare two summaries run by run; exit 1 on a regression",
                    [](CLI::App& sub) -> CommandMain {
                      auto a = std::make_shared<CompareArgs>();
                      sub.add_option("BASE", a->base, "baseline summary.json or run folder, or another tool's result JSON")->required();
                      sub.add_option("NEW", a->current, "new summary.json or run folder, or another tool's result JSON")->required();
                      sub.add_option("--threshold-pct", a->threshold_pct,
                                     "largest tolerated regression, percent of the base value")
                          ->capture_default_str()
                          ->check(CLI::NonNegativeNumber);
                      sub.add_option("--metric", a->metrics,
                                     "metric to compare (repeatable), e.g. ttft_ms.p99 or ttft_p99_ms (the gates' name), goodput; "
                                     "default: p50/p99 TTFT and TPOT, output_throughput, goodput, "
                                     "slo_attainment");
                      sub.add_flag("--allow-missing", a->allow_missing,
                                   "do not fail when a BASE run is missing from NEW or a metric "
                                   "became null (no value)");
                      sub.footer(
                          "Runs are matched by label and rate. A regression is latency up or\n"
                          "throughput/goodput/attainment down by more than the threshold. A run\n"
                          "of BASE missing from NEW, or a metric that became null, also fails\n"
                          "unless --allow-missing.\n"
                          "BASE or NEW may be a vLLM `bench serve --save-result` JSON, GenAI-Perf's\n"
                          "profile_export_genai_perf.json, guidellm's benchmarks JSON or LLMPerf's\n"
                          "*_summary.json: its runs pair with ours at the same rate or concurrency\n"
                          "(docs/importing-results.md).\n"
                          "Exit 0 no regression, 1 regression or missing, 2 bad input.\n\n"
                          "Examples:\n"
                          "  servelab compare results/baselines/ci.json results/runs/ci\n"
                          "  servelab compare old/summary.json new/summary.json --threshold-pct 5 "
                          "--metric ttft_ms.p99\n");
                      return [a] { return compare_main(*a); };
                    });

}  // namespace
}  // namespace servelab::cli
