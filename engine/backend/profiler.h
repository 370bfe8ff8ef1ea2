#pragma once
// Backend profiling: times prefill and decode steps of a real backend over a KV manager, the
// figures `servelab profile` prints and the samples the sim backend's linear cost model is
// fitted to (SimCostModel::from_profile_json reads the "samples" this writes).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"

namespace servelab {

/// What to measure. validate() names the bad field.
struct ProfileOptions {
  std::vector<int> batch_sizes = {1, 32};  ///< sequences per step; prefill at batch 1 is always measured
  int prompt_len = 128;                    ///< prefill length, and the context decode starts from
  int decode_steps = 32;                   ///< timed decode steps per batch size
  uint64_t seed = 0;                       ///< prompt tokens
  /// Repeat a prefill measurement while the repeats so far took less than this (at most 5 times).
  double min_prefill_s = 0.3;
  void validate() const;
  /// Throws std::invalid_argument when prompt_len + decode_steps exceeds model.max_position.
  void check_fits(const ModelConfig& model) const;
};

enum class ProfilePhase { prefill, decode };
const char* to_string(ProfilePhase p);

/// One timed step, in the shape the sim cost model reads.
struct ProfileSample {
  ProfilePhase phase = ProfilePhase::prefill;
  int batch_size = 0;       ///< sequences in the step
  int64_t n_tokens = 0;     ///< positions computed
  int64_t sum_context = 0;  ///< Σ over sequences of n_computed + n_new after the step
  int n_sampled = 0;        ///< rows through the LM head
  double step_s = 0.0;      ///< wall time of forward(), or the backend's predicted_s when it gives one
};

/// A summary line: median step time at one (phase, batch size).
struct ProfileFigure {
  ProfilePhase phase = ProfilePhase::prefill;
  int batch_size = 0;
  int context = 0;          ///< tokens already cached per sequence before the first timed step
  int64_t n_tokens = 0;     ///< tokens per step
  int n_steps = 0;          ///< timed steps
  double median_step_s = 0.0;
  double tokens_per_s = 0.0;  ///< n_tokens / median_step_s
};

struct ProfileReport {
  std::string backend;      ///< Backend::name()
  std::string device;       ///< what ran it, e.g. the CPU model and thread count
  ModelConfig model;
  int kv_dtype_bytes = 4;   ///< bytes per K/V element in the arena
  ProfileOptions options;
  std::vector<ProfileFigure> figures;
  std::vector<ProfileSample> samples;
};

/// Runs the measurements on `backend` (init_kv is called here, sized for the largest batch;
/// a fresh backend is expected). Sequences get paged KV blocks of 16 slots.
ProfileReport profile_backend(Backend& backend, const ProfileOptions& options);

/// Aligned text table of the figures, with a header naming model, backend and device.
std::string profile_table(const ProfileReport& report);

/// {"schema": "servelab.profile/1", "backend", "device", "model": {...}, "options": {...},
///  "kv_dtype_bytes", "figures": [...], "samples": [{"phase", "batch_size", "n_tokens",
///  "sum_context", "n_sampled", "step_s"}, ...]}
std::string profile_json(const ProfileReport& report);

}  // namespace servelab
