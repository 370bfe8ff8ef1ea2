// servelab price-steps STEPS.jsonl --profile P --preset MODEL [--device D --retarget] [--tensor-parallel N]:
// prices a real run's recorded steps (validate-sim's steps_real.jsonl, or a cpu / cuda run's
// steps.jsonl: each step's shape and its measured forward() time) with a profile's cost model, without running anything, and prints the
// error by step class as validate-sim does. With --device and --retarget the profile may be of
// another GPU (SimCostModel::from_profile_json's retarget): what a profile of one GPU says of
// another's measured steps (results/sim-validation/cross-gpu/).
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/backend/cost_model.h"
#include "engine/backend/hardware.h"
#include "engine/backend/make_backend.h"
#include "loadgen/measuring_backend.h"
#include "loadgen/records/step_record.h"
#include "loadgen/step_error.h"

namespace servelab::cli {
namespace {

/// One step of validate-sim's steps_real.jsonl (n_tokens, n_padding_tokens, n_seqs, sum_context,
/// max_context, prefill_pairs, decode_context, measured_s).
StepTiming step_of_real_line(const nlohmann::json& j) {
  StepTiming t;
  t.measured_s = j.at("measured_s").get<double>();
  t.start_s = j.value("start_s", -1.0);  // written since 2026-11-30 (the sustained-load state)
  StepShape& s = t.shape;
  s.n_tokens = j.at("n_tokens").get<int64_t>();
  s.n_padding_tokens = j.value("n_padding_tokens", int64_t(0));
  s.n_seqs = j.at("n_seqs").get<int64_t>();
  s.n_sampled = j.value("n_sampled", s.n_seqs);  // steps_real.jsonl: every sequence draws
  s.sum_context = j.at("sum_context").get<int64_t>();
  s.max_context = j.at("max_context").get<int64_t>();
  s.prefill_pairs = j.at("prefill_pairs").get<double>();
  s.decode_context = j.at("decode_context").get<double>();
  s.attention_pairs = s.prefill_pairs + s.decode_context;
  if (j.contains("lora"))  // [rows, slot, params] of each entry on an adapter
    for (const nlohmann::json& r : j.at("lora"))
      t.lora.push_back({r.at(0).get<int32_t>(), r.at(1).get<int32_t>(), r.at(2).get<int64_t>()});
  return t;
}

/// One step of a run's steps.jsonl (a cpu or cuda run's, written since the step records carry
/// roofline.shape): the backend's forward time measured (host.forward_s, else duration_s), the shape
/// from the record and its roofline.shape.
StepTiming step_of_run_line(const nlohmann::json& j) {
  const StepRecord r = j.get<StepRecord>();
  if (!r.roofline || !r.roofline->shape)
    throw std::invalid_argument("a step record without roofline.shape (a sim run, or written before 2026-11-30): "
                                "nothing to price it by");
  const StepShapeRecord& h = *r.roofline->shape;
  StepTiming t;
  t.measured_s = r.forward_s > 0.0 ? r.forward_s : r.duration_s;
  t.start_s = r.start_s + (r.forward_s > 0.0 ? r.host_before_s : 0.0);  // when the forward began
  StepShape& s = t.shape;
  s.n_tokens = r.n_tokens;
  s.n_padding_tokens = r.n_padding_tokens;
  s.n_seqs = h.n_seqs;
  s.n_sampled = h.n_sampled;
  s.sum_context = h.sum_context;
  s.max_context = r.max_context;
  s.prefill_pairs = h.prefill_pairs;
  s.decode_context = h.decode_context;
  s.verify_rows = h.verify_rows;
  s.verify_pairs = h.verify_pairs;
  // StepShape::of charges each padding row the longest context's keys
  s.attention_pairs = s.prefill_pairs + s.decode_context + double(s.n_padding_tokens) * double(s.max_context);
  return t;
}

/// The steps of a steps_real.jsonl file or of a run's steps.jsonl (each line by its own keys:
/// measured_s, else duration_s and roofline.shape); `run` filters.
std::vector<StepTiming> read_steps(const std::string& path, const std::string& run) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<StepTiming> steps;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!run.empty() && j.value("run", std::string()) != run) continue;
      const StepTiming t = j.contains("measured_s") ? step_of_real_line(j) : step_of_run_line(j);
      if (t.shape.n_tokens < 1 || t.shape.n_seqs < 1 || !(t.measured_s > 0))
        throw std::invalid_argument("a step needs n_tokens, n_seqs and a measured time > 0");
      steps.push_back(t);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  if (steps.empty()) throw std::runtime_error(path + ": no steps" + (run.empty() ? "" : " of run " + run));
  return steps;
}

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
          std::vector<StepTiming> steps = read_steps(o->steps, o->run);
          price_step_timings(steps, cost, model);
          if (!o->per_step.empty()) write_per_step(o->per_step, steps);
          double measured = 0.0, predicted = 0.0;
          std::cout << "cost model: " << cost.source << "\n"
                    << std::left << std::setw(34) << "class" << std::right << std::setw(8) << "steps" << std::setw(14)
                    << "measured s" << std::setw(14) << "predicted s" << std::setw(10) << "error" << "\n";
          for (const StepClassError& c : step_class_errors(steps)) {
            measured += c.measured_s;
            predicted += c.predicted_s;
            std::cout << std::left << std::setw(34) << c.name << std::right << std::setw(8) << c.n_steps << std::fixed
                      << std::setprecision(3) << std::setw(14) << c.measured_s << std::setw(14) << c.predicted_s
                      << std::setprecision(1) << std::setw(9) << 100.0 * c.error() << "%\n";
          }
          std::cout << std::left << std::setw(34) << "all" << std::right << std::setw(8) << steps.size() << std::fixed
                    << std::setprecision(3) << std::setw(14) << measured << std::setw(14) << predicted
                    << std::setprecision(1) << std::setw(9) << 100.0 * (predicted - measured) / measured << "%\n";
          return 0;
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
          return 2;
        }
      };
    });

}  // namespace
}  // namespace servelab::cli
