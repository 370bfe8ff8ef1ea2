// servelab report DIR: re-render summary.json, report.md, results.csv, junit.xml, report.html and
// plots from the run folder's records.jsonl, steps.jsonl and runs.json. With --add FILE... --out
// NEW: the same, with other record files (a peer's, cli/report_merge.h) joined, written to NEW.
#include <filesystem>
#include <iostream>
#include <memory>

#include "analysis/import_results.h"
#include "analysis/report.h"
#include "cli/command.h"
#include "cli/report_merge.h"

namespace servelab::cli {
namespace {

struct ReportArgs {
  std::string dir;
  std::vector<std::string> add;  ///< records files joined to DIR's (--add)
  std::vector<std::string> imports;  ///< other tools' result files (--import)
  std::string out;               ///< where the reports go (--out); "" = DIR
  bool force = false;
  bool no_plots = false;
  bool quiet = false;
  std::string gnuplot = "gnuplot";
  std::string plot_metric = "ttft_ms.p50";
};

namespace fs = std::filesystem;

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

/// In-process runs (cpu, sim, cuda) take their KV and batch figures from steps.jsonl: without it,
/// re-rendering would rewrite them to null. Returns why the folder cannot be re-rendered, or "".
std::string missing_steps(const std::string& dir, const analysis::ReportInput& in) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "steps.jsonl", ec)) return "";
  for (const auto& r : in.runs)
    if (r.backend == "cpu" || r.backend == "sim" || r.backend == "cuda")
      return (fs::path(dir) / "steps.jsonl").string() + ": missing: run " + r.label + " ran in-process (" + r.backend +
             ") and its KV and batch figures come from this file; restore it (nothing was rewritten)";
  return "";
}

int report_main(const ReportArgs& a) {
  analysis::ReportOptions opts;
  opts.plots = !a.no_plots;
  opts.plot.gnuplot = a.gnuplot;
  analysis::check_metric_name(a.plot_metric);
  if (a.dir.empty() && (a.imports.empty() || a.out.empty())) {
    std::cerr << "servelab report: error: DIR is required (without it, give --import FILE... and --out NEW_DIR)\n";
    return 2;
  }
  if (!a.imports.empty() && a.out.empty()) {
    std::cerr << "servelab report: error: --import needs --out NEW_DIR (the run folder " << a.dir
              << " is left as it was)\n";
    return 2;
  }
  if (!a.add.empty() && a.out.empty()) {
    std::cerr << "servelab report: error: --add needs --out NEW_DIR (the run folder " << a.dir
              << " is left as it was)\n";
    return 2;
  }
  const bool elsewhere = !a.out.empty() && (a.dir.empty() || !same_folder(a.out, a.dir));
  const std::string dir = elsewhere ? a.out : a.dir;
  if ((!a.add.empty() || !a.imports.empty()) && !elsewhere) {
    std::cerr << "servelab report: error: --out must name another folder than " << a.dir << "\n";
    return 2;
  }
  std::error_code ec;
  if (elsewhere && !a.force && fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) {
    std::cerr << "servelab report: error: " << dir
              << " already exists and is not empty: choose another --out, remove it, or pass --force\n";
    return 2;
  }
  analysis::ReportInput input;
  if (a.dir.empty()) {
    input.scenario.name = "imported";
  } else {
    input = analysis::load_report_input(a.dir);
    if (const std::string why = missing_steps(a.dir, input); !why.empty()) {
      std::cerr << "servelab report: error: " << why << "\n";
      return 2;
    }
  }
  for (const auto& f : a.imports) {
    for (auto& r : analysis::import_result_file(f)) {
      for (const auto& have : input.imported)
        if (have.info.label == r.info.label) r.info.label += "#" + std::to_string(input.imported.size() + 1);
      input.imported.push_back(std::move(r));
    }
  }
  for (const auto& f : a.add) add_peer_records(input, f);
  if (elsewhere) write_merged_records(dir, input);
  const auto outcome = analysis::write_reports(dir, input, opts);
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
    std::cout << "\nwrote " << dir << (elsewhere ? "/{records.jsonl, runs.json, " : "/{")
              << "summary.json, report.md, results.csv, junit.xml, report.html}"
              << (outcome.plots.empty() ? "" : " and " + std::to_string(outcome.plots.size()) + " plots")
              << "\n";
  return outcome.exit_code();
}

const Registrar register_report("report", "Re-render a run folder's summary, reports and plots from its records",
                    [](CLI::App& sub) -> CommandMain {
                      auto a = std::make_shared<ReportArgs>();
                      sub.add_option("DIR", a->dir, "run folder: runs.json and records.jsonl, plus steps.jsonl for in-process runs")
                          ->check(CLI::ExistingDirectory);
                      sub.add_option("--import", a->imports,
                                     "another tool's result file to report beside the runs (repeatable): vLLM "
                                     "bench serve --save-result JSON, GenAI-Perf profile_export_genai_perf.json, "
                                     "guidellm benchmarks JSON, LLMPerf *_summary.json (needs --out)")
                          ->check(CLI::ExistingFile)
                          ->allow_extra_args(false);
                      sub.add_option("--add", a->add,
                                     "a records.jsonl to join (repeatable): a peer's records of the same plan; "
                                     "its runs come from FILE.run.json beside it, else from the labels")
                          ->check(CLI::ExistingFile)
                          ->allow_extra_args(false);
                      sub.add_option("--out", a->out,
                                     "write the records, runs.json and reports here instead of into DIR "
                                     "(required with --add)");
                      sub.add_flag("--force", a->force, "overwrite --out when it already holds files");
                      sub.add_flag("--no-plots", a->no_plots, "skip gnuplot figures");
                      sub.add_flag("-q,--quiet", a->quiet, "print only warnings and errors");
                      sub.add_option("--gnuplot", a->gnuplot, "gnuplot executable")->capture_default_str();
                      sub.add_option("--plot-metric", a->plot_metric,
                                     "metric of the terminal chart, e.g. tpot_ms.p50")
                          ->capture_default_str();
                      sub.footer(
                          "DIR needs runs.json and records.jsonl; in-process runs (cpu, sim, cuda) also\n"
                          "steps.jsonl, the source of their KV and batch figures (refused without it, so\n"
                          "summary.json never loses them); HTTP runs have none.\n"
                          "Writes summary.json (byte-identical to the run's), report.md, results.csv,\n"
                          "junit.xml, report.html and plots/ into DIR. Exit 1 when a gate fails,\n"
                          "2 on a missing or malformed input file.\n\n"
                          "Examples:\n"
                          "  servelab report results/runs/quickstart\n"
                          "  servelab report results/runs/sweep --plot-metric tpot_ms.p50 --no-plots\n"
                          "  servelab report results/runs/offline --add hf-static.jsonl --add hf-cb.jsonl \\\n"
                          "      --out results/runs/offline-vs-hf\n"
                          "  servelab report results/runs/sweep --import vllm-bench.json --out results/runs/vs-vllm\n"
                          "  servelab report --import vllm.json --import genai.json --out cmp   (no DIR)\n"
                          "With --add, each FILE.run.json (if present) lists its runs as runs.json does:\n"
                          "  {\"runs\": [{\"label\": \"hf-static@max\", \"batching\": \"static\", \"mode\": \"max\",\n"
                          "             \"n_requests\": 1000, \"backend\": \"hf-transformers\", \"config\": {}}]}\n");
                      return [a] { return report_main(*a); };
                    });

}  // namespace
}  // namespace servelab::cli
