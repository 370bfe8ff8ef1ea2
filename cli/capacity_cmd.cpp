// servelab capacity SCENARIO: per strategy, the highest request rate whose SLO attainment meets
// the target (bisection, every probe recorded), replicas/GPUs for a target rate, cost figures;
// a table, capacity.json and a plot. `--rate R` runs one probe instead and prints simulated
// time, wall time and their ratio (the fast-virtual-time benchmark, scripts/bench-sim.sh).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "analysis/capacity.h"
#include "analysis/environment.h"
#include "analysis/metrics.h"
#include "cli/report_input.h"
#include "cli/bench_scenario.h"
#include "cli/command.h"
#include "loadgen/capacity_probe.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

struct CapacityArgs {
  std::string scenario;
  std::vector<std::string> urls;  ///< --url: a server, no YAML (bench's scenario with these flags)
  std::string model;
  std::string api;
  int prompt_tokens = 128;
  int output_tokens = 64;
  std::string out;
  std::vector<std::string> overrides;
  std::vector<std::string> strategies;
  double rate = 0.0;          // > 0: one probe (benchmark)
  bool quiet = false;
  bool no_plots = false;
};


/// Runs per capacity probe: workload.repeat.
int n_runs_of(const Scenario& s) { return std::max(1, s.workload.repeat); }

std::string counts_text(const std::optional<CostCounts>& c) {
  if (!c) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "steps priced: %lld from the profile, %lld beyond its grid (roofline-scaled), %lld by the roofline",
                static_cast<long long>(c->profile), static_cast<long long>(c->profile_roofline),
                static_cast<long long>(c->roofline));
  return buf;
}

int one_probe(const Scenario& sc, const PointRunner& runner, const std::vector<size_t>& which, double rate, int n) {
  for (size_t i : which) {
    PointRunOptions o;
    o.n_requests = n;
    const std::clock_t c0 = std::clock();
    const PointRun run = runner.run(i, rate, o);
    const auto t0 = std::chrono::steady_clock::now();
    const analysis::RunMetrics m = analysis::compute_metrics(run.label, run.records, {}, analysis_slo(sc));
    const double metrics_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    const double total_wall = run.wall_s + metrics_s;
    std::printf("%s: %zu requests (%zu measured), simulated %.1f s in %.2f s wall (engine %.2f s + metrics %.2f s; "
                "%.2f s of CPU time on one thread): %.0fx real time\n",
                run.label.c_str(), run.records.size(), m.n_requests, run.stats.end_s, total_wall, run.wall_s, metrics_s,
                cpu_s, run.stats.end_s / total_wall);
    std::printf("  SLO attainment %.1f%%, %.1f output tok/s, %.2f req/s, TTFT p50/p99 %.1f/%.1f ms, TPOT p50/p99 %.1f/%.1f ms\n",
                m.slo_attainment * 100, m.output_throughput, m.request_throughput, m.ttft_ms.p50, m.ttft_ms.p99,
                m.tpot_ms.p50, m.tpot_ms.p99);
    if (run.cost_counts) std::printf("  %s\n", counts_text(run.cost_counts).c_str());
  }
  return 0;
}

int capacity_main(const CapacityArgs& a) {
  Scenario sc;
  try {
    if (!a.urls.empty()) {  // the server alone: bench's scenario, probed at rates the search picks
      BenchArgs b;
      b.urls = a.urls;
      b.model = a.model;
      b.api = a.api;
      b.prompt_tokens = a.prompt_tokens;
      b.output_tokens = a.output_tokens;
      b.name = "capacity-" + timestamp_now();
      b.overrides = a.overrides;
      sc = bench_scenario(b);
    } else {
      sc = load_scenario(a.scenario, a.overrides);
    }
  } catch (const ScenarioError& e) {
    for (const auto& m : e.messages) std::cerr << m << "\n";
    return 2;
  }
  if (sc.workload.mode != LoadMode::open_loop) {
    std::cerr << a.scenario << ": capacity needs an open-loop workload (workload.arrival), not "
              << to_string(sc.workload.mode) << "\n";
    return 2;
  }
  const CapacitySpec spec = sc.capacity.value_or(CapacitySpec{});
  std::vector<size_t> which;
  for (size_t i = 0; i < sc.strategies.size(); ++i)
    if (a.strategies.empty() || std::find(a.strategies.begin(), a.strategies.end(), sc.strategies[i].label) != a.strategies.end())
      which.push_back(i);
  if (which.empty()) {
    std::cerr << "no strategy of " << a.scenario << " matches --strategy\n";
    return 2;
  }
  std::unique_ptr<PointRunner> runner;
  try {
    runner = std::make_unique<PointRunner>(sc);
  } catch (const std::exception& e) {
    std::cerr << a.scenario << ": " << e.what() << "\n";
    return 2;
  }
  if (!a.quiet)
    for (size_t i : which)
      if (auto b = runner->kv_budget(i))
        std::fprintf(stderr, "%s: KV arena %.1f GiB = %.1f GB x %.2f - weights %.1f GiB - activations %.1f GiB (%lld token slots)\n",
                     sc.strategies[i].label.c_str(), b->kv_cache_bytes / 1073741824.0, b->usable_bytes / 1e9 /
                     *spec.gpu_memory_utilization, *spec.gpu_memory_utilization, b->weight_bytes / 1073741824.0,
                     b->activation_bytes / 1073741824.0, static_cast<long long>(b->n_token_slots()));
  if (a.rate > 0) return one_probe(sc, *runner, which, a.rate, spec.n_requests);

  analysis::BisectionOptions bo;
  bo.target = sc.slo.attainment;
  bo.rate_lo = spec.rate_lo;
  bo.rate_hi = spec.rate_hi;
  bo.precision = spec.precision;
  bo.precision_pct = spec.precision_pct;
  bo.max_probes = spec.max_probes;
  bo.decide_on_ci95_lo = spec.decide == CapacityDecide::ci95_lo;
  std::vector<analysis::StrategyCapacity> results;
  CostCounts counts;
  std::unique_ptr<PointRunner> slower;  // capacity.step_cost_margin (the sim only: checked when parsed)
  if (spec.step_cost_margin > 0) {
    Scenario priced = sc;
    priced.backend.sim_cost_scale *= 1.0 + spec.step_cost_margin;
    slower = std::make_unique<PointRunner>(priced);
  }
  for (size_t i : which) {
    // workload.repeat N: each probe is N runs, run k planned from repeat_seed(seed, k) (k = 1: the
    // scenario's seed, so repeat 1 probes what it always did), scored on their mean.
    const int n_runs = n_runs_of(sc);
    auto probe_with = [&](PointRunner& by, double rate) {
      std::vector<analysis::RunMetrics> runs;
      double wall_s = 0.0;
      std::string label;
      for (int k = 1; k <= n_runs; ++k) {
        PointRunOptions o;
        o.n_requests = spec.n_requests;
        o.seed = repeat_seed(sc.seed, k);
        const PointRun run = by.run(i, rate, o);
        if (run.cost_counts) {
          counts.profile += run.cost_counts->profile;
          counts.profile_roofline += run.cost_counts->profile_roofline;
          counts.roofline += run.cost_counts->roofline;
        }
        runs.push_back(analysis::compute_metrics(run.label, run.records, {}, analysis_slo(sc)));
        wall_s += run.wall_s;
        label = run.label;
      }
      analysis::CapacityProbe p = analysis::probe_from_runs(rate, runs, wall_s);
      if (!a.quiet) {
        std::fprintf(stderr, "  %s: attainment %.1f%%", label.c_str(), p.slo_attainment * 100);
        if (p.repeats > 1)
          std::fprintf(stderr, " (mean of %d runs, %.1f-%.1f%%)", p.repeats, p.attainment_stats.min * 100,
                       p.attainment_stats.max * 100);
        std::fprintf(stderr, ", %.1f out tok/s (%.2f s wall)\n", p.output_throughput, wall_s);
      }
      return p;
    };
    analysis::StrategyCapacity c =
        analysis::find_capacity(sc.strategies[i].label, [&](double rate) { return probe_with(*runner, rate); }, bo);
    analysis::plan_deployment(c, spec.target_rate, spec.tensor_parallel, spec.gpu_hour_usd);
    if (slower) {  // capacity.step_cost_margin: the same search on steps priced that much slower
      if (!a.quiet) std::fprintf(stderr, "  with every step %.3g%% slower:\n", spec.step_cost_margin * 100.0);
      const analysis::StrategyCapacity m =
          analysis::find_capacity(sc.strategies[i].label, [&](double rate) { return probe_with(*slower, rate); }, bo);
      c.step_cost_margin = spec.step_cost_margin;
      c.found_at_margin = m.found;
      c.capacity_at_margin = m.capacity;
    }
    results.push_back(std::move(c));
  }

  std::cout << analysis::capacity_table(results, bo.target);
  if (bo.decide_on_ci95_lo)
    std::cout << "verdicts on the lower end of each probe's 95% interval over its " << n_runs_of(sc)
              << " runs (capacity.decide: ci95_lo)\n";
  if (sc.backend.kind == BackendKind::sim) std::cout << counts_text(counts) << "\n";
  const std::string dir = a.out.empty() ? sc.output_dir : a.out;
  std::filesystem::create_directories(dir);
  nlohmann::ordered_json extra;
  extra["scenario"] = sc.name;
  extra["backend"] = sc.target ? "http" : to_string(sc.backend.kind);
  if (sc.target) extra["target"] = {{"urls", sc.target->urls}, {"model", sc.target->model}, {"api", to_string(sc.target->api)}};
  extra["model"] = sc.target ? sc.target->model : runner->backend_spec().model;
  extra["cost_model"] = sc.target || sc.backend.kind != BackendKind::sim ? "measured"
                        : sc.backend.sim_profile.empty()   ? "roofline:" + runner->backend_spec().sim_device.name
                                                           : "profile:" + sc.backend.sim_profile;
  extra["tensor_parallel"] = spec.tensor_parallel;
  extra["slo"] = {{"ttft_ms", sc.slo.ttft_ms}, {"tpot_ms", sc.slo.tpot_ms}};
  extra["bisection"] = {{"precision", bo.precision}, {"precision_pct", bo.precision_pct}, {"max_probes", bo.max_probes},
                        {"runs_per_probe", n_runs_of(sc)},
                        {"decide", bo.decide_on_ci95_lo ? "ci95_lo" : "mean"}};
  extra["n_requests_per_probe"] = spec.n_requests > 0 ? spec.n_requests : sc.planned_requests();
  extra["cost_counts"] = {{"profile", counts.profile}, {"profile_roofline", counts.profile_roofline}, {"roofline", counts.roofline}};
  nlohmann::ordered_json env;
  analysis::to_json(env, analysis::detect_environment(to_string(sc.backend.kind), current_commit(), SERVELAB_VERSION));
  extra["environment"] = env;
  const std::string json_path = dir + "/capacity.json";
  std::ofstream(json_path) << analysis::capacity_json(results, bo.target, extra).dump(2) << "\n";
  std::cout << "wrote " << json_path << "\n";
  if (!a.no_plots) {
    const auto warnings = analysis::write_capacity_plot(dir, results, bo.target);
    if (!a.quiet)  // -q: gnuplot's problems stay in plots/capacity.log
      for (const auto& w : warnings) std::cout << "warning: " << w << "\n";
    if (std::filesystem::exists(dir + "/plots/capacity.svg")) std::cout << "plot: " << dir << "/plots/capacity.svg\n";
  }
  // No invented figure: a strategy whose probes never bracketed the target has no capacity.
  int rc = 0;
  for (const auto& c : results)
    if (!c.found) {
      std::cerr << "servelab capacity: " << c.strategy << ": no capacity: " << c.note << "\n";
      rc = 1;
    }
  return rc;
}

const Registrar register_capacity(
    "capacity", "Find each strategy's highest request rate under the SLO (bisection), replicas and cost",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<CapacityArgs>();
      auto* scenario = sub.add_option("scenario", a->scenario, "Scenario YAML file")->check(CLI::ExistingFile);
      auto* url = sub.add_option("--url", a->urls, "Probe this OpenAI-compatible server, without a YAML (bench's flags below; the rest by --set)");
      url->excludes(scenario);
      sub.add_option("--model", a->model, "With --url: model name to send");
      sub.add_option("--api", a->api, "With --url: completions | chat")->check(CLI::IsMember({"completions", "chat"}));
      sub.add_option("--prompt-tokens", a->prompt_tokens, "With --url: prompt length (default 128)")->check(CLI::PositiveNumber);
      sub.add_option("--output-tokens", a->output_tokens, "With --url: output length (default 64)")->check(CLI::PositiveNumber);
      sub.callback([a] {
        if (a->scenario.empty() && a->urls.empty()) throw CLI::RequiredError("scenario (or --url)");
      });
      sub.add_option("--out,-o", a->out, "Output folder for capacity.json and plots/ (default: the scenario's output_dir)");
      sub.add_option("--set", a->overrides, "Override a scenario value: key.path=value (repeatable)");
      sub.add_option("--strategy", a->strategies, "Only these strategy labels (repeatable)");
      sub.add_option("--rate", a->rate, "Run one probe at this rate and print simulated vs wall time (benchmark)")
          ->check(CLI::PositiveNumber);
      sub.add_flag("--quiet,-q", a->quiet, "No per-probe lines");
      sub.add_flag("--no-plots", a->no_plots, "Skip the gnuplot figure");
      sub.footer(
          "The SLO and its attainment target come from the scenario's slo: section; the search and\n"
          "the deployment from its capacity: section (scenarios/README.md): bracket, precision,\n"
          "requests per probe, target_rate, gpu_hour_usd, tensor_parallel, gpu_memory_utilization.\n"
          "Each probe is one in-memory run (sim: virtual clock; cpu: real time).\n\n"
          "Examples:\n"
          "  servelab capacity scenarios/capacity.yaml\n"
          "  servelab capacity scenarios/capacity.yaml --set capacity.target_rate=400 --set capacity.gpu_hour_usd=2.5\n"
          "  servelab capacity scenarios/capacity.yaml --rate 27 --set capacity.n_requests=100000   # benchmark\n"
          "  servelab capacity --url http://127.0.0.1:8000 --set slo.ttft_ms=500 --set capacity.n_requests=200\n"
          "Exit codes: 0 ok, 1 a strategy's capacity was not bracketed (every probe met the target: a lower\n"
          "bound only; or none did), 2 invalid scenario or input.");
      return [a] { return capacity_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
