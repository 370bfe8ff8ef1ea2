// servelab validate-sim SCENARIO --profile P: how wrong is the sim? Runs the same plans on the
// scenario's real backend and on the sim calibrated from that backend's profile, at fractions of
// the capacity the sim finds (default 50% and 85%), and reports the relative error of p50/p99
// TTFT and TPOT and of output throughput. Writes validation.json, validation.md, both runs'
// records and every real step priced by the cost model (steps_real.jsonl). With --real-repeats N
// the real run of each point is repeated (same plan) and the run-to-run spread of each figure is
// printed beside the sim's error: the noise floor no sim can beat on that machine. --sensitivity D
// runs the sim again with every step D% dearer and D% cheaper and prints how much each figure moves
// per 1% of step cost: queueing near capacity (static batching above all) amplifies a step error,
// so a figure with sensitivity 6 misses by 6% when the steps are priced 1% off. Every figure also
// gets its sampling noise: the half-width of a bootstrap 95% interval over the real run's requests
// (analysis/bootstrap.h), how far a p50 of 400 requests moves by which requests were in the run.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/bootstrap.h"
#include "analysis/capacity.h"
#include "analysis/environment.h"
#include "analysis/metrics.h"
#include "cli/report_input.h"
#include "cli/command.h"
#include "engine/backend/cost_model.h"
#include "loadgen/capacity_probe.h"
#include "loadgen/step_error.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

struct ValidateSimArgs {
  std::string scenario;
  std::string profile;
  std::string out;
  std::vector<std::string> overrides;
  std::vector<std::string> strategies;
  std::vector<double> loads = {0.5, 0.85};
  std::vector<double> capacities;  // per selected strategy, req/s; empty = bisection on the sim
  int n_requests = 0;
  int warmup_requests = 16;  // a discarded real run before the first compared one
  int real_repeats = 1;      // real runs per point: their mean is compared, their spread printed
  double sensitivity_pct = 2.0;  // sim runs at 1 ± this/100 of every step's cost; 0 = none
};


struct Figure {
  const char* name;
  double real = 0.0, sim = 0.0;
  std::vector<double> reals;  ///< each real run's value (one per --real-repeats)
  /// % change of the sim's figure per 1% change of every step's cost (sim at 1 ± δ); NaN = not run.
  double sensitivity = NAN;
  /// Bootstrap 95% half-width of the first real run's figure over its requests, relative; NaN = none.
  double noise = NAN;
  double error() const { return real != 0.0 ? (sim - real) / real : NAN; }
  /// (max − min) / mean over the real runs; NaN with one run.
  double spread() const {
    if (reals.size() < 2 || real == 0.0) return NAN;
    const auto [lo, hi] = std::minmax_element(reals.begin(), reals.end());
    return (*hi - *lo) / std::abs(real);
  }
};

constexpr const char* kFigureNames[] = {"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "output_throughput"};

std::array<double, 5> figure_values(const analysis::RunMetrics& m) {
  return {m.ttft_ms.p50, m.ttft_ms.p99, m.tpot_ms.p50, m.tpot_ms.p99, m.output_throughput};
}

/// The sim's figures against the mean of the real runs' (each real run's value kept).
std::vector<Figure> figures_of(const std::vector<analysis::RunMetrics>& reals, const analysis::RunMetrics& sim) {
  const std::array<double, 5> s = figure_values(sim);
  std::vector<Figure> out;
  for (size_t f = 0; f < s.size(); ++f) {
    Figure fig;
    fig.name = kFigureNames[f];
    fig.sim = s[f];
    for (const analysis::RunMetrics& r : reals) fig.reals.push_back(figure_values(r)[f]);
    for (double v : fig.reals) fig.real += v / double(fig.reals.size());
    out.push_back(std::move(fig));
  }
  return out;
}

/// Each figure's sampling noise over the requests of one real run (throughput excluded: it is a
/// total over the run, not a statistic of its requests).
void set_noise(std::vector<Figure>& figs, const std::vector<RequestRecord>& records, const analysis::SloSpec& slo) {
  if (records.empty()) return;
  const std::vector<double> h = analysis::bootstrap_relative_halfwidths(records, [&](const std::vector<RequestRecord>& r) {
    const analysis::RunMetrics m = analysis::compute_metrics(r.front().run, r, {}, slo);
    return std::vector<double>{m.ttft_ms.p50, m.ttft_ms.p99, m.tpot_ms.p50, m.tpot_ms.p99};
  });
  for (size_t f = 0; f < figs.size() && f < h.size(); ++f) figs[f].noise = h[f];
}

std::string percent_or_dash(double x) {
  if (std::isnan(x)) return "–";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", x * 100);
  return b;
}

/// (f(1 + δ) − f(1 − δ)) / (2δ · f): the elasticity of each figure to the step cost.
void set_sensitivity(std::vector<Figure>& figs, const analysis::RunMetrics& lo, const analysis::RunMetrics& hi, double delta) {
  const std::array<double, 5> a = figure_values(lo), b = figure_values(hi);
  for (size_t f = 0; f < figs.size(); ++f)
    figs[f].sensitivity = figs[f].sim != 0.0 ? (b[f] - a[f]) / (2.0 * delta * figs[f].sim) : NAN;
}

std::string times_or_dash(double x) {
  if (std::isnan(x)) return "–";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", x);
  return b;
}

int64_t preemptions(const std::vector<RequestRecord>& records) {
  int64_t n = 0;
  for (const RequestRecord& rec : records) n += rec.preemptions;
  return n;
}

void write_records(const std::string& path, const std::vector<RequestRecord>& records, bool append) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  for (const RequestRecord& r : records) out << record_line(r);
}

int validate_sim_main(const ValidateSimArgs& a) {
  Scenario real_sc;
  try {
    real_sc = load_scenario(a.scenario, a.overrides);
  } catch (const ScenarioError& e) {
    for (const auto& m : e.messages) std::cerr << m << "\n";
    return 2;
  }
  if (real_sc.target) {
    std::cerr << a.scenario << ": validate-sim runs the real engine in process (its step times are what the sim is "
                 "checked against): a scenario with target: (a server over HTTP) cannot be validated\n";
    return 2;
  }
  if (real_sc.backend.kind == BackendKind::sim) {
    std::cerr << a.scenario << ": validate-sim compares a real backend with the sim: backend.kind must not be sim\n";
    return 2;
  }
  if (real_sc.workload.mode != LoadMode::open_loop) {
    std::cerr << a.scenario << ": validate-sim needs an open-loop workload\n";
    return 2;
  }
  Scenario sim_sc = real_sc;
  sim_sc.backend.kind = BackendKind::sim;
  sim_sc.backend.sim_profile = a.profile;
  sim_sc.backend.sim_device.clear();  // the profile's device
  std::vector<size_t> which;
  for (size_t i = 0; i < real_sc.strategies.size(); ++i)
    if (a.strategies.empty() ||
        std::find(a.strategies.begin(), a.strategies.end(), real_sc.strategies[i].label) != a.strategies.end())
      which.push_back(i);
  if (which.empty() || (!a.capacities.empty() && a.capacities.size() != which.size())) {
    std::cerr << "give --capacity once per selected strategy (" << which.size() << "), or not at all\n";
    return 2;
  }
  const double delta = a.sensitivity_pct / 100.0;
  std::unique_ptr<PointRunner> sim, sim_lo, sim_hi, real;
  try {
    sim = std::make_unique<PointRunner>(sim_sc);
    if (delta > 0) {
      Scenario lo = sim_sc, hi = sim_sc;
      lo.backend.sim_cost_scale = 1.0 - delta;
      hi.backend.sim_cost_scale = 1.0 + delta;
      sim_lo = std::make_unique<PointRunner>(lo);
      sim_hi = std::make_unique<PointRunner>(hi);
    }
    std::cerr << "building the " << to_string(real_sc.backend.kind) << " backend...\n";
    real = std::make_unique<PointRunner>(real_sc);
  } catch (const std::exception& e) {
    std::cerr << a.scenario << ": " << e.what() << "\n";
    return 2;
  }
  const CapacitySpec spec = real_sc.capacity.value_or(CapacitySpec{});
  const int n = a.n_requests;  // per compared run; 0 = the workload's
  const SimCostModel cost = SimCostModel::from_profile_json(a.profile, resolve_model_config(real->backend_spec().model));
  const std::string dir = a.out.empty() ? real_sc.output_dir + "/sim-validation" : a.out;
  std::filesystem::create_directories(dir);
  write_records(dir + "/records_real.jsonl", {}, false);
  write_records(dir + "/records_sim.jsonl", {}, false);
  std::ofstream(dir + "/steps_real.jsonl", std::ios::trunc);

  std::ostringstream step_table;  // step error by class, every run
  std::vector<std::string> layout_notes;  // strategies priced from a profile of the other KV layout
  // Written after every compared run, so an interrupted validation keeps what it measured.
  auto write_summary = [&](const nlohmann::ordered_json& runs, const std::string& table, double worst, double worst_p50) {
    nlohmann::ordered_json j;
    j["schema"] = "servelab.sim-validation/1";
    j["scenario"] = real_sc.name;
    j["backend"] = to_string(real_sc.backend.kind);
    j["model"] = real->backend_spec().model;
    j["profile"] = a.profile;
    j["host_overhead"] = {{"per_step_s", cost.host.per_step_s}, {"per_seq_s", cost.host.per_seq_s}};
    j["profile_kv"] = cost.kv_layout;
    j["warmup_requests"] = a.warmup_requests;
    j["real_repeats"] = a.real_repeats;
    j["sensitivity_pct"] = a.sensitivity_pct;
    j["n_requests_per_run"] = n > 0 ? n : real_sc.planned_requests();
    j["slo"] = {{"ttft_ms", real_sc.slo.ttft_ms}, {"tpot_ms", real_sc.slo.tpot_ms}, {"attainment", real_sc.slo.attainment}};
    nlohmann::ordered_json env;
    const analysis::Environment e =
        analysis::detect_environment(to_string(real_sc.backend.kind), current_commit(), SERVELAB_VERSION);
    analysis::to_json(env, e);
    j["environment"] = env;
    j["max_abs_relative_error"] = worst;
    j["max_abs_relative_error_p50"] = worst_p50;
    j["runs"] = runs;
    std::ofstream(dir + "/validation.json") << j.dump(2) << "\n";
    char host_text[96] = "none in this profile";
    if (!cost.host.zero())
      std::snprintf(host_text, sizeof host_text, "%.2f us + %.3f us per sequence", cost.host.per_step_s * 1e6,
                    cost.host.per_seq_s * 1e6);
    std::ostringstream md;
    md << "# Sim validation: " << real_sc.name << "\n\n"
       << "Real backend `" << to_string(real_sc.backend.kind) << "` vs the sim calibrated from `" << a.profile
       << "`, the same plans; error = (sim − real) / real. Measured on " << e.cpu_model << " (" << e.n_cores
       << " hardware threads), commit " << e.commit << ", " << e.date << ". The sim adds the engine's host work per "
       << "step measured by the profile: "
       << host_text << ".";
    for (const std::string& note : layout_notes) md << " Note: " << note << ".";
    if (a.real_repeats > 1)
      md << " Each point ran " << a.real_repeats << " times on the real backend (the same plan): \"real\" is their "
         << "mean, \"real spread\" their (max − min) / mean, the machine's own run-to-run noise.";
    md << " \"sampling noise\": the half-width of the real figure's bootstrap 95% interval over the first real run's "
       << "requests (resampled 200 times), relative: how far that percentile moves by which requests happened to be in "
       << "a run of this many; the requests of a run queue behind each other, so the true run-to-run noise is larger. "
       << "An error within it is not resolved by this many requests (for a p99 of a few hundred requests, near the "
       << "maximum, the bootstrap understates it).";
    if (delta > 0)
      md << " \"sensitivity\": the % the sim's figure moves per 1% of every step's cost (the sim rerun with each step "
         << a.sensitivity_pct << "% dearer and cheaper); \"from steps\" = sensitivity × the steps' total error, the "
         << "part of the figure's error the step prices alone explain (queueing amplifies a step error near capacity).";
    md << "\n\n"
       << table << "\nWorst |error|: " << worst * 100 << "% (p50 figures: " << worst_p50 * 100 << "%).\n\n"
       << "Where the steps' error comes from (every real step priced by the profile; error = (Σ predicted − Σ "
       << "measured) / Σ measured; steps_real.jsonl has each step):\n\n"
       << step_table.str();
    std::ofstream(dir + "/validation.md") << md.str();
    return md.str();
  };
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  std::ostringstream table;
  char line[256];
  std::snprintf(line, sizeof line,
                "| strategy | load | rate (req/s) | figure | real | sim | error | real spread | sampling noise | sensitivity "
                "| from steps |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  table << line;
  step_table << "| strategy | load | steps | class | Σ measured (s) | Σ predicted (s) | error | median measured/predicted |\n"
             << "|---|---|---|---|---|---|---|---|\n";
  double worst = 0.0, worst_p50 = 0.0;
  bool warmed = a.warmup_requests <= 0;
  for (size_t k = 0; k < which.size(); ++k) {
    const size_t i = which[k];
    const std::string& label = real_sc.strategies[i].label;
    double capacity = a.capacities.empty() ? 0.0 : a.capacities[k];
    nlohmann::ordered_json search = nullptr;
    if (capacity <= 0) {
      analysis::BisectionOptions bo;
      bo.target = real_sc.slo.attainment;
      bo.rate_lo = spec.rate_lo;
      bo.rate_hi = spec.rate_hi;
      bo.precision = spec.precision;
      bo.precision_pct = spec.precision_pct;
      bo.max_probes = spec.max_probes;
      const analysis::StrategyCapacity c = analysis::find_capacity(
          label,
          [&](double rate) {
            PointRunOptions o;
            o.n_requests = spec.n_requests;  // the search is virtual time: it can afford capacity.n_requests
            const PointRun run = sim->run(i, rate, o);
            return analysis::probe_from_metrics(rate, analysis::compute_metrics(run.label, run.records, {}, analysis_slo(sim_sc)),
                                                run.wall_s);
          },
          bo);
      if (!c.found) {
        std::cerr << label << ": the sim found no rate meeting the SLO (" << c.note << ")\n";
        return 1;
      }
      capacity = c.capacity;
      search = analysis::capacity_json({c}, bo.target, {})["strategies"][0];
    }
    std::fprintf(stderr, "%s: sim capacity %.4g req/s\n", label.c_str(), capacity);
    const std::string layout = to_string(real_sc.strategies[i].kv.kind);
    if (!cost.kv_layout.empty() && cost.kv_layout != layout) {
      std::fprintf(stderr, "warning: %s keeps %s KV but %s timed %s KV: attention reads them differently; profile with "
                           "`servelab profile --kv %s`\n",
                   label.c_str(), layout.c_str(), a.profile.c_str(), cost.kv_layout.c_str(), layout.c_str());
      layout_notes.push_back(label + " keeps " + layout + " KV, the profile timed " + cost.kv_layout + " KV");
    }
    for (double load : a.loads) {
      const double rate = load * capacity;
      PointRunOptions o;
      o.n_requests = n;
      o.keep_token_times = true;
      o.predict_with = &cost;
      if (!warmed) {  // the process's first steps pay one-off costs (library and kernel loading, first
                      // calls per shape) that a long-running server has paid long ago: not compared
        PointRunOptions w;
        w.n_requests = a.warmup_requests;
        std::fprintf(stderr, "  warm-up: %d requests of %s at %.4g req/s on the real backend (not compared)\n",
                     a.warmup_requests, label.c_str(), rate);
        (void)real->run(i, rate, w);
        warmed = true;
      }
      std::vector<analysis::RunMetrics> mrs;
      std::vector<StepTiming> timings;  // every real run's steps
      std::vector<RequestRecord> first_records;  // the first real run's: its sampling noise
      int64_t pre_real = 0;
      double real_wall = 0.0;
      for (int rep = 0; rep < a.real_repeats; ++rep) {
        std::fprintf(stderr, "  %s at %.0f%% (%.4g req/s): real run%s...\n", label.c_str(), load * 100, rate,
                     a.real_repeats > 1 ? (" " + std::to_string(rep + 1) + "/" + std::to_string(a.real_repeats)).c_str() : "");
        PointRun r = real->run(i, rate, o);
        if (rep > 0) {  // the same plan again: its records under their own run label
          r.label += "#" + std::to_string(rep + 1);
          for (RequestRecord& rec : r.records) rec.run = r.label;
        }
        write_records(dir + "/records_real.jsonl", r.records, true);
        {
          std::ofstream steps(dir + "/steps_real.jsonl", std::ios::app);
          for (const StepTiming& t : r.step_timings) steps << step_timing_line(r.label, t);
        }
        mrs.push_back(analysis::compute_metrics(r.label, r.records, {}, analysis_slo(real_sc)));
        if (rep == 0) first_records = r.records;
        timings.insert(timings.end(), r.step_timings.begin(), r.step_timings.end());
        pre_real += preemptions(r.records);
        real_wall += r.wall_s;
      }
      const PointRun s = sim->run(i, rate, o);
      write_records(dir + "/records_sim.jsonl", s.records, true);
      const analysis::RunMetrics& mr = mrs.front();
      const analysis::RunMetrics ms = analysis::compute_metrics(s.label, s.records, {}, analysis_slo(sim_sc));
      nlohmann::ordered_json run;
      run["strategy"] = label;
      run["load"] = load;
      run["rate"] = rate;
      run["n_requests"] = mr.n_requests;
      run["real_wall_s"] = real_wall;
      // Step level: each real step's measured time over what the profile predicts for its shape.
      // Apart from queueing, this is the cost model's own error, and on a shared machine it also
      // shows how much slower (load) the steps ran than when the profile was measured.
      std::vector<double> ratio;
      double sum_measured = 0.0, sum_predicted = 0.0;
      for (const StepTiming& t : timings) {
        ratio.push_back(t.measured_s / t.predicted_s);
        sum_measured += t.measured_s;
        sum_predicted += t.predicted_s;
      }
      std::sort(ratio.begin(), ratio.end());
      auto pct = [&](double q) { return ratio.empty() ? NAN : ratio[static_cast<size_t>(q * (ratio.size() - 1))]; };
      run["steps"] = {{"n_steps", ratio.size()},
                      {"measured_over_predicted_p10", pct(0.1)},
                      {"measured_over_predicted_p50", pct(0.5)},
                      {"measured_over_predicted_p90", pct(0.9)},
                      {"total_measured_s", sum_measured},
                      {"total_predicted_s", sum_predicted},
                      {"total_error", sum_measured > 0 ? (sum_predicted - sum_measured) / sum_measured : NAN}};
      std::snprintf(line, sizeof line, "| %s | %.0f%% | %.4g | steps: sim/real total time (%zu steps) | %.4g s | %.4g s | %+.1f%% | | | | |\n",
                    label.c_str(), load * 100, rate, ratio.size(), sum_measured, sum_predicted,
                    sum_measured > 0 ? (sum_predicted - sum_measured) / sum_measured * 100 : NAN);
      table << line;
      nlohmann::ordered_json classes = nlohmann::ordered_json::array();
      for (const StepClassError& c : step_class_errors(timings)) {
        classes.push_back({{"class", c.name}, {"n_steps", c.n_steps}, {"total_measured_s", c.measured_s},
                           {"total_predicted_s", c.predicted_s}, {"total_error", c.error()},
                           {"measured_over_predicted_p50", c.ratio_p50}});
        std::snprintf(line, sizeof line, "| %s | %.0f%% | %lld | %s | %.4g | %.4g | %+.1f%% | %.3f |\n", label.c_str(),
                      load * 100, static_cast<long long>(c.n_steps), c.name.c_str(), c.measured_s, c.predicted_s,
                      c.error() * 100, c.ratio_p50);
        step_table << line;
      }
      run["steps"]["classes"] = classes;
      run["sim_wall_s"] = s.wall_s;
      if (s.cost_counts)
        run["sim_cost_counts"] = {{"profile", s.cost_counts->profile},
                                  {"profile_roofline", s.cost_counts->profile_roofline},
                                  {"roofline", s.cost_counts->roofline}};
      const double steps_error = sum_measured > 0 ? (sum_predicted - sum_measured) / sum_measured : NAN;
      std::vector<Figure> figures = figures_of(mrs, ms);
      set_noise(figures, first_records, analysis_slo(real_sc));
      if (delta > 0) {
        const PointRun lo = sim_lo->run(i, rate, o), hi = sim_hi->run(i, rate, o);
        set_sensitivity(figures, analysis::compute_metrics(lo.label, lo.records, {}, analysis_slo(sim_sc)),
                        analysis::compute_metrics(hi.label, hi.records, {}, analysis_slo(sim_sc)), delta);
      }
      nlohmann::ordered_json figs;
      for (const Figure& f : figures) {
        figs[f.name] = {{"real", f.real}, {"sim", f.sim}, {"relative_error", f.error()}};
        if (!std::isnan(f.sensitivity)) {
          figs[f.name]["sensitivity"] = f.sensitivity;
          figs[f.name]["error_from_steps"] = f.sensitivity * steps_error;
        }
        if (!std::isnan(f.noise)) figs[f.name]["real_sampling_noise"] = f.noise;
        if (f.reals.size() > 1) {
          figs[f.name]["real_runs"] = f.reals;
          figs[f.name]["real_spread"] = f.spread();
        }
        worst = std::max(worst, std::abs(f.error()));
        if (std::string(f.name).find("p50") != std::string::npos) worst_p50 = std::max(worst_p50, std::abs(f.error()));
        std::snprintf(line, sizeof line, "| %s | %.0f%% | %.4g | %s | %.4g | %.4g | %+.1f%% | %s | %s | %s | %s |\n",
                      label.c_str(), load * 100, rate, f.name, f.real, f.sim, f.error() * 100,
                      percent_or_dash(f.spread()).c_str(), percent_or_dash(f.noise).c_str(),
                      times_or_dash(f.sensitivity).c_str(),
                      percent_or_dash(f.sensitivity * steps_error).c_str());
        table << line;
      }
      run["figures"] = figs;
      // Preemptions (KV full): near the KV cliff they decide the TTFT tail, and a small step-time
      // error moves when the arena fills, so the counts are shown beside the figures (real: summed
      // over the repeats).
      const int64_t pre_sim = preemptions(s.records);
      run["preemptions"] = {{"real", pre_real}, {"sim", pre_sim}};
      if (pre_real > 0 || pre_sim > 0) {
        std::snprintf(line, sizeof line, "| %s | %.0f%% | %.4g | preemptions (count, not an error figure) | %lld | %lld | | | | | |\n",
                      label.c_str(), load * 100, rate, static_cast<long long>(pre_real), static_cast<long long>(pre_sim));
        table << line;
      }
      std::fprintf(stderr, "  done: real %.1f s wall; worst error so far %.1f%%\n", real_wall, worst * 100);
      runs.push_back(run);
      write_summary(runs, table.str(), worst, worst_p50);
    }
    if (!search.is_null()) {
      runs.back()["capacity_search"] = search;
      write_summary(runs, table.str(), worst, worst_p50);
    }
  }

  std::cout << write_summary(runs, table.str(), worst, worst_p50) << "wrote " << dir << "/validation.json\n";
  return 0;
}

const Registrar register_validate_sim(
    "validate-sim", "Measure the sim's error: the same plans on a real backend and on the sim calibrated from its profile",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<ValidateSimArgs>();
      sub.add_option("scenario", a->scenario, "Scenario YAML file (a real backend: cpu or cuda)")->required()->check(CLI::ExistingFile);
      sub.add_option("--profile", a->profile, "servelab profile --json output of the same backend and model")
          ->required()
          ->check(CLI::ExistingFile);
      sub.add_option("--out,-o", a->out, "Output folder (default: <output_dir>/sim-validation)");
      sub.add_option("--set", a->overrides, "Override a scenario value: key.path=value (repeatable)");
      sub.add_option("--strategy", a->strategies, "Only these strategy labels (repeatable)");
      sub.add_option("--loads", a->loads, "Fractions of the sim's capacity to compare at")->delimiter(',')->capture_default_str();
      sub.add_option("--capacity", a->capacities, "Capacity per selected strategy (req/s) instead of the sim's bisection")
          ->delimiter(',');
      sub.add_option("--n-requests", a->n_requests, "Measured requests per run (default: the workload's n_requests)");
      sub.add_option("--warmup-requests", a->warmup_requests,
                     "Requests of a discarded real run before the first compared one (0 = none)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
      sub.add_option("--real-repeats", a->real_repeats,
                     "Real runs per point (same plan): their mean is compared and their spread printed")
          ->capture_default_str()
          ->check(CLI::Range(1, 100));
      sub.add_option("--sensitivity", a->sensitivity_pct,
                     "Rerun the sim with every step this % dearer and cheaper and print each figure's change per 1% "
                     "of step cost (0 = skip)")
          ->capture_default_str()
          ->check(CLI::Range(0.0, 50.0));
      sub.footer(
          "Capacity is searched on the sim (capacity: section, slo: target); the real runs then run\n"
          "at each --loads fraction of it, in real time.\n\n"
          "Example:\n"
          "  servelab validate-sim results/sim-validation/qwen-cpu.yaml --profile results/profiles/qwen2.5-0.5b-cpu.json");
      return [a] { return validate_sim_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
