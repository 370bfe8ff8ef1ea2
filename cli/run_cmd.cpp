// servelab run SCENARIO: plan → drive the engine for every strategy × rate → records → reports.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "analysis/report.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "cli/report_input.h"
#include "cli/run_scenario.h"
#include "engine/model/tokenizer.h"
#include "loadgen/http/request_body.h"
#include "loadgen/http/server_probe.h"
#include "loadgen/plan.h"
#include "loadgen/sources.h"
#include "loadgen/sweep.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

struct RunArgs {
  std::string scenario;
  std::string out;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool no_plots = false;
  bool force = false;
  std::string dtype;  // cuda: backend.dtype for this run ("" = the scenario's)
  std::string quantization;    // every strategy without its own `quantization:` ("" = none)
  std::string kv_cache_dtype;  // every strategy without its own `kv_cache_dtype:` ("" = auto)
};

int run_main(const RunArgs& args) {
  Scenario scenario;
  try {
    scenario = load_scenario(args.scenario, args.overrides);
  } catch (const ScenarioError& e) {
    for (const auto& m : e.messages) std::cerr << m << "\n";
    return 2;
  }
  if (!args.dtype.empty()) {  // as backend.dtype (which `--set` cannot reach under `backend: cuda`)
    if (scenario.backend.kind == BackendKind::cpu) {
      std::cerr << "servelab run: --dtype applies to backend cuda or sim; " << args.scenario
                << " runs backend cpu, which computes in fp32\n";
      return 2;
    }
    scenario.backend.dtype = parse_dtype(args.dtype);
  }
  if (!args.quantization.empty() || !args.kv_cache_dtype.empty()) {
    if (scenario.backend.kind == BackendKind::cuda && scenario.backend.tensor_parallel > 1) {
      std::cerr << "servelab run: --quantization and --kv-cache-dtype on backend cuda run with tensor_parallel 1 only so far (got "
                << scenario.backend.tensor_parallel << ")\n";
      return 2;
    }
    if (!args.quantization.empty()) scenario.backend.quantization = parse_quantization(args.quantization);
    if (!args.kv_cache_dtype.empty()) scenario.backend.kv_cache_dtype = parse_kv_cache_dtype(args.kv_cache_dtype);
  }
  return run_scenario(scenario, args.out, args.quiet, args.no_plots, args.force);
}

}  // namespace

namespace {

/// The first planned request as the pre-flight sends it: the run's own body (model, API,
/// headers, extra body), at most 16 output tokens.
std::string preflight_body(const Scenario& sc, const Planner& planner) {
  const Plan plan = planner.make(sc.sweep_rates().front());
  if (plan.requests.empty()) return "{}";
  Request r = to_request(plan.requests.front(), plan.seed);
  r.sampling.max_tokens = std::min(r.sampling.max_tokens, 16);
  std::unique_ptr<Tokenizer> tok;
  if (!sc.target->tokenizer.empty()) tok = load_tokenizer_from_dir(sc.target->tokenizer);
  return http_load::request_body(r, *sc.target, tok.get());
}

}  // namespace

void remove_run_outputs(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* f : {"runs.json", "records.jsonl", "steps.jsonl", "replicas.jsonl", "server_metrics.jsonl", "schemas.jsonl",
                        "summary.json", "report.md", "report.html", "results.csv", "junit.xml", "server.json"})
    fs::remove(fs::path(dir) / f, ec);
  fs::remove_all(fs::path(dir) / "plots", ec);
}

int run_scenario(const Scenario& scenario, const std::string& out_dir, bool quiet, bool no_plots, bool force) {
  const RunArgs args{"", out_dir, {}, quiet, no_plots, force, ""};
  const std::string dir = args.out.empty() ? scenario.output_dir : args.out;
  // Never overwrite an earlier run's records without being asked to.
  std::error_code ec;
  if (!args.force && std::filesystem::exists(dir, ec) &&
      !(std::filesystem::is_directory(dir, ec) && std::filesystem::is_empty(dir, ec))) {
    std::cerr << "servelab run: error: " << dir
              << " already exists and is not empty (an earlier run?): choose another --out, remove it, "
                 "or pass --force to overwrite it\n";
    return 2;
  }
  // One Planner for the whole run: a dataset or trace is read once.
  const Planner planner(scenario);
  // A server that does not answer (nothing listening, a wrong path, a bad key, an unknown model)
  // stops the run here with its answer, before a folder of N identical failures is written.
  http_load::ServerInfo server;
  if (scenario.target) {
    if (scenario.target->preflight) {
      const std::string why = http_load::preflight(*scenario.target, preflight_body(scenario, planner));
      if (!why.empty()) {
        std::cerr << "servelab run: error: the server failed the pre-flight request (one request before the load): "
                  << why << "\n  (target.preflight: false, or bench --no-preflight, skips this check)\n";
        return 2;
      }
    }
    server = http_load::describe_server(*scenario.target);
  }
  const bool created = !std::filesystem::exists(dir, ec);
  // --force: the previous run's outputs go (its plots would otherwise sit beside this run's);
  // only servelab's own files, so `--out . --force` never empties a user's folder.
  if (args.force) remove_run_outputs(dir);
  std::filesystem::create_directories(dir);
  // A run that fails before its first request (a model that does not load, a server that does
  // not answer) leaves nothing behind: no folder of empty records blocking the retry.
  struct Cleanup {
    std::string dir;
    bool created;
    bool armed = true;
    ~Cleanup() {
      if (!armed) return;
      std::error_code ec;
      if (created) std::filesystem::remove_all(dir, ec);
      else remove_run_outputs(dir);
    }
  } cleanup{dir, created};

  // runs.json first: a run that dies half-way can still be reported from its records.
  analysis::ReportInput input = report_input_for(scenario, plan_sweep(planner));
  if (scenario.target) {  // the server under test, as it names itself
    const std::string who = http_load::server_description(server, *scenario.target);
    input.scenario.details["server"] = who;
    if (!server.models.empty()) input.scenario.details["server_models"] = server.models;
    if (!server.engine.empty()) input.scenario.details["server_engine"] = server.engine;
    input.environment.device = "server: " + who;
  }
  analysis::write_runs_file(dir, input);

  std::ostream& out = std::cout;
  if (!args.quiet)
    out << "servelab run " << scenario.name << ": " << describe(scenario) << "\n  output: " << dir << "\n";

  std::unique_ptr<ProgressLine> progress;
  SweepOptions opts;
  opts.out_dir = dir;
  opts.stop = &install_stop_handler();
  opts.scrape_server_metrics = server.has_metrics && !server.engine.empty();
  opts.load_tokenizer = [](const std::string& dir) {
    auto t = load_tokenizer_from_dir(dir);
    if (!t) throw std::runtime_error(dir + ": no tokenizer.json (target.tokenizer)");
    return t;
  };
  opts.on_accuracy = [&](const std::string& format) {
    if (!args.quiet) out << "  accuracy: " << format << " against the model's own formats\n" << std::flush;
  };
  opts.on_run_start = [&](const SweepRun& r) {
    progress = std::make_unique<ProgressLine>(!args.quiet, r.label, r.n_planned + r.n_warmup);
    progress->draw(true);
  };
  opts.on_record = [&](const SweepRun&, const RequestRecord& rec) {
    cleanup.armed = false;  // a request finished: whatever happens now is kept and reported
    progress->on_finished(rec.end_s, rec.output_tokens);
  };
  opts.on_run_done = [&](const SweepRun& r, const DriveStats& st) {
    progress->done();
    if (!args.quiet && !ProgressLine::stderr_is_terminal())
      out << "  " << r.label << ": " << st.n_finished << " requests, " << st.n_tokens << " tokens in "
          << st.end_s << " s\n";
  };
  const SweepOutcome sweep = run_sweep(planner, opts);
  cleanup.armed = false;

  if (sweep.interrupted) {  // report only the runs that started; the rest were never measured
    std::set<std::string> started;  // points, whichever repetition started
    for (const auto& r : sweep.records) started.insert(r.run.substr(0, r.run.rfind('#')));
    std::erase_if(input.runs, [&](const analysis::RunInfo& r) { return !started.count(r.label); });
  }
  input.records = sweep.records;
  input.steps = sweep.steps;
  // Real backends: the ceilings the steps' rooflines were priced at (runs.json is rewritten below).
  for (analysis::RunInfo& r : input.runs) {
    if (r.backend != "sim") r.roofline_ceilings = sweep.roofline_ceilings;
    for (const SweepRun& s : sweep.runs) {
      if (s.point != r.label) continue;
      // The KV arena each engine got (sized from free memory on a GPU), and its formats' accuracy.
      if (s.config.contains("kv_cache_bytes")) r.config["kv_cache_bytes"] = s.config["kv_cache_bytes"];
      if (auto a = sweep.accuracy.find(s.strategy); a != sweep.accuracy.end()) r.accuracy = a->second;
    }
  }
  if (!args.quiet && !sweep.roofline_note.empty()) out << "roofline: " << sweep.roofline_note << "\n";
  if (const auto sm = std::filesystem::path(dir) / "server_metrics.jsonl"; std::filesystem::exists(sm, ec))
    input.server_samples = analysis::read_server_samples(sm.string());
  if (const auto sj = std::filesystem::path(dir) / "schemas.jsonl"; std::filesystem::exists(sj, ec))
    input.schemas = analysis::read_schemas_file(sj.string());
  analysis::ReportOptions ropts;
  ropts.plots = !args.no_plots;
  const analysis::ReportOutcome report = analysis::write_reports(dir, input, ropts);

  if (!args.quiet) {
    out << "\n";
    analysis::print_console_summary(out, report.summary);
    if (report.summary.runs.size() > 1) {
      out << "\n";
      analysis::print_terminal_plot(out, report.summary, "ttft_ms.p50");
    }
    for (const auto& w : report.warnings) out << "warning: " << w << "\n";
  }
  if (!report.gates.empty()) {
    out << "\n";
    analysis::print_gate_results(out, report.gates);
  }
  out << (sweep.interrupted ? "interrupted: partial report in " : "report: ") << dir << "/report.html\n";
  if (sweep.interrupted) return 130;
  return report.exit_code();
}

namespace {

const Registrar register_run(
    "run", "Run a scenario: every strategy at every request rate, then write the reports",
    [](CLI::App& sub) -> CommandMain {
      auto args = std::make_shared<RunArgs>();
      sub.add_option("scenario", args->scenario, "Scenario YAML file")->required()->check(CLI::ExistingFile);
      sub.add_option("--out,-o", args->out, "Output folder (default: the scenario's output_dir)");
      sub.add_option("--set", args->overrides, "Override a scenario value: key.path=value (repeatable)");
      sub.add_option("--dtype", args->dtype, "cuda: weights, activations and KV in bf16 or f16 (the scenario's backend.dtype)")
          ->check(CLI::IsMember({"bf16", "f16"}));
      sub.add_option("--quantization", args->quantization,
                     "Weight format of every strategy without its own quantization: (cpu, sim)")
          ->check(CLI::IsMember({"none", "fp8", "int4_awq", "int4_gptq"}));
      sub.add_option("--kv-cache-dtype", args->kv_cache_dtype,
                     "KV element type of every strategy without its own kv_cache_dtype: (cpu, sim; cuda on one GPU)")
          ->check(CLI::IsMember({"auto", "fp8"}));
      sub.add_flag("--quiet,-q", args->quiet, "No progress line and no console summary");
      sub.add_flag("--no-plots", args->no_plots, "Skip gnuplot figures");
      sub.add_flag("--force", args->force, "Overwrite the output folder when it already holds files");
      sub.footer(
          "Examples:\n"
          "  servelab run scenarios/quickstart.yaml\n"
          "  servelab run scenarios/ci.yaml --out results/runs/ci --quiet\n"
          "  servelab run scenarios/chat-slo.yaml --set workload.rates=[1,2,4] --set seed=7\n"
          "Exit codes: 0 ok, 1 a CI gate failed, 2 invalid scenario or input, 130 interrupted.");
      return [args] { return run_main(*args); };
    });

}  // namespace
}  // namespace servelab::cli
