#pragma once
// Scenario: what one `servelab run` measures — model, backend, engine, the strategies to compare,
// the workload (arrivals, rates, lengths), the SLO and CI gates. Loaded from YAML with every
// value's line:column kept, so each error reads `FILE:LINE:COL: key.path message`.
// The schema is documented key by key in scenarios/README.md.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/make_backend.h"
#include "engine/model/residual_scale.h"
#include "engine/structured_output_config.h"
#include "loadgen/lora_workload.h"
#include "engine/kv/kv_manager.h"
#include "engine/model/config.h"
#include "engine/sched/scheduler_config.h"
#include "engine/spec/spec_config.h"
#include "loadgen/arrivals.h"
#include "loadgen/capacity_config.h"
#include "loadgen/dataset.h"
#include "loadgen/lengths.h"
#include "loadgen/structured_output.h"
#include "loadgen/target.h"

namespace servelab {

/// Where a scenario value came from: a place in the file, or a --set override.
struct SourceLoc {
  std::string file;
  int line = 0;  ///< 1-based; 0 = the file as a whole
  int col = 0;   ///< 1-based
  std::string override_text;  ///< non-empty: the value came from `--set <override_text>`
  int override_index = 0;     ///< which --set (errors are listed in command-line order)
  /// "quick.yaml:12:5", "quick.yaml" or "--set workload.rates=[1,2]".
  std::string str() const;
};

/// Key path ("workload.arrival.cv", "strategies[1].kv.kind") → where its value was written.
class SourceMap {
 public:
  void set(const std::string& path, SourceLoc loc) { locs_[path] = std::move(loc); }
  void set_file(const std::string& file) { file_ = file; }
  const std::string& file() const { return file_; }
  /// The path's own location, else its nearest recorded parent's, else the file's.
  SourceLoc find(const std::string& path) const;

 private:
  std::map<std::string, SourceLoc> locs_;
  std::string file_;
};

/// Collects every error of a scenario (they are all reported at once), each at its location.
class Diagnostics {
 public:
  explicit Diagnostics(const SourceMap& map) : map_(&map) {}
  /// "LOC: <path> <what>", e.g. error("workload.arrival.rate", "must be > 0 (got -3)").
  void error(const std::string& path, const std::string& what);
  /// "LOC: <message>" with the message given whole (unknown keys, conflicts).
  void error_at(const std::string& path, const std::string& message);
  /// Already an error at this path, above it or below it: a later check of it would be noise.
  bool failed(const std::string& path) const;
  /// Marks a path failed without a message (its problem is reported elsewhere).
  void mark_failed(const std::string& path) { failed_paths_.push_back(path); }
  bool empty() const { return errors_.empty(); }
  /// Messages in file order (overrides first).
  std::vector<std::string> messages() const;

 private:
  struct Entry {
    SourceLoc loc;
    std::string message;
  };
  const SourceMap* map_;
  std::vector<Entry> errors_;
  std::vector<std::string> failed_paths_;
};

/// Every problem found in a scenario; what() joins them with newlines.
class ScenarioError : public std::runtime_error {
 public:
  explicit ScenarioError(std::vector<std::string> messages);
  std::vector<std::string> messages;
};

/// `model:` — a preset's shapes with random weights, or a Hugging Face folder.
struct ModelSpec {
  std::string preset = "tiny";  ///< one of preset_names(); empty when `path` is set
  std::string path;             ///< folder with config.json (+ safetensors), resolved
  std::optional<DType> dtype;   ///< unset: the preset's or checkpoint's own
  /// `residual_scale: {from_layer, scale}`: synthesized weights whose layers from from_layer on
  /// add scale × their branches to the residual stream (engine/model/residual_scale.h), so a
  /// self-speculative draft of the first layers agrees with the model at a rate set by
  /// construction. cpu and cuda (one GPU); sim: no effect on prices.
  std::optional<ResidualScale> residual_scale;
  // Resolved at load from the preset or DIR/config.json:
  int vocab_size = 0;
  int max_position = 0;
  int n_layers = 0;
};

/// `backend:` (BackendKind is the engine's: cpu | sim | cuda; engine/backend/make_backend.h).
struct ScenarioBackend {
  BackendKind kind = BackendKind::cpu;
  int threads = 0;          ///< CPU threads; 0 = all cores
  std::string sim_device;   ///< sim: roofline device preset (SimDevice::preset_names()); "" = h100
  std::string sim_profile;  ///< sim: resolved path of a `servelab profile` JSON (overrides the roofline)
  /// sim: a profile of another device than sim_device is scaled to it by the two rooflines
  /// (SimCostModel::from_profile_json's retarget) instead of refused.
  bool sim_retarget = false;
  double sim_cost_scale = 1.0;  ///< sim: every step's predicted time times this (0.9: 10% faster steps)
  /// cpu, cuda: resolved path of a JSON with the device's measured ceilings ({"copy_bytes_s",
  /// "gemm_flops"}, top level or under "ceilings") for the runs' roofline efficiency; "" = probe
  /// them (cpu) or take the device preset's (cuda). loadgen/roofline_meter.h.
  std::string ceilings;
  int device = 0;               ///< cuda: device ordinal
  bool fusion = true;           ///< cuda: false runs the unfused kernels (`fusion: off` in YAML)
  bool batch_invariant = false; ///< cuda: every result independent of the batch
  bool cuda_graphs = true;      ///< cuda: decode steps replayed from CUDA graphs
  /// cuda: where a mixed step's decodes take their attention (`mixed_decodes: auto | prefill |
  /// decode`; CudaBackendOptions::mixed_decodes)
  cuda::MixedDecodes mixed_decodes = cuda::MixedDecodes::auto_select;
  /// cuda with tensor_parallel > 1: the all-reduce (engine/backend/cuda/tp_all_reduce_mode.h):
  /// auto (ours up to all_reduce_max_bytes, NCCL above), nccl or custom.
  TpAllReduce all_reduce = TpAllReduce::auto_select;
  int64_t all_reduce_max_bytes = kTpCustomAllReduceDefaultMaxBytes;
  /// cuda: storage of weights, activations and KV, bf16 or f16 (fp32 accumulation either way).
  /// sim: accepted so a cuda scenario runs unchanged; both cost 2 bytes an element there.
  DType dtype = DType::bf16;
  /// cuda, sim: GPUs per replica (cuda: a rank per device 0..N-1 over NCCL); 1 = one GPU.
  int tensor_parallel = 1;
  /// Every strategy's weight format and KV element type unless it names its own (set by
  /// `--quantization` / `--kv-cache-dtype`; BackendSpec::quantization, kv_cache_dtype).
  Quantization quantization = Quantization::none;
  KvCacheDType kv_cache_dtype = KvCacheDType::auto_dtype;
};

/// `engine:` — shared by every strategy.
struct EngineSpec {
  int64_t kv_cache_bytes = 64ll << 20;  ///< `kv_cache_bytes`, or `kv_cache_mb` MiB
  /// cuda: > 0 sizes the KV arena at run time as vLLM does (this share of the GPU's memory, minus
  /// weights, activations and whatever else is in use) instead of kv_cache_bytes.
  double gpu_memory_utilization = 0.0;
  int max_model_len = 0;                ///< prompt + output cap; 0 in YAML = the model's max_position
  /// `swap_space` GiB (vLLM's --swap-space): host memory for `preemption: swap`, in [0, 1024] GiB.
  int64_t swap_space_bytes = 4ll << 30;
  /// `structured_output: {overlap_masks, jump_forward}`: how the engine applies token masks
  /// (engine/engine.h StructuredOutputConfig): masks filled while the forward runs (default) or
  /// before the step; jump-forward over forced continuations (off by default).
  StructuredOutputConfig structured_output;
};

/// One entry of `strategies:`: a batching policy with its knobs and a KV allocator.
struct StrategySpec {
  std::string label;      ///< default "<batching>-<kv>", e.g. "continuous-paged"; unique
  SchedulerConfig sched;  ///< `batching:` + that policy's knobs (`preemption:` → sched.preempt)
  KvConfig kv;            ///< `kv:`; kv.max_model_len = engine.max_model_len
  /// `speculative: {method: ngram, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max}`
  /// (continuous batching only): drafts proposed and verified each step (engine/spec/).
  std::optional<SpeculativeConfig> speculative;
  /// `quantization: none | fp8 | int4_awq | int4_gptq` and `kv_cache_dtype: auto | fp8` (cpu and
  /// sim backends): this strategy's weight format and KV element type; unset = the backend's.
  std::optional<Quantization> quantization;
  std::optional<KvCacheDType> kv_cache_dtype;
  /// `lora:` (the keys of workload.lora, or `none`: the base model for every request): this
  /// strategy's adapters in place of workload.lora's, drawn over the same requests, so a base and
  /// an adapter strategy, or 8 against 64 adapters, run the same arrivals and lengths side by side.
  /// Unset: workload.lora (strategy_lora).
  std::optional<LoraWorkloadSpec> lora;
};

/// How requests are issued.
enum class LoadMode {
  open_loop,    ///< `arrival:` — sent at planned times whatever the server does (one run per rate)
  closed_loop,  ///< `concurrency: N` — N users, each sends its next request when the last finished
  trace,        ///< `trace: FILE` — timestamps and lengths replayed from a JSONL file
};
const char* to_string(LoadMode m);  ///< "open_loop", "closed_loop", "trace"

/// `prompt_tokens:` / `output_tokens:` — a distribution, or lengths from a dataset.
struct LengthSpec {
  LengthDist dist;                    ///< used when dataset is empty
  std::string dataset;                ///< resolved path; non-empty: lengths come from this file
  DatasetFormat dataset_format = DatasetFormat::sharegpt;
  bool from_dataset() const { return !dataset.empty(); }
};

/// One entry of `workload.prefix_groups:`: a system prompt of `tokens` tokens that a `fraction`
/// of the requests start with (after the shared prefix).
struct PrefixGroupSpec {
  int tokens = 0;         ///< >= 1
  double fraction = 0.0;  ///< in (0, 1]; the fractions of all groups sum to at most 1
};

/// `workload.sessions:` — multi-turn conversations. Each session's first turn arrives by the
/// arrival process; turn k+1 is sent think_time_s after turn k's reply finished, and its prompt is
/// every earlier turn's prompt and reply followed by its own new tokens (prompt_tokens).
struct SessionSpec {
  int turns = 0;              ///< turns per session; 0 = no sessions
  double think_time_s = 0.0;  ///< >= 0
  bool enabled() const { return turns > 0; }
};

/// `workload:`
/// `workload.copied_spans:` — prompts that ask to reproduce a document (editing, summarization):
/// a `fraction` of the requests' own tokens are a document of span_tokens ids, a request, and the
/// document's first 4 ids, so a model that copies continues the document (loadgen/copied_spans.h).
struct CopiedSpansSpec {
  double fraction = 0.0;   ///< share of requests with a copied span, in (0, 1]; 0 = none
  int span_tokens = 256;   ///< the document's ids, >= 8 (cut to fit the request's own prompt)
  /// In [0, 0.5]: per document position, the chance that it repeats an earlier bigram of the
  /// document (an edited text's repeated phrase), where copying the latest occurrence of the last
  /// two tokens and matching a longer n-gram part ways.
  double edit_rate = 0.0;
  bool enabled() const { return fraction > 0; }
};

struct WorkloadSpec {
  LoadMode mode = LoadMode::open_loop;
  ArrivalSpec arrival;
  int concurrency = 0;               ///< closed_loop: the first of concurrencies
  std::vector<int> concurrencies;    ///< closed_loop: one run per entry (`concurrency: [1, 4, 16]`)
  std::string trace;                 ///< trace: resolved path
  double trace_speed = 1.0;          ///< trace: replay at this many times the recorded speed
  std::vector<double> rates;         ///< open_loop: requests/s, expanded from a list or a range
  int n_requests = 0;                ///< per rate; 0 = use duration_s (default 100 when neither)
  double duration_s = 0.0;           ///< per rate; requests arriving in [0, duration_s)
  int warmup_requests = 0;           ///< extra requests sent first and left out of the metrics
  LengthSpec prompt;                 ///< tokens after the shared prefix
  LengthSpec output;
  int shared_prefix_tokens = 0;      ///< one prefix every prompt starts with (prefix caching)
  std::vector<PrefixGroupSpec> prefix_groups;  ///< system prompts shared by fractions of the requests
  CopiedSpansSpec copied_spans;      ///< documents to reproduce in a share of the prompts
  SessionSpec sessions;
  LoraWorkloadSpec lora;             ///< adapters named per request (loadgen/lora_workload.h)
  /// A schema set sent with a share of the requests (loadgen/structured_output.h).
  StructuredOutputSpec structured_output;
  std::string tokenizer;             ///< resolved path of a tokenizer.json; "" = the model folder's, if any
  /// Runs of each sweep point, each with its own plan seed (repeat_seed); > 1 adds mean, std, min
  /// and 95% intervals of every headline metric to the summary.
  int repeat = 1;
  /// Longest prefix a request may carry before its own tokens (shared + longest group).
  int max_prefix_tokens() const;
};

/// One entry of `slo.percentiles:` — the run's `percentile`-th percentile of `metric` (ttft, tpot,
/// itl, e2e) must be ≤ max_ms (DistServe's "TTFT p99 ≤ 2 s").
struct PercentileSloSpec {
  std::string metric;
  double percentile = 99.0;
  double max_ms = 0.0;
};

/// `slo:` — per request: TTFT ≤ ttft_ms, TPOT ≤ tpot_ms, every token gap ≤ itl_ms, E2E ≤ e2e_ms
/// (.inf = no bound; itl and e2e unbounded by default); per run: every `percentiles` objective.
/// attainment is the capacity target.
struct SloSpec {
  double ttft_ms = 1000.0;
  double tpot_ms = 150.0;
  double attainment = 0.9;
  double itl_ms = HUGE_VAL;
  double e2e_ms = HUGE_VAL;
  std::vector<PercentileSloSpec> percentiles;
};

/// `report:` — how the metrics are summarised.
struct ReportSpec {
  std::vector<double> percentiles;  ///< more latency percentiles, each in [0, 100]
  double skip_first_s = 0.0;        ///< `window:` steady-state window, by seconds ...
  double skip_last_s = 0.0;
  int skip_first_requests = 0;      ///< ... or by requests (not both)
  int skip_last_requests = 0;
  double cdf_rate = NAN;            ///< rate of the latency CDF plots; NaN = highest common rate
  /// In-process runs with quantized or FP8-KV strategies: teacher-forced positions over which each
  /// strategy's formats are compared with the model's own before the first request
  /// (loadgen/format_accuracy.h); 0 = not measured.
  int accuracy_positions = 1024;
};

/// One entry of `gates:`: a summary metric of some runs must stay within [min, max].
struct GateSpec {
  std::string metric;               ///< one of gate_metric_names()
  std::optional<double> min;
  std::optional<double> max;
  std::string strategy;             ///< a label; empty = every strategy
  std::optional<double> rate;       ///< one of the rates; unset = every rate
  bool allow_missing = false;       ///< a run with no records or no value does not fail the gate
};

/// `baseline:` — compare each run with the same label and rate in an earlier summary.json.
struct BaselineSpec {
  std::string file;                 ///< resolved path of a summary.json
  double max_regression_pct = 10.0; ///< a metric may be at most this much worse
  std::vector<std::string> metrics = {"goodput_tok_s", "output_throughput_tok_s", "ttft_p99_ms", "tpot_p99_ms"};
  bool allow_missing = false;       ///< a lost run or a metric that became null does not fail
};

/// A whole scenario. load_scenario() fills and validates it; code may also build one and call
/// resolve() then validate().
struct Scenario {
  std::string name;          ///< default: the file's stem
  std::string description;
  uint64_t seed = 0;
  std::string output_dir;    ///< default results/runs/<name>
  ModelSpec model;
  ScenarioBackend backend;
  EngineSpec engine;
  std::vector<StrategySpec> strategies;
  WorkloadSpec workload;
  SloSpec slo;
  ReportSpec report;
  std::vector<GateSpec> gates;
  std::optional<BaselineSpec> baseline;
  std::optional<TargetSpec> target;  ///< set: runs go over HTTP to this server (loadgen/target.h)
  std::optional<CapacitySpec> capacity;  ///< `capacity:` (loadgen/capacity_config.h)

  std::string source_file;   ///< the YAML it came from ("" when built in code)
  SourceMap source;          ///< where each value was written, for error messages

  /// The points of the sweep: workload.rates for open loop; the concurrencies for closed loop
  /// (as doubles); {0} (one run) for a trace, whose rate is whatever the load produces.
  std::vector<double> sweep_rates() const;
  /// Number of requests of one run at `rate` not known before planning (duration_s) → -1.
  int planned_requests() const;
  /// Fills derived fields: model vocab/max_position (preset or config.json), max_model_len,
  /// kv.max_model_len, default labels and output_dir. Problems go to `diag`.
  void resolve(Diagnostics& diag);
  /// Checks every field (ranges, conflicts, files exist, knob/strategy consistency) and calls
  /// SchedulerConfig::validate and KvConfig::validate. Throws ScenarioError listing all problems.
  void validate() const;
  void validate(Diagnostics& diag) const;
};

/// The plan seed of repetition k (1-based) of a sweep point: the scenario's seed for k = 1, so
/// `repeat: 1` runs exactly what it ran before; a SplitMix64 mix of (seed, k) after.
uint64_t repeat_seed(uint64_t seed, int k);

/// Metric names a gate may use: the scenario spellings of loadgen/records/gate_metrics.h
/// (goodput, slo_attainment, n_failed, kv_utilization_mean, ttft_p99_ms, ... → summary.json
/// metrics.ttft_ms.p99, ...).
const std::vector<std::string>& gate_metric_names();
/// true for throughputs, goodput, attainment, KV utilization; false for latencies and n_failed.
bool gate_metric_higher_is_better(const std::string& metric);

/// Reads FILE, applies `--set key.path=value` overrides, parses and validates.
/// Throws ScenarioError with every problem, each "FILE:LINE:COL: message".
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {});
/// The same from YAML text; `file` names it in messages and anchors relative paths (its folder).
Scenario load_scenario_text(const std::string& yaml, const std::string& file,
                            const std::vector<std::string>& overrides = {});

/// One-line description for `servelab validate`: "2 strategies × 3 rates, 100 requests per
/// rate, poisson arrivals, model tiny on cpu".
std::string describe(const Scenario& s);

/// "a" vs "b": the closest of `candidates` within a small edit distance, or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace servelab
