// servelab price-steps STEPS.jsonl --profile P --preset MODEL [--device D --retarget] [--tensor-parallel N]:
// prices a real run's recorded steps (validate-sim's steps_real.jsonl, or a cpu / cuda run's
// steps.jsonl: each step's shape and its measured forward() time) with a profile's cost model, without running anything, and prints the
// error by step class as validate-sim does. With --device and --retarget the profile may be of
// another GPU (SimCostModel::from_profile_json's retarget): what a profile of one GPU says of
// another's measured steps (results/sim-validation/cross-gpu/).
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/backend/cost_model.h"
#include "engine/backend/hardware.h"
#include "engine/backend/make_backend.h"
#include "loadgen/measuring_backend.h"
#include "loadgen/step_error.h"
#include "loadgen/step_timing_file.h"

namespace servelab::cli {
namespace {

/// Every priced step, a JSON line each in the order read: for a residual analysis by any feature
/// of the shape (results/sim-validation/step_residuals.py).
void write_per_step(const std::string& path, const std::vector<StepTiming>& steps) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot write");
  for (const StepTiming& t : steps) {
    const StepShape& s = t.shape;
    out << nlohmann::json{{"measured_s", t.measured_s},       {"predicted_s", t.predicted_s},
                          {"n_tokens", s.n_tokens},           {"n_padding_tokens", s.n_padding_tokens},
                          {"n_seqs", s.n_seqs},               {"n_sampled", s.n_sampled},
                          {"sum_context", s.sum_context},     {"max_context", s.max_context},
                          {"prefill_pairs", s.prefill_pairs}, {"decode_context", s.decode_context},
                          {"verify_rows", s.verify_rows}}
               .dump()
        << "\n";
  }
  if (!out) throw std::runtime_error(path + ": write failed");
}

const Registrar kPriceSteps(
    "price-steps", "Price a real run's recorded steps with a profile (optionally of another GPU) and print the error by class",
    [](CLI::App& sub) -> CommandMain {
      struct Opts {
        std::string steps, profile, preset, device, run, per_step;
        bool retarget = false;
        int tensor_parallel = 1;
      };
      auto o = std::make_shared<Opts>();
      sub.add_option("steps", o->steps, "a steps_real.jsonl (validate-sim's) or a cpu/cuda run's steps.jsonl (uncompressed)")->required()->check(CLI::ExistingFile);
      sub.add_option("--profile", o->profile, "servelab profile --json file")->required()->check(CLI::ExistingFile);
      sub.add_option("--preset", o->preset, "the model the steps ran (a preset or checkpoint folder)")->required();
      sub.add_option("--device", o->device, "price as this device (a sim preset: h100, h200, ...); default the profile's");
      sub.add_flag("--retarget", o->retarget, "with --device other than the profile's: scale the profile to it");
      sub.add_option("--tensor-parallel", o->tensor_parallel, "the profile's and the steps' degree")->check(CLI::PositiveNumber);
      sub.add_option("--run", o->run, "only the steps of this run label (e.g. continuous-paged@19)");
      sub.add_option("--per-step", o->per_step,
                     "also write every step priced (JSON lines: measured_s, predicted_s and its shape) to this file");
      sub.footer(
          "Example:\n"
          "  servelab price-steps steps_real.jsonl --profile h100.json --preset llama2-7b --device h200 --retarget\n");
      return [o]() -> int {
        try {
          const ModelConfig model = resolve_model_config(o->preset);
          std::optional<SimDevice> device;
          if (!o->device.empty()) device = SimDevice::preset(o->device);
          const SimCostModel cost = SimCostModel::from_profile_json(o->profile, model, device, o->tensor_parallel, o->retarget);
          std::vector<StepTiming> steps = read_step_timings(o->steps, o->run);
          price_step_timings(steps, cost, model);
          if (!o->per_step.empty()) write_per_step(o->per_step, steps);
          std::cout << "cost model: " << cost.source << "\n" << step_class_table(steps);
          return 0;
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
          return 2;
        }
      };
    });

}  // namespace
}  // namespace servelab::cli
