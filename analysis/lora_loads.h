#pragma once
// Multi-LoRA: what a run's adapter misses cost the engine. A step that loaded adapters into the
// backend's slots (StepRecord::n_lora_loads > 0: the host -> GPU copy, and packing the adapter's
// image when the backend kept none) runs longer than its twin without; the run's such steps, how
// many loads they did, their total time and median duration, over every repetition's steps.
// Priced on the sim, measured on a GPU (docs/lora.md, "Serving side by side").
//
// And the steps in which a request waited for its adapter's packing (StepRecord::n_lora_waits:
// lora.admit_when_packed passed it over while others ran), and their time: how long the gate held
// requests back.
//
// summary.json, per run with at least one load: "lora_loads": {"n_loads", "n_steps", "step_s",
// "step_p50_ms", "wait_steps", "wait_s"}.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/records/step_record.h"

namespace servelab::analysis {

struct LoraLoads {
  int64_t n_loads = 0;       ///< adapters loaded into slots
  int64_t n_steps = 0;       ///< steps that loaded at least one
  double step_s = 0.0;       ///< those steps' time, summed
  double step_p50_ms = 0.0;  ///< their median duration
  int64_t wait_steps = 0;    ///< steps in which some request waited for its adapter's packing
  double wait_s = 0.0;       ///< those steps' time, summed
};

/// The loads of run `label` (or its repetitions "label#k") among `steps`; nullopt without any.
std::optional<LoraLoads> lora_loads(const std::string& label, const std::vector<StepRecord>& steps);

void to_json(nlohmann::ordered_json& j, const LoraLoads& l);
void from_json(const nlohmann::ordered_json& j, LoraLoads& l);

}  // namespace servelab::analysis
