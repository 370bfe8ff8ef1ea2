#include "loadgen/step_calibration.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/backend/profiler.h"
#include "engine/backend/sim_sustained.h"
#include "engine/backend/step_shape_json.h"
#include "loadgen/step_error.h"

namespace servelab {

const char* calibration_phase(const StepShape& s) {
  if (s.verify_rows > 0) return to_string(ProfilePhase::verify);
  if (is_decode_only(s)) return to_string(ProfilePhase::decode);
  if (s.decode_context > 0.0) return to_string(ProfilePhase::mixed);
  // one prefill piece from position 0 computes as many rows as its context holds
  return to_string(s.sum_context > s.n_tokens ? ProfilePhase::chunk : ProfilePhase::prefill);
}

CalibrationSummary add_calibration_samples(nlohmann::ordered_json& profile, const std::vector<RecordedStep>& steps,
                                           const SimCostModel& cost, const ModelConfig& model,
                                           const CalibrationOptions& options) {
  if (!profile.is_object() || !profile.contains("samples") || !profile["samples"].is_array())
    throw std::invalid_argument("the profile has no \"samples\" list");
  CalibrationSummary sum;
  const StepPricer pricer(cost, model);
  std::optional<RooflineTerms> terms;
  if (cost.sustained) terms = RooflineTerms::of(model, cost.device, cost.tensor_parallel);
  std::optional<SustainedState> load;
  sum.de_heated = cost.sustained != nullptr;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  std::string run;
  double prev_start = -1.0, run_start = -1.0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const RecordedStep& r = steps[i];
    const StepTiming& t = r.timing;
    const bool new_run = i == 0 || r.run != run || (t.start_s >= 0.0 && t.start_s < prev_start);
    if (new_run) {
      run = r.run;
      run_start = t.start_s;
      if (cost.sustained) load.emplace(*cost.sustained, *terms);  // each run starts from idle
    }
    if (t.start_s < 0.0) sum.de_heated = false;  // no start times: the load state cannot follow the run
    prev_start = t.start_s;
    // The state follows every real step, counted or not, as price_step_timings does.
    const double grid_s = pricer.seconds(t.shape);
    double factor = 1.0;
    if (load && grid_s > 0.0) factor = load->price(t.start_s, grid_s, t.shape, t.measured_s) / grid_s;
    if (t.start_s >= 0.0 && run_start >= 0.0 && t.start_s - run_start < options.skip_s) {
      ++sum.skipped_warmup;
      continue;
    }
    if (!t.lora.empty()) {
      ++sum.skipped_lora;
      continue;
    }
    if (r.swap_bytes > 0) {
      ++sum.skipped_swap;
      continue;
    }
    if (!sum.de_heated || !(factor > 0.0)) factor = 1.0;
    sum.max_factor = std::max(sum.max_factor, factor);
    const double step_s = t.measured_s / factor;
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    o["phase"] = calibration_phase(t.shape);
    const nlohmann::ordered_json shape = step_shape_json(t.shape);
    for (const auto& [k, v] : shape.items()) o[k] = v;
    o["step_s"] = step_s;
    o["times_s"] = nlohmann::ordered_json::array({step_s});
    o["source"] = "calibration";
    added.push_back(std::move(o));
    sum.added.push_back(i);
    ++sum.used;
  }
  if (sum.used == 0)
    throw std::invalid_argument("no step left to add (" + std::to_string(sum.skipped_warmup) + " within the first " +
                                std::to_string(options.skip_s) + " s of their run, " +
                                std::to_string(sum.skipped_lora) + " with adapters, " +
                                std::to_string(sum.skipped_swap) + " after a swap)");
  if (!sum.de_heated) sum.max_factor = 1.0;
  for (auto& o : added) profile["samples"].push_back(std::move(o));
  if (!profile.contains("calibration") || !profile["calibration"].is_array())
    profile["calibration"] = nlohmann::ordered_json::array();
  profile["calibration"].push_back({{"steps", options.steps_path},
                                    {"run", options.run},
                                    {"date", options.date},
                                    {"skip_s", options.skip_s},
                                    {"samples", sum.used},
                                    {"skipped", {{"warmup", sum.skipped_warmup},
                                                 {"lora", sum.skipped_lora},
                                                 {"swap", sum.skipped_swap}}},
                                    {"de_heated", sum.de_heated},
                                    {"max_factor", sum.max_factor}});
  return sum;
}

std::optional<HostFromRun> host_overhead_from_run(const std::vector<RecordedStep>& steps, double skip_s) {
  std::map<int64_t, std::vector<double>> by_seqs;
  int64_t used = 0;
  double run_first = -1.0;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const RecordedStep& a = steps[i];
    const RecordedStep& b = steps[i + 1];
    if (i == 0 || steps[i - 1].run != a.run || a.record_start_s < steps[i - 1].record_start_s) run_first = a.record_start_s;
    if (a.record_start_s < 0 || b.record_start_s < 0 || a.n_waiting <= 0 || b.run != a.run) continue;
    if (a.record_start_s - run_first < skip_s) continue;
    const double host = b.record_start_s - a.record_start_s - a.timing.measured_s;
    if (!(host >= 0.0) || host > 0.1) continue;  // a new run's clock, or the engine idle
    by_seqs[a.timing.shape.n_seqs].push_back(host);
    ++used;
  }
  if (used < 50) return std::nullopt;
  HostFromRun out;
  out.steps = used;
  for (auto& [seqs, v] : by_seqs) {
    if (v.size() < 8) continue;
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    out.points.emplace_back(double(seqs), v[v.size() / 2]);
  }
  if (out.points.empty()) return std::nullopt;
  out.fitted = HostOverhead::fit(out.points);
  return out;
}

}  // namespace servelab
