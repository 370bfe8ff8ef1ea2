#pragma once
// Step cost models of the sim backend. A step is reduced to a StepShape; a SimCostModel prices it
// either with a roofline over a SimDevice (peak FLOP/s, memory bandwidth, tensor-parallel
// all-reduces), or from a profile measured by `servelab profile` on a real backend: per operation
// class (token-proportional matrix work interpolated over the profiled row counts, attention by
// the context each token reads, a cost per sampled row, fixed per-step cost folded into the
// matrix term), inside the profiled grid, and scaled by the roofline beyond its edge.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cost_counts.h"
#include "engine/backend/hardware.h"
#include "engine/backend/host_overhead.h"
#include "engine/backend/kv_cache_spec.h"
#include "engine/model/quant.h"

namespace servelab {

/// What one step computes, as the cost models read it.
struct StepShape {
  int64_t n_tokens = 0;          ///< positions computed (padding excluded)
  int64_t n_padding_tokens = 0;  ///< rows computed and thrown away (no attention on the cpu backend)
  int64_t n_sampled = 0;         ///< rows that go through the LM head
  int64_t n_seqs = 0;            ///< sequences in the batch
  int64_t sum_context = 0;       ///< Σ over sequences of their context after the step (n_computed + n_new)
  int64_t max_context = 0;       ///< longest context after the step
  double attention_pairs = 0.0;  ///< Σ over computed rows (padding too) of the keys each attends to
  double prefill_pairs = 0.0;    ///< the part of attention_pairs from chunks of > 1 token (prefill)
  double decode_context = 0.0;   ///< Σ over 1-token (decode) entries of the keys they read
  /// Rows of entries that verify speculative drafts (k drafts + 1: every row drawn); part of n_tokens.
  int64_t verify_rows = 0;
  /// The attention pairs of those entries; part of prefill_pairs (what a profile without
  /// verification points prices them as: a prefill chunk).
  double verify_pairs = 0.0;
  int64_t swap_bytes = 0;        ///< swapped out or in before the step

  int64_t n_rows() const { return n_tokens + n_padding_tokens; }
  /// A decode-only step (one row a sequence, no padding or drafts): how far its longest context
  /// lies above the mean, max_context - sum_context / n_seqs (0 otherwise, and for equal contexts).
  double decode_spread() const {
    if (n_seqs < 1 || n_tokens != n_seqs || n_padding_tokens != 0 || verify_rows != 0) return 0.0;
    const double d = static_cast<double>(max_context) - static_cast<double>(sum_context) / static_cast<double>(n_seqs);
    return d > 0.5 ? d : 0.0;
  }
  /// A decode step that carries padding rows (static batching once some of its sequences have
  /// finished): backends run these differently (cuda: eagerly, outside its decode graphs; cpu: the
  /// padding rows skip attention and the LM head), so a profile prices them as their own class.
  bool padded_decode() const { return n_padding_tokens > 0 && prefill_pairs == 0.0; }
  /// The shape of a step (from its query rows, contexts and draws).
  static StepShape of(const Step& step);
};

/// A step with its measured duration: what a profile holds and the profiled model is fitted to.
struct TimedStep {
  StepShape shape;
  double step_s = 0.0;
  /// A step of a real serving run folded into the profile (`servelab calibrate`: the sample's
  /// "source": "calibration"). A bucket whose spread decodes include at least
  /// kMinServedSpreadSamples served ones takes a signed a_spread fitted with them: serving's mix of
  /// lengths may cost less than the grid's equal contexts.
  bool served = false;
};

/// Served (calibration) decodes a graph bucket needs before they set its a_spread: fewer are left
/// out of the fit (the bucket keeps the grid's spread points or its neighbours' knots), so a
/// calibration run that reached a bucket in a couple of steps does not set that bucket's price for
/// every serving step in it. 30 was set before the matrix was re-predicted with it (2026-12-01).
inline constexpr int kMinServedSpreadSamples = 30;

/// The roofline: max(FLOPs / (peak · tp), bytes / (bandwidth · tp)) + step overhead + two
/// all-reduces per layer over the step's rows when tp > 1 (ring: 2(tp−1)/tp of the activation
/// bytes at half the interconnect's total bandwidth, plus a fixed latency each) + swap traffic.
/// FLOPs: 2 · layer parameters per row, 2 · d · vocab per sampled row, 4 · n_heads · head_dim per
/// attention pair and layer. Bytes: layer weights (+ the LM head when anything is sampled) and the
/// K/V read and written.
/// With `formats`, the decoder Linears' weight bytes are their quantized bytes
/// (linear_weight_bytes: codes, scales, zeros), W8A8 FP8 products run at device.fp8_peak_flops
/// (when the device has FP8 tensor cores) and an fp8 KV cache reads and writes 1 byte an
/// element plus a 4-byte scale per (layer, K|V, kv head) row.
struct StorageFormats {
  QuantScheme quant;
  KvCacheDType kv_cache_dtype = KvCacheDType::auto_dtype;
};
double roofline_seconds(const ModelConfig& model, const SimDevice& device, int tensor_parallel,
                        const StepShape& shape, const StorageFormats& formats = {});

/// A step measured in `measured_s` on one device, on another: `fixed_s` (capped at the step) as it
/// was, the rest times to_bound_s / from_bound_s (the step's roofline bound on each: bandwidth for
/// decodes, compute for long prefills). `measured_s` unchanged when either bound is not positive.
double retarget_step_seconds(double measured_s, double from_bound_s, double to_bound_s, double fixed_s);

/// The parts of roofline_seconds that do not depend on the step: the model's layer and Linear
/// parameter counts and the Linears' bytes in their format. Counting them walks the model's
/// tensor list (linear_weight_bytes), far dearer than pricing a step, so whatever prices every
/// step builds them once (StepPricer). Holds pointers to `model` and `device`: they must outlive it.
struct RooflineTerms {
  const ModelConfig* model = nullptr;
  const SimDevice* device = nullptr;
  int tensor_parallel = 1;
  StorageFormats formats;
  double n_layer_params = 0.0;   ///< parameters every row multiplies through (not embedding, LM head)
  double n_linear_params = 0.0;  ///< of those, the decoder Linears'
  double linear_bytes = 0.0;   ///< the Linears' weight bytes in formats.quant
  static RooflineTerms of(const ModelConfig& model, const SimDevice& device, int tensor_parallel,
                          const StorageFormats& formats = {});
};
/// roofline_seconds over precomputed terms: the same arithmetic, so the same bits.
double roofline_seconds(const RooflineTerms& terms, const StepShape& shape);

/// The bound at the heart of roofline_seconds: a step's FLOPs and bytes and the time each takes
/// at the device's ceilings (peak · tp, bandwidth · tp). roofline_seconds adds the per-step
/// overhead, all-reduces and swap traffic to max(compute_s, memory_s); a run's roofline
/// efficiency (loadgen/roofline_meter.h) uses the bound alone.
struct RooflineBound {
  double flops = 0.0;      ///< every product, attention and the LM head of the sampled rows
  double bytes = 0.0;      ///< weights read once (+ the LM head when anything is sampled), K/V read and written
  double compute_s = 0.0;  ///< flops at the device's peak (W8A8 Linears at its FP8 peak)
  double memory_s = 0.0;   ///< bytes at the device's bandwidth
  double seconds() const { return compute_s > memory_s ? compute_s : memory_s; }
};
RooflineBound roofline_bound(const RooflineTerms& terms, const StepShape& shape);

/// Step time from a profile, per operation class:
///   t = M(rows) + s_sampled · n_sampled + a_prefill · prefill_pairs + a_decode · decode_context
/// M is piecewise linear over the profiled row counts (its knots; it holds the fixed per-step
/// cost too), the others are non-negative coefficients. Fitted by least squares weighted by
/// 1/step_s (relative error), so a profile the model can represent exactly is reproduced exactly.
/// s_sampled is pinned to 0 when the samples cannot tell it from M (its column in the span of the
/// others: decodes, rows = sampled rows, on knots no eager step measured), so M carries the cost.
/// When the profile holds padded decode steps (StepShape::padded_decode), those steps get their
/// own row function P(rows) over their own knots in place of M (the scalar terms are shared), and
/// a padded decode whose rows lie within P's knots is priced with P; otherwise with M.
/// With `graph_buckets` (the profiled backend's Backend::decode_row_buckets: cuda replays a
/// decode-only step of B sequences as the CUDA graph of the smallest bucket >= B, its Linears and
/// LM head over the padded rows), decode-only steps within the buckets (graphed()) are priced
///   t = G(bucket(B)) + a_decode · decode_context
/// in place of M and the sampled term, so every B of one bucket costs the same but for its
/// attention; with decode points of spread contexts in the profile (ProfileOptions::spread_decodes)
///   + a_spread(bucket(B)) · (max_context - mean context)   (StepShape::decode_spread)
/// prices what a batch of mixed lengths costs over the same batch at its mean context (on an H200
/// 4-8% of a llama3-8b step at 16-64 sequences: engine_bench --mixed-contexts; nothing at 128+),
/// fitted last, per bucket, to what the rest leaves of those points (linear between the buckets
/// they ran as, constant past them; 0 without them; they take no part in the other terms; >= 0,
/// but signed in a bucket holding a calibration run's decodes, TimedStep::served). G is fitted after the joint fit (the same as without buckets): at each bucket a
/// graphed sample ran as, the weighted mean of what a_decode leaves of those samples' times;
/// linear between buckets no sample ran as.
/// With graph buckets, M then prices eager steps only, so it is refitted on them (eager: neither
/// graphed nor padded decodes) with the scalar terms of the joint fit: its knots are the eager
/// samples' rows, and the joint fit's knots outside their range (set by graphed decodes alone)
/// are kept. A mixed step (prefill rows beside decodes, eager) costs c_mixed + b_mixed · rows more
/// (both >= 0), fitted there too (mixed samples set no knot within the pure eager steps' range, so
/// a mixed step is M at its rows plus its parts plus that): its decodes do not run as in the
/// decode graphs, and on an H200 what that costs grows with the chunk beside them (llama3-8b, 11
/// decodes at 3,773 tokens beside a chunk of 125 / 241 / 359 / 512 rows: 0.5 / 2.1 / 1.5 / 4.5 ms
/// over the chunk alone; two decodes cost as much as eleven; a constant c_mixed priced the
/// ~500-row steps of the long-prompt matrix cells 12-14% low: results/sim-validation/
/// mixed-2026-11-30/). b_mixed needs mixed samples of two row counts or more (else 0). Without
/// buckets M is the joint fit's and c_mixed = b_mixed = 0.
/// When it holds verification steps (StepShape::verify_rows > 0: sequences drawing all k + 1
/// rows, `servelab profile --verify-k`), their rows leave the prefill term and are priced by
///   + V(verify_rows) + a_verify · verify_pairs
/// V piecewise linear over the profiled verification row counts (V(0) = 0), a_verify >= 0. They
/// are fitted after the rest, to what the rest leaves of each verification step's time, so the
/// other terms are the same as in a profile without them. Without verification points a
/// verifying sequence is priced as a prefill chunk (has_verification() says which).
class ProfiledStepModel {
 public:
  /// Throws std::invalid_argument when there are no samples or one has step_s <= 0.
  static ProfiledStepModel fit(std::span<const TimedStep> samples, std::span<const int> graph_buckets = {});

  /// True when every feature of `shape` lies within what the profile measured.
  bool inside(const StepShape& shape) const;
  /// The model's value at `shape`, its features clamped to the grid first.
  double predict_clamped(const StepShape& shape) const;
  /// `shape` with each feature clamped to the grid (the point predict_clamped evaluates).
  StepShape clamp(const StepShape& shape) const;

  const std::vector<double>& knots() const { return knots_; }
  const std::vector<double>& knot_seconds() const { return knot_s_; }
  /// P's knots and values (empty when the profile has no padded decode steps).
  const std::vector<double>& padded_knots() const { return pad_knots_; }
  const std::vector<double>& padded_knot_seconds() const { return pad_knot_s_; }
  /// G's knots (bucket rows) and values (empty without graph buckets or graphed samples).
  const std::vector<double>& graph_knots() const { return graph_knots_; }
  const std::vector<double>& graph_knot_seconds() const { return graph_knot_s_; }
  /// Whether `shape` is priced as a graphed decode: decode-only (every sequence one row, no
  /// padding, no verification) of at most the largest bucket, its bucket within G's knots.
  bool graphed(const StepShape& shape) const;
  double s_per_sampled() const { return s_per_sampled_; }
  double s_per_prefill_pair() const { return s_per_prefill_pair_; }
  double s_per_decode_context() const { return s_per_decode_context_; }
  /// a_spread at a graphed decode of n_seqs sequences: seconds per context position its longest
  /// sequence lies above the mean (0 without spread decode points in the profile).
  double s_per_decode_spread(int64_t n_seqs) const;
  /// a_spread's knots (bucket rows) and values (empty without spread decode points).
  const std::vector<double>& spread_knots() const { return spread_knots_; }
  const std::vector<double>& spread_knot_values() const { return spread_knot_a_; }
  /// c_mixed: what a mixed step (prefill rows beside decodes) costs beyond its parts (0 without buckets).
  double mixed_step_seconds() const { return mixed_step_s_; }
  /// b_mixed: seconds a row of a mixed step costs beyond its parts (0 without buckets, or where
  /// the profile's mixed steps share one row count).
  double mixed_row_seconds() const { return mixed_row_s_; }
  /// Whether the profile held verification steps (the V and a_verify terms are in use).
  bool has_verification() const { return !verify_knots_.empty(); }
  /// V's knots (verification rows) and values; a_verify.
  const std::vector<double>& verify_knots() const { return verify_knots_; }
  const std::vector<double>& verify_knot_seconds() const { return verify_knot_s_; }
  double s_per_verify_pair() const { return s_per_verify_pair_; }
  /// The fixed per-step cost: M extrapolated linearly to 0 rows from its first two knots.
  double fixed_seconds() const;

 private:
  std::vector<double> knots_;   // row counts, ascending
  std::vector<double> knot_s_;  // M at each knot
  std::vector<double> pad_knots_, pad_knot_s_;  // P: padded decode steps' rows and values
  std::vector<int> buckets_;                     // the backend's decode graph buckets, ascending
  std::vector<double> graph_knots_, graph_knot_s_;  // G: graphed decodes' bucket rows and values
  /// The bucket a decode of `n_seqs` sequences runs as (0 when past the largest).
  int64_t bucket_rows(int64_t n_seqs) const;
  /// Decode-only within the buckets (graphed() before G's knots exist).
  bool graphable(const StepShape& s) const;
  /// Fits G to the graphed samples' time left over by the other terms.
  void fit_graphs(std::span<const TimedStep> samples);
  /// Refits M and c_mixed on the eager samples (with graph buckets), the other terms fixed.
  void fit_eager(std::span<const TimedStep> samples);
  /// Whether `s` is priced with P.
  bool use_padded(const StepShape& s) const;
  double s_per_sampled_ = 0.0;
  double s_per_prefill_pair_ = 0.0;
  double s_per_decode_context_ = 0.0;
  std::vector<double> spread_knots_, spread_knot_a_;  // a_spread: bucket rows and values
  /// Fits a_spread to what the other terms leave of the graphed spread decode samples.
  void fit_spread(std::span<const TimedStep> samples);
  double mixed_step_s_ = 0.0;
  double mixed_row_s_ = 0.0;
  std::vector<double> verify_knots_, verify_knot_s_;  // V: verification rows and values
  double s_per_verify_pair_ = 0.0;
  // The grid's extent (prefill pairs: those of non-verifying entries).
  int64_t max_sampled_ = 0, max_sum_context_ = 0, max_context_ = 0, max_verify_rows_ = 0;
  /// The profile's cheapest step: what a step the fit prices at or below 0 (a noisy profile's
  /// row function dipping there) costs instead, since every step runs every layer once.
  double min_step_s_ = 0.0;
  double max_prefill_pairs_ = 0.0, max_decode_context_ = 0.0, max_verify_pairs_ = 0.0;
  /// `s` as this model reads it: without verification terms, verifying rows stay prefill rows.
  StepShape folded(const StepShape& s) const;
  /// M, P and the scalar terms (everything but V and a_verify) at the clamped shape `c`.
  double predict_base(const StepShape& c) const;
  /// Fits V and a_verify to the verification samples' time left over by the other terms.
  void fit_verification(std::span<const TimedStep> samples);
};

/// "9f3a..." — FNV-1a of the shapes that set a step's cost (hidden, layers, heads, KV heads,
/// head_dim, FFN, vocab): a profile is only valid for a model with the same hash.
std::string model_shape_hash(const ModelConfig& model);

/// Fits seconds = latency + bytes × per_byte to measured all-reduces of a `tensor_parallel`-way
/// group and returns `device` with allreduce_latency_s = latency and interconnect_bytes_s set so
/// that roofline_seconds' ring all-reduce term, 2(tp−1)/tp × bytes / (interconnect / 2), costs
/// per_byte × bytes. Needs two or more distinct sizes and tensor_parallel > 1; throws
/// std::invalid_argument otherwise, or when the fit is not positive.
SimDevice fit_allreduce(const SimDevice& device, int tensor_parallel,
                        const std::vector<std::pair<double, double>>& bytes_seconds);

/// One timed proposer round (engine/spec/draft_rounds.h): propose_batch for n_seqs sequences at
/// up to k drafts each, whose draft copies first catch up catchup_rows rows a sequence ending at
/// `context` (2 in steady rounds: the last accepted draft and the bonus token; the prompt and
/// first token in a sequence's first round), then draft one row per step. round_s: the median
/// wall time of the whole call, host work included.
struct DraftRound {
  int n_seqs = 0;
  int k = 0;
  int context = 0;
  int catchup_rows = 0;
  double round_s = 0.0;
  /// First rounds only: the point's first call, before its warm-up (the first time the draft
  /// runs a catch-up of that many rows: first-use work such as GEMM algorithm lookups). Recorded,
  /// not priced (0 when not measured).
  double first_use_s = 0.0;
};

struct SustainedLoad;  // engine/backend/sim_sustained.h

/// How the sim backend prices a step.
struct SimCostModel {
  enum class Kind { roofline, profile };
  Kind kind = Kind::roofline;
  SimDevice device;         ///< roofline figures (beyond the grid too), K/V element size, swap link
  int tensor_parallel = 1;  ///< GPUs per replica: weights, KV heads and FLOPs are split over them
  std::optional<ProfiledStepModel> profiled;  ///< Kind::profile
  std::string source;       ///< "roofline:h100" or the profile path, for reports
  /// The profile carried measured all-reduce times ("all_reduce": [{bytes, seconds}], written by
  /// `servelab profile --tensor-parallel N` on cuda): device.allreduce_latency_s and
  /// interconnect_bytes_s were fitted to them (least squares, seconds = latency + bytes × per_byte)
  /// instead of the datasheet's, so the TP term of the roofline is the measured one.
  bool allreduce_measured = false;
  /// The profile carried LoRA points ("lora", `servelab profile --lora-rank`): device.lora_*
  /// were fitted to them (engine/backend/sim_lora.h's fit_lora) instead of the preset's H200 fit.
  bool lora_measured = false;
  /// The engine's host work per step outside forward(), from the profile's "host_overhead"
  /// ({"per_step_s", "per_seq_s"}, measured by `servelab profile`; zero when absent or for the
  /// roofline). SimBackend adds it to every step; step_seconds() leaves it out (forward() alone,
  /// what validate-sim's per-step comparison measures).
  HostOverhead host;
  /// The KV layout the profile's steps were timed with ("paged" or "naive"; options.kv, "paged"
  /// for profiles written before it was recorded); empty for the roofline.
  std::string kv_layout;
  /// Every step's price (step_seconds) times this: 0.9 asks "what if each step ran 10% faster"
  /// (what-if planning); validate-sim's sensitivity runs use 1 ± δ. Host overhead is not scaled.
  double scale = 1.0;
  /// The weight format and KV element type priced (roofline_seconds). A profile is measured in
  /// the backend's own formats (bf16 weights and KV on cuda): priced for other formats, its
  /// prediction is scaled by the roofline's ratio, formats over the profile's own.
  StorageFormats formats;

  /// A draft model profiled beside the target (the profile's "draft": `servelab profile
  /// --draft-layers N` or `--draft-preset NAME`): DraftPricer prices the steps of a draft of this
  /// shape from it, instead of the target's profile times the roofline's draft / target ratio.
  struct DraftProfile {
    std::string shape_hash;  ///< model_shape_hash of the draft it timed
    std::string name;
    ProfiledStepModel profiled;
    /// Whole proposer rounds timed beside the draft's steps (the JSON's "draft"."rounds",
    /// `servelab profile` with a draft): what drafting costs besides the forward steps priced
    /// from `profiled` (DraftPricer::round_seconds). Empty in profiles written before them.
    std::vector<DraftRound> rounds;
  };
  std::vector<DraftProfile> draft_profiles;
  /// The profile's sustained-load probe ("sustained", `servelab profile --sustained-s`): the sim
  /// backend and price_step_timings price each step by the GPU's recent load (sim_sustained.h).
  /// Null: every step at the grid's price (no probe, or retargeted to another device).
  std::shared_ptr<const SustainedLoad> sustained;

  static SimCostModel roofline(const SimDevice& device, int tensor_parallel = 1);

  /// Reads a `servelab profile --json` file measured for `model` and fits the profiled model.
  /// `device`: the roofline device; it must be the one the profile was measured on ("hardware"),
  /// and when unset that one is used. `tensor_parallel` must equal the profile's.
  /// Measured all-reduce times in it replace the device's datasheet all-reduce figures (see
  /// allreduce_measured).
  /// Throws std::runtime_error naming the file: unreadable, bad samples, or a profile of another
  /// model shape, device or tensor-parallel degree ("... was measured on ... ; profile ... with").
  /// With `retarget`, a `device` other than the profile's is taken: every sample is retimed to it
  /// first (retarget_step_seconds: a fixed part kept, the profile's smallest excess over its own
  /// roofline bound on the profiled device's preset, a batch-1 decode's launches and small
  /// kernels, taken to be the same on either device; the rest scaled by the sample's bound on
  /// `device` over its bound on the profiled device), then fitted; a profile with a draft model is
  /// refused. The sim then predicts a GPU the user has not profiled (issue 28;
  /// results/sim-validation/cross-gpu/).
  static SimCostModel from_profile_json(const std::string& path, const ModelConfig& model,
                                        const std::optional<SimDevice>& device = std::nullopt,
                                        int tensor_parallel = 1, bool retarget = false);

  /// Predicted seconds for a step of `shape` on `model`; `used` (when given) says how.
  /// Builds a StepPricer each call: whatever prices many steps of one model keeps one instead.
  double step_seconds(const ModelConfig& model, const StepShape& shape, CostSource* used = nullptr) const;
};

/// SimCostModel::step_seconds for one model with the step-independent roofline terms computed
/// once (the sim backend prices every step with it). Holds references to `cost` and `model`:
/// they must outlive it and stay unchanged.
class StepPricer {
 public:
  StepPricer(const SimCostModel& cost, const ModelConfig& model);
  /// Predicted seconds for a step of `shape`; `used` (when given) says how.
  double seconds(const StepShape& shape, CostSource* used = nullptr) const;

 private:
  double unscaled(const StepShape& shape, CostSource* used) const;
  const SimCostModel& cost_;
  RooflineTerms native_;     ///< the backend's own formats (what a profile measured)
  RooflineTerms formatted_;  ///< cost.formats
};

}  // namespace servelab
