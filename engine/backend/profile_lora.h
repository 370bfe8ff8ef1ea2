#pragma once
// `servelab profile --lora-rank R`: what multi-LoRA adds to a step on the profiled backend, so
// the sim prices adapters from the user's own device instead of the H200 fit its GPU presets
// carry (engine/backend/sim_lora.h). After the grid, in the same arena: decodes at every batch size
// (at most 6, at the middle context) on one adapter, and at the smallest, middle and largest with
// each of ProfileOptions::lora_adapters distinct adapters among the rows too; prefills of one
// prompt of each prefill length (at most 6) on one adapter, and a batched prefill at the middle
// batch size over 1 and each adapter count; every adapter random, of rank R on all seven linears;
// each point timed in turn with its base twin (the same step
// without adapters; the twins alternate, so drift cancels). The profile's JSON carries the points
// ("lora"); SimCostModel::from_profile_json fits the sim's LoRA figures to them (fit_lora).
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/profiler.h"
#include "engine/backend/sim_lora.h"

namespace servelab {

/// The LoRA points of options (lora_rank > 0), each sequence's lora_slot set (sequence i on slot
/// i mod the point's adapters); empty when lora_rank is 0.
std::vector<ProfilePoint> lora_profile_grid(const ProfileOptions& options);

/// Loads max(adapter counts) random adapters into the backend's slots, times every grid point
/// that fits `plan`'s arena against its base twin (options.warmup untimed runs of each, then
/// options.repeats timed pairs), and empties the slots again. Throws std::invalid_argument when
/// the backend runs no adapters (its caps: cuda under tensor parallelism refuses them).
LoraProfile profile_lora(Backend& backend, ProfileRunner& runner, const ProfileOptions& options, const ProfilePlan& plan,
                         const std::function<void(const std::string&)>& progress = {});

/// {"rank", "params", "points": [{"phase", "n_seqs", "rows", "adapters", "context", "base_s", "lora_s"}],
///  "fit": {"decode_row_s", "prefill_layer_s", "prefill_adapter_s", "prefill_row_s", "bandwidth_share"}}
/// ("fit" on `hardware`'s preset, for the reader; loading fits the points again; left out when
/// hardware is empty or unknown).
nlohmann::ordered_json lora_profile_json(const LoraProfile& lora, const ModelConfig& model, const std::string& hardware);

/// Reads what lora_profile_json wrote. Throws std::runtime_error naming the field or point.
LoraProfile lora_profile_from_json(const nlohmann::json& j);

/// The points as a table (base, with adapters, their ratio) and the fitted figures on `hardware`.
std::string lora_profile_table(const LoraProfile& lora, const ModelConfig& model, const std::string& hardware);

}  // namespace servelab
