#pragma once
// StepRecord: one engine step as the in-process driver saw it; one JSON line each in steps.jsonl.
// Feeds the KV-utilization metric, the arena breakdown bars and the batch-size-over-time plot.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loadgen/records/roofline_record.h"

namespace servelab {

struct StepRecord {
  std::string run;
  double start_s = 0.0;   ///< from the run's start
  double duration_s = 0.0;
  int batch_size = 0;
  int n_tokens = 0;       ///< computed this step (padding excluded)
  int n_padding_tokens = 0;
  int n_waiting = 0;
  int n_running = 0;
  int n_preempted = 0;
  int n_swap_pool_full = 0;  ///< of those, swap preemptions that recomputed: the host swap pool was full
  // Speculative decoding (vLLM's spec_decode counters, this step): sequences that verified
  // drafts, the drafts, and the ones accepted.
  int spec_drafts = 0;
  int spec_draft_tokens = 0;
  int spec_accepted_tokens = 0;
  std::vector<int> spec_accepted_per_pos;  ///< accepted drafts by position (index 0 = first draft)
  std::vector<int> spec_drafted_per_pos;   ///< drafts of more than j tokens (JSON num_draft_tokens_per_pos)
  double spec_draft_s = 0.0;               ///< wall seconds the proposer drafted for (JSON spec_decode.draft_s)
  double spec_catch_up_s = 0.0;            ///< of those, the one-off catch-up (JSON spec_decode.catch_up_s)
  // A probe of the measured rule (JSON spec_decode.probe, when the step was one): sequences
  // probed, their draft tokens, and those that would have stood (none kept).
  int spec_probe_drafts = 0;
  int spec_probe_draft_tokens = 0;
  int spec_probe_accepted_tokens = 0;
  // Multi-LoRA (JSON "lora", when the step ran any adapter or passed any request over): distinct
  // adapters in the step, adapters loaded into the backend's slots for it (misses), and waiting
  // requests passed over while their adapter was being packed (lora.admit_when_packed).
  int n_loras = 0;
  int n_lora_loads = 0;
  int n_lora_waits = 0;
  // Structured output (JSON "structured", when the step had any): token masks filled for its
  // draws, the host seconds they took, tokens appended by jump-forward without a forward.
  int n_masks = 0;
  double mask_s = 0.0;
  int jump_forward_tokens = 0;
  // KV arena breakdown after the step, in token slots.
  int64_t kv_capacity = 0;
  int64_t kv_stored = 0;
  int64_t kv_reserved = 0;
  int64_t kv_internal_frag = 0;
  int64_t kv_external_frag = 0;
  int64_t kv_free = 0;
  /// Real backends (JSON "host", absent on the sim): the engine's host wall time before the
  /// forward (drafting, scheduling, KV moves, masks, building the step's rows: inside duration_s),
  /// the backend's execute() itself, and the engine's work after it (tokens, retirements, KV
  /// bookkeeping: after duration_s, before the next step). With start_s, the time between steps
  /// outside the engine (the driver's callbacks, admissions) follows.
  double host_before_s = 0.0;
  double forward_s = 0.0;
  double host_after_s = 0.0;
  /// cuda: of forward_s, the step's span on the device, from the forward's launch to its tokens
  /// (JSON "host.device_s", absent where not measured)
  double device_s = 0.0;
  /// The longest context a sequence of the step reaches (JSON "max_context"; 0 in files written
  /// before it was recorded)
  int max_context = 0;
  /// Real backends (cpu, cuda): the step's roofline at the run's ceilings (JSON "roofline");
  /// absent on the sim, whose step times are priced, not measured.
  std::optional<StepRoofline> roofline;

  /// stored / (stored + reserved + internal): share of request-held memory holding token states.
  double kv_utilization() const;

  /// Checks a step read from a file: start_s and duration_s finite and >= 0, counts and KV
  /// slots >= 0. Throws std::invalid_argument naming the field ("kv.free").
  void validate() const;
};

void to_json(nlohmann::json& j, const StepRecord& s);
void from_json(const nlohmann::json& j, StepRecord& s);
/// Reads steps.jsonl, validating each step; throws "path:line: message". *cut_tail as read_jsonl
/// (a last line cut by a kill is dropped).
std::vector<StepRecord> read_steps(const std::string& path, bool* cut_tail = nullptr);
std::string step_line(const StepRecord& s);

}  // namespace servelab
