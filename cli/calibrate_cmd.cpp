// servelab calibrate STEPS --profile P --preset MODEL --json OUT [--run LABEL] [--skip-s S]:
// folds a real serving run's recorded steps (a cpu / cuda run's steps.jsonl, or validate-sim's
// steps_real.jsonl) into a profile as samples of their own (loadgen/step_calibration.h), writes the
// calibrated profile and prints the steps' error by class under the profile as given and as
// calibrated. The run should be the scenario the sim is to predict, on the same GPU, with another
// seed than the plans it will be compared with (matrix.sh CALIBRATE=1 takes 300 requests at 65%
// of the grid's capacity: results/sim-validation/README.md).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "analysis/environment.h"
#include "cli/command.h"
#include "engine/backend/cost_model.h"
#include "engine/backend/make_backend.h"
#include "loadgen/measuring_backend.h"
#include "loadgen/step_calibration.h"
#include "loadgen/step_error.h"
#include "loadgen/step_timing_file.h"

namespace servelab::cli {
namespace {

/// What the run beside the steps file says it ran (a run folder's runs.json, validate-sim's
/// validation.json): its model must be the profile's shape and its backend the profile's, else the
/// samples would price another engine; a device or KV layout other than the profile's is warned of.
void check_steps_source(const std::string& steps_path, const nlohmann::ordered_json& profile, const std::string& run) {
  const std::filesystem::path dir = std::filesystem::path(steps_path).parent_path();
  nlohmann::json meta;
  std::string model, backend, device, file;
  std::vector<std::pair<std::string, std::string>> kv_by_run;  // label, kv
  for (const char* name : {"runs.json", "validation.json"}) {
    std::ifstream in(dir / name);
    if (!in) continue;
    try {
      meta = nlohmann::json::parse(in);
    } catch (const std::exception&) {
      continue;  // not ours to judge
    }
    file = (dir / name).string();
    const nlohmann::json& sc = meta.contains("scenario") && meta["scenario"].is_object() ? meta["scenario"] : meta;
    model = sc.value("model", std::string());
    backend = sc.value("backend", meta.value("backend", std::string()));
    if (meta.contains("environment") && meta["environment"].is_object())
      device = meta["environment"].value("device", std::string());
    if (meta.contains("runs") && meta["runs"].is_array())
      for (const nlohmann::json& r : meta["runs"])
        if (r.is_object() && r.contains("label") && r.contains("kv") && r["kv"].is_string())
          kv_by_run.emplace_back(r["label"].get<std::string>(), r["kv"].get<std::string>());
    break;
  }
  if (file.empty()) return;
  const std::string p_backend = profile.value("backend", std::string());
  if (!backend.empty() && !p_backend.empty() && backend != p_backend)
    throw std::invalid_argument(file + ": the steps ran on the " + backend + " backend, the profile timed the " + p_backend +
                                " backend");
  if (!model.empty() && profile.contains("model") && profile["model"].is_object()) {
    const std::string hash = profile["model"].value("shape_hash", std::string());
    std::optional<ModelConfig> ran;
    try {
      ran = resolve_model_config(model);
    } catch (const std::exception&) {
    }
    if (ran && !hash.empty() && model_shape_hash(*ran) != hash)
      throw std::invalid_argument(file + ": the steps ran " + model + ", the profile timed " +
                                  profile["model"].value("name", std::string("another model")));
  }
  const std::string p_device = profile.value("device", std::string());
  // cuda names its GPU alike in both ("cuda: NVIDIA H200, ..." and "NVIDIA H200, ..."); cpu does not
  if (backend == "cuda" && !p_device.empty() && device.find(':') != std::string::npos && device.find(p_device) == std::string::npos)
    std::cerr << "note: the steps ran on " << device << ", the profile was taken on " << p_device << "\n";
  const std::string p_kv = profile.contains("options") && profile["options"].is_object()
                               ? profile["options"].value("kv", std::string())
                               : std::string();
  for (const auto& [label, kv] : kv_by_run)
    if (!p_kv.empty() && kv != p_kv && (run.empty() || run == label))
      std::cerr << "note: run " << label << " kept " << kv << " KV, the profile timed " << p_kv
                << " (--run picks one run of the file)\n";
}

const Registrar kCalibrate(
    "calibrate", "Fold a real serving run's steps into a profile, so the sim prices the scenario's own step mix as served",
    [](CLI::App& sub) -> CommandMain {
      struct Opts {
        std::string steps, profile, preset, json, run;
        double skip_s = 2.0;
        int tensor_parallel = 1;
        bool host_from_run = false;
      };
      auto o = std::make_shared<Opts>();
      sub.add_option("steps", o->steps, "a cpu/cuda run's steps.jsonl or validate-sim's steps_real.jsonl (uncompressed)")
          ->required()
          ->check(CLI::ExistingFile);
      sub.add_option("--profile", o->profile, "servelab profile --json file of the same backend, GPU and model")
          ->required()
          ->check(CLI::ExistingFile);
      sub.add_option("--preset", o->preset, "the model the steps ran (a preset or checkpoint folder)")->required();
      sub.add_option("--json", o->json, "where to write the calibrated profile")->required();
      sub.add_option("--run", o->run, "only the steps of this run label (e.g. continuous-paged@8)");
      sub.add_option("--tensor-parallel", o->tensor_parallel, "the profile's and the steps' degree")->check(CLI::PositiveNumber);
      sub.add_option("--skip-s", o->skip_s, "leave out each run's first seconds (graph captures, first use)")
          ->check(CLI::NonNegativeNumber);
      sub.add_flag("--host-from-run", o->host_from_run,
                   "also replace the profile's host_overhead by the engine's host time a step in the run (its "
                   "back-to-back steps' start-to-start minus forward(); with fewer than 50 such steps, or "
                   "validate-sim's steps_real.jsonl, the probe's is kept)");
      sub.footer(
          "Example:\n"
          "  servelab run cell.yaml --set seed=1011 --set workload.rates=[8] --set workload.n_requests=300 --out calib\n"
          "  servelab calibrate calib/steps.jsonl --profile profile.json --preset llama3-8b --json calibrated.json\n");
      return [o]() -> int {
        try {
          const ModelConfig model = resolve_model_config(o->preset);
          const SimCostModel before = SimCostModel::from_profile_json(o->profile, model, std::nullopt, o->tensor_parallel);
          std::vector<RecordedStep> recorded = read_recorded_steps(o->steps, o->run);
          nlohmann::ordered_json profile;
          {
            std::ifstream in(o->profile);
            profile = nlohmann::ordered_json::parse(in);
          }
          check_steps_source(o->steps, profile, o->run);
          CalibrationOptions opts;
          opts.skip_s = o->skip_s;
          opts.steps_path = o->steps;
          opts.run = o->run;
          opts.date = analysis::utc_now_iso8601();
          const CalibrationSummary sum = add_calibration_samples(profile, recorded, before, model, opts);
          std::optional<HostFromRun> host;
          if (o->host_from_run) {
            host = host_overhead_from_run(recorded, o->skip_s);
          }
          if (host) {
            nlohmann::ordered_json pts = nlohmann::ordered_json::array();
            for (const auto& [seqs, sec] : host->points) pts.push_back({{"seqs", seqs}, {"seconds", sec}});
            profile["host_overhead"] = {{"per_step_s", host->fitted.per_step_s}, {"per_seq_s", host->fitted.per_seq_s},
                                        {"points", pts}, {"source", "calibration run: " + o->steps}};
          }
          {  // beside it first, then renamed: --json may name the profile itself, which a failed write must not lose
            const std::string tmp = o->json + ".tmp";
            std::ofstream out(tmp, std::ios::trunc);
            if (!out) throw std::runtime_error(o->json + ": cannot write");
            out << profile.dump() << "\n";  // compact: a calibration adds thousands of samples
            out.close();
            if (!out) throw std::runtime_error(o->json + ": write failed");
            std::filesystem::rename(tmp, o->json);
          }
          const SimCostModel after = SimCostModel::from_profile_json(o->json, model, std::nullopt, o->tensor_parallel);
          std::vector<StepTiming> all;
          for (RecordedStep& r : recorded) all.push_back(std::move(r.timing));
          // Every step priced in run order (the load state follows them all), the table over those added.
          auto table = [&](const SimCostModel& cost) {
            price_step_timings(all, cost, model);
            std::vector<StepTiming> added;
            for (size_t i : sum.added) added.push_back(all[i]);
            return step_class_table(added);
          };
          std::cout << o->json << ": " << sum.used << " steps added to " << o->profile << "'s samples ("
                    << sum.skipped_warmup << " in each run's first " << o->skip_s << " s, " << sum.skipped_lora
                    << " with adapters, " << sum.skipped_swap << " after a swap left out)";
          if (sum.de_heated) std::cout << "; each divided by the sustained-load factor at its point of the run (at most " << sum.max_factor << ")";
          if (host)
            std::cout << "\nhost_overhead from the run's " << host->steps << " back-to-back steps: " << host->fitted.per_step_s * 1e6
                      << " us + " << host->fitted.per_seq_s * 1e6 << " us a sequence (replaces the probe's)";
          else if (o->host_from_run)
            std::cout << "\nhost_overhead: the probe's kept (--host-from-run needs 50 or more steps after which requests "
                         "waited, from a cpu/cuda run's steps.jsonl)";
          std::cout << "\n\nthe steps added, under the profile as given:\n" << table(before) << "\nand as calibrated:\n" << table(after);
          return 0;
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
          return 2;
        }
      };
    });

}  // namespace
}  // namespace servelab::cli
