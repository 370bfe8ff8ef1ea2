#pragma once
// Backend profiling: times real steps of a backend over a grid of shapes (prefill lengths, decode
// batch sizes × context lengths, batched prefills, chunked prefills at a context, and mixed
// steps of decodes plus a prefill chunk). `servelab profile` prints them, and the sim backend's
// profiled cost model (engine/backend/cost_model.h) is fitted to the JSON this writes.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cost_model.h"

namespace servelab {

/// The grid. validate() names the bad field.
struct ProfileOptions {
  std::vector<int> prefill_lens = {16, 32, 64, 128, 256};  ///< one sequence's prompt, from context 0
  std::vector<int> batch_sizes = {1, 2, 4, 8, 16};         ///< decode batch sizes (and batched prefills)
  std::vector<int> contexts = {32, 128, 256};              ///< decode contexts; chunked prefills start there
  int prompt_len = 128;        ///< per sequence in batched prefills (batch × prompt_len rows)
  int max_rows = 1024;         ///< batched prefills above this many rows are skipped
  std::vector<int> chunk_lens = {32, 128};                 ///< chunked-prefill and mixed-step chunks
  int repeats = 3;             ///< timed repeats per point (the median is kept) ...
  double min_point_s = 1.0;    ///< ... stopping early once the repeats took this long
  uint64_t seed = 0;           ///< prompt tokens
  void validate() const;
  /// Throws std::invalid_argument when the longest sequence exceeds model.max_position.
  void check_fits(const ModelConfig& model) const;
};

enum class ProfilePhase { prefill, decode, chunk, mixed };
const char* to_string(ProfilePhase p);

/// One grid point: the step's shape and its median time over the repeats.
struct ProfileSample {
  ProfilePhase phase = ProfilePhase::prefill;
  StepShape shape;
  double step_s = 0.0;          ///< median of times_s
  std::vector<double> times_s;  ///< every repeat: wall time of forward(), or the backend's predicted_s
};

struct ProfileReport {
  std::string backend;      ///< Backend::name()
  std::string device;       ///< what ran it, e.g. the CPU model and thread count
  std::string hardware;     ///< the SimDevice preset pricing steps beyond the grid ("cpu-2core", "h100")
  int tensor_parallel = 1;
  std::string commit;       ///< git commit of the build that measured it
  std::string date;         ///< UTC ISO 8601
  ModelConfig model;
  int kv_dtype_bytes = 4;   ///< bytes per K/V element in the arena
  ProfileOptions options;
  std::vector<ProfileSample> samples;
  double wall_s = 0.0;      ///< how long the whole profile took
};

/// Runs the grid on `backend` (init_kv is called here; a fresh backend is expected). Sequences
/// get paged KV blocks of 16 slots. Context before a decode or a chunk is taken as already
/// cached (its K/V slots hold whatever the arena holds): step time does not depend on the values,
/// and the grid costs only its timed steps. `progress`, when set, gets a line per point.
ProfileReport profile_backend(Backend& backend, const ProfileOptions& options,
                              const std::function<void(const std::string&)>& progress = {});

/// Aligned text table of the samples, with a header naming model, backend and device.
std::string profile_table(const ProfileReport& report);

/// {"schema": "servelab.profile/2", "backend", "device", "hardware", "tensor_parallel", "commit",
///  "date", "model": {name, shape_hash, dims...}, "kv_dtype_bytes", "options": {...},
///  "samples": [{"phase", "n_seqs", "n_tokens", "n_padding_tokens", "n_sampled", "sum_context",
///  "max_context", "prefill_pairs", "decode_context", "attention_pairs", "step_s", "times_s"}]}
std::string profile_json(const ProfileReport& report);

}  // namespace servelab
