#pragma once
// Backend profiling: times real steps of a backend over a grid of shapes (prefill lengths, decode
// batch sizes × context lengths, batched prefills, chunked prefills at a context, and mixed
// steps of decodes plus a prefill chunk). `servelab profile` prints them, and the sim backend's
// profiled cost model (engine/backend/cost_model.h) is fitted to the JSON this writes.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/ceiling_probe.h"
#include "engine/backend/host_overhead.h"
#include "engine/backend/profile_spread.h"
#include "engine/backend/sim_lora.h"
#include "engine/backend/sim_sustained.h"
#include "engine/backend/cost_model.h"
#include "engine/kv/kv_manager.h"

namespace servelab {

/// The grid. validate() names the bad field.
struct ProfileOptions {
  std::vector<int> prefill_lens = {16, 32, 64, 128, 256};  ///< one sequence's prompt, from context 0
  /// Decode batch sizes (and batched prefills). Every size up to 16: a step's cost need not be
  /// monotone in its rows (the cpu backend's BLAS: 3 rows cost more than 4, 11 more than 12), so
  /// interpolating between powers of two misprices the sizes between them.
  std::vector<int> batch_sizes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  std::vector<int> contexts = {32, 128, 256};              ///< decode contexts; chunked prefills start there
  /// Per sequence in batched prefills: batch × each length rows (several lengths: static batching's
  /// padded prefills reach batch × the longest prompt rows, beyond what short prompts cover).
  std::vector<int> prompt_lens = {128};
  int max_rows = 1024;         ///< batched prefills above this many rows are skipped; a mixed step's chunk fits beside its decodes
  std::vector<int> chunk_lens = {32, 128};                 ///< chunked-prefill and mixed-step chunks
  /// Longest sequence a point may make (the model's or the scenario's max length); 0 = no cap. A
  /// chunk or verification point at a context where its rows would pass it starts that much
  /// earlier instead (a prompt that long ends before that context), so a grid whose longest
  /// context is near the max length still profiles chunks. A decode point keeps its context up to
  /// max_len - 1 (a sequence's last step).
  int max_len = 0;
  int repeats = 3;             ///< timed repeats per point (the median is kept) ...
  double min_point_s = 1.0;    ///< ... stopping early once the repeats took this long
  /// Untimed runs of each point before its repeats: the cuda backend picks GEMM algorithms on a
  /// shape's first run and captures a decode graph on its second.
  int warmup = 0;
  /// Before the first timed point, untimed steps (a short prefill and the lead-in decode) for
  /// this many seconds: a process's first steps run slower than its later ones (on the 2-core VM
  /// up to 2x for ~0.2 s), and the grid's first points would take that. 0: one prefill only
  /// (`servelab profile` takes 1 s on cpu and cuda: --warmup-s).
  double warmup_s = 0.0;
  /// KV arena cap in bytes; 0 = no cap (the arena holds the grid's largest point). Points whose
  /// sequences need more are skipped and listed in the report.
  int64_t max_kv_bytes = 0;
  /// Write random K/V into the arena before timing (the cached context is never all zeros).
  bool fill_kv = true;
  /// How the timed sequences hold their K/V: paged (blocks of kProfileBlockSize, block tables) or
  /// naive (one contiguous region each): the backend's attention reads them differently, so a
  /// strategy is best priced from a profile of its own layout.
  KvKind kv_kind = KvKind::paged;
  /// Naive KV: spread each point's regions evenly over an arena of max_kv_bytes (set it to the
  /// runs' kv_cache size), as a serving engine's arena holds them after churn, instead of packing
  /// them at the start of an arena just big enough. Needs max_kv_bytes. (Paged blocks need no
  /// option: the manager recycles freed blocks first, in the profile as in a run.)
  bool kv_spread = false;
  /// Time the points in rounds (warm-up rounds, then `repeats` timed rounds, each over every
  /// point in a seeded shuffled order; min_point_s is not used) instead of each point's runs back
  /// to back: each timed step then follows other work, as a step does in serving (a GPU running
  /// the same compute-bound step back to back is held at its power limit; a lone prefill among
  /// decodes is not).
  bool interleave = false;
  /// With interleave: untimed decode steps (the grid's middle batch size at its middle context) run
  /// right before each timed step, so every timed step follows decode work, as most steps do in
  /// serving (a static batch's prefill follows seconds of its decodes). 0 = none.
  int lead_in = 0;
  /// With interleave: every point that is not a decode runs once untimed right before its timed run
  /// (after any lead_in decodes), so it is timed as a step that follows its own kind, as most chunk
  /// steps of a long-prompt run follow one (on an H200 those cost 4-6% more against their price than
  /// the ones after a decode step: results/sim-validation/mixed-2026-11-30/).
  bool lead_in_self = false;
  /// Backends that pad a decode step up to a batch bucket (Backend::decode_row_buckets: cuda's
  /// CUDA graphs run 9 sequences as 16) cost the same for every batch of a bucket but for its
  /// attention (the sim prices such decodes by the bucket they ran as: ProfiledStepModel's G):
  /// with this on, profile_backend also times decodes of b sequences for each bucket b up to the
  /// largest --batch that no --batch size runs as, so every bucket a run can reach is measured.
  bool bucket_edges = true;
  /// Also time decodes with padding rows, as static batching runs them once some of its
  /// sequences have finished (StepShape::padded_decode): for each batch size b >= 2 (and each of
  /// extra_decode_batches), b / 2 sequences (rounded up) plus the rest as padding rows, at the
  /// middle context. The sim prices
  /// padded decodes from these (cuda runs them outside its decode graphs; cpu skips attention and
  /// the LM head for padding rows).
  bool padded_decodes = true;
  /// Also time each decode point of b >= 2 sequences (batch_sizes and extra_decode_batches) with
  /// its contexts spread evenly over [c / 2, 3c / 2] (mean c, capped by max_len): serving's batches
  /// mix lengths and cost more than the same batch at its mean context, which the sim prices from
  /// these twins (ProfiledStepModel's a_spread, StepShape::decode_spread). Off by default (profile
  /// --spread-decodes): on the H200 matrix cells it priced long-prompt decodes closer and chat
  /// cells' further from the real runs (results/sim-validation/README.md, 2026-11-30).
  bool spread_decodes = false;
  /// The spread points' shape (profile_spread.h): even over [c/2, 3c/2] (default), or exponential
  /// (serving's long tail, the longest at ~c · ln 2b). Written to the profile's options.
  SpreadShape spread_shape = SpreadShape::even;
  /// Decode batch sizes timed besides batch_sizes (decodes only; profile_backend fills it from
  /// the backend's buckets when bucket_edges is on).
  std::vector<int> extra_decode_batches;
  /// Verification steps of speculative decoding: for each k listed, batch_sizes × contexts points
  /// in which every sequence computes k + 1 rows (its last token and k drafts) at the context and
  /// draws all of them, as the engine verifies drafts. Empty: none (the sim then prices a
  /// verifying sequence as a prefill chunk).
  std::vector<int> verify_ks;
  /// Multi-LoRA points (engine/backend/profile_lora.h): with a rank > 0, after the grid, decodes
  /// and prefills whose sequences all run random adapters of this rank on all seven linears, each
  /// timed in turn with its base twin; the sim fits its LoRA terms to them (sim_lora.h's fit_lora).
  /// 0: none.
  int lora_rank = 0;
  /// Distinct adapters among a LoRA point's sequences (each count up to the point's sequences;
  /// 1 always): how the per-adapter cost is told from the per-row one.
  std::vector<int> lora_adapters = {1, 8};
  /// After the grid, the sustained-load probe for this many seconds (engine/backend/
  /// profile_sustained.h): how the device slows under back-to-back work, which the sim prices each
  /// step's recent load by. 0: none (`servelab profile --sustained-s`, off by default).
  double sustained_s = 0.0;
  uint64_t seed = 0;           ///< prompt tokens and K/V fill
  void validate() const;
  /// Throws std::invalid_argument when the longest sequence exceeds model.max_position.
  void check_fits(const ModelConfig& model) const;
};

enum class ProfilePhase { prefill, decode, chunk, mixed, verify };
const char* to_string(ProfilePhase p);

/// Paged KV block size of every profiled sequence.
inline constexpr int kProfileBlockSize = 16;

/// One grid point: the sequences of one step, each with `context` positions already cached and
/// `n_new` computed by the step (a decode: n_new 1; a prefill: context 0).
struct ProfilePoint {
  ProfilePhase phase = ProfilePhase::prefill;
  struct Seq {
    int context = 0;
    int n_new = 0;
    int n_draft = 0;  ///< verify: of the n_new rows, the last n_draft are drafts (every row drawn)
    int lora_slot = -1;  ///< the backend's LoRA slot its rows run with (-1: the base model)
  };
  std::vector<Seq> seqs;
  int n_padding = 0;  ///< padding rows (computed and thrown away) besides the sequences' rows
  /// KV slots the point holds: every sequence rounded up to whole blocks of kProfileBlockSize.
  int64_t n_slots() const;
  /// Longest sequence (context + n_new).
  int max_len() const;
  /// "decode 256 seqs x context 4096 (+1)", for logs and the skipped list.
  std::string describe() const;
};

/// The grid's points in run order: one-sequence prefills, batched prefills (up to max_rows),
/// decodes (batch × context), chunks (chunk × context), mixed steps, verification steps.
std::vector<ProfilePoint> profile_grid(const ProfileOptions& options);

/// The points to time and the KV arena that holds them.
struct ProfilePlan {
  std::vector<ProfilePoint> points;   ///< grid order, each fitting the arena
  std::vector<ProfilePoint> skipped;  ///< need more than max_kv_bytes
  int64_t n_slots = 0;                ///< arena: the largest point kept (at most max_kv_bytes; all of it with kv_spread)
  int max_len = 1;                    ///< longest sequence of the points kept
};

/// Splits the grid by options.max_kv_bytes at `kv_bytes_per_slot` (the backend's). Throws
/// std::invalid_argument when no point fits, naming the budget and the smallest point's need.
ProfilePlan plan_profile(const ProfileOptions& options, int64_t kv_bytes_per_slot);

/// The sim device preset for a GPU description such as cuda_device_description's "NVIDIA H100
/// 80GB HBM3, 79.1 GiB, sm_90, 132 SMs": "h100", "h200", "a100-80gb", "l40s"; "" when none fits.
std::string sim_hardware_for_device(const std::string& description);

/// One grid point: the step's shape and its median time over the repeats.
struct ProfileSample {
  ProfilePhase phase = ProfilePhase::prefill;
  StepShape shape;
  double step_s = 0.0;          ///< median of times_s
  std::vector<double> times_s;  ///< every repeat: wall time of execute(), or the backend's predicted_s
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
  int64_t kv_bytes_per_slot = 0;      ///< the backend's K and V of one token, all layers
  int64_t kv_arena_bytes = 0;         ///< the arena the points ran in
  /// Backend::decode_row_buckets() of the profiled backend (a record of how its decodes ran; the
  /// grid gets knots past each bucket, see ProfileOptions::bucket_edges). Empty: steps ran as they came.
  std::vector<int> decode_row_buckets;
  std::vector<ProfileSample> samples;
  std::vector<ProfilePoint> skipped;  ///< grid points over options.max_kv_bytes, not timed
  /// cuda with tensor_parallel > 1: the measured in-place bf16 sum all-reduce, (message bytes,
  /// seconds per all-reduce), for the simulator's tensor-parallel term. Empty otherwise.
  std::vector<std::pair<int64_t, double>> all_reduce_s;
  /// The engine's host work per step outside execute() (loadgen/host_overhead_probe.h), and the
  /// (sequences per step, seconds per step) points it was fitted to; unset when not measured.
  std::optional<HostOverhead> host_overhead;
  std::vector<std::pair<double, double>> host_points;
  /// cpu: the copy bandwidth and GEMM peak probed beside the grid (engine/backend/ceiling_probe.h),
  /// which a run of `backend.ceilings: PROFILE` prices its steps' rooflines at; unset otherwise.
  std::optional<ProbedCeilings> ceilings;
  double wall_s = 0.0;      ///< how long the whole profile took
  /// A draft's report only: whole proposer rounds timed after its grid (engine/spec/draft_rounds.h).
  std::vector<DraftRound> rounds;
  /// options.lora_rank > 0: the LoRA points timed after the grid (engine/backend/profile_lora.h).
  std::optional<LoraProfile> lora;
  /// options.sustained_s > 0: the sustained-load probe (engine/backend/sim_sustained.h).
  std::optional<SustainedLoad> sustained;
};

/// Times points on one backend: owns a paged KV manager (blocks of kProfileBlockSize, no prefix
/// caching) over the backend's arena. Context before a decode or a chunk is taken as already
/// cached: its slots hold the random K/V written at construction (or whatever the arena held),
/// so a point costs only its timed steps. Used by profile_backend and by engine_bench.
class ProfileRunner {
 public:
  /// Calls backend.init_kv(n_slots); with fill_kv, writes seeded random K/V into every slot:
  /// fill_chunk_bytes of them swapped in from a host pool, repeated over the rest by copy_slots.
  /// `kv_kind`: paged (blocks of kProfileBlockSize) or naive (a contiguous region per sequence).
  /// `spread`: a point's sequences start n_slots / n_seqs slots apart (spacer allocations between
  /// them), not packed at the arena's start.
  ProfileRunner(Backend& backend, int64_t n_slots, int max_len, uint64_t seed, bool fill_kv,
                int64_t fill_chunk_bytes = int64_t(256) << 20, KvKind kv_kind = KvKind::paged, bool spread = false);
  ~ProfileRunner();
  ProfileRunner(const ProfileRunner&) = delete;
  ProfileRunner& operator=(const ProfileRunner&) = delete;
  /// `warmup` untimed runs of the point, then timed runs until `repeats` or until they took
  /// `min_s` (at least one); step_s is their median. Each run is one execute() of the same
  /// state (the cuda backend synchronizes the device before execute() returns). Throws
  /// std::logic_error when the point does not fit the arena.
  ProfileSample run(const ProfilePoint& point, int warmup, int repeats, double min_s);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The decode batch sizes bucket_edges adds: each bucket b up to the largest batch size that no
/// batch size runs as (none in (the bucket before b, b]); ascending.
std::vector<int> bucket_edge_batches(const std::vector<int>& batch_sizes, const std::vector<int>& buckets);

/// The lead-in step: the decode of the grid's middle batch size at its middle context, or the first
/// unpadded decode kept when that one is over the KV budget; null when no decode is kept.
const ProfilePoint* lead_in_point(const std::vector<ProfilePoint>& points, const ProfileOptions& o);
/// Runs the grid on `backend` (init_kv is called here; a fresh backend is expected), in an arena
/// sized by plan_profile. `progress`, when set, gets a line per point and one per skipped point.
/// With options.bucket_edges, the report's options carry the extra decode batches it added.
ProfileReport profile_backend(Backend& backend, const ProfileOptions& options,
                              const std::function<void(const std::string&)>& progress = {});

/// Aligned text table of the samples, with a header naming model, backend and device.
std::string profile_table(const ProfileReport& report);

/// {"schema": "servelab.profile/2", "backend", "device", "hardware", "tensor_parallel", "commit",
///  "date", "model": {name, shape_hash, dims...}, "kv_dtype_bytes", "kv_arena_bytes", "options": {..., "kv"},
///  "skipped": [{"phase", "n_seqs", "n_tokens", "max_context", "kv_bytes"}],
///  "samples": [{"phase", "n_seqs", "n_tokens", "n_padding_tokens", "n_sampled", "sum_context",
///  "max_context", "prefill_pairs", "decode_context", "attention_pairs", ["verify_rows",
///  "verify_pairs" (verification points only)], "step_s", "times_s"}],
///  "decode_row_buckets": [1, 2, 4, ...] (only when the backend pads decode steps),
///  "all_reduce": [{"bytes", "seconds"}] (only when measured),
///  "host_overhead": {"per_step_s", "per_seq_s", "points": [{"seqs", "seconds"}]} (only when measured),
///  "ceilings": {"copy_bytes_s", "gemm_flops", "detail"} (only when probed),
///  "lora": {"rank", "params", "points": [{"phase", "n_seqs", "rows", "adapters", "context", "base_s",
///  "lora_s"}], "fit": {SimDevice's lora_* figures on the profile's hardware}} (only with lora_rank),
///  "draft": {the same for the draft model, `draft` (only when given), with "rounds": [{"n_seqs",
///  "k", "context", "catchup_rows", "round_s"}] when its proposer rounds were timed}}
std::string profile_json(const ProfileReport& report, const ProfileReport* draft = nullptr);

}  // namespace servelab
