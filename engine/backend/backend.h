#pragma once
// Backend: runs one batched forward step (Step) over its KV arena and draws the next tokens.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cost_counts.h"
#include "engine/backend/kv_cache_spec.h"
#include "engine/kv/kv_moves.h"
#include "engine/model/config.h"
#include "engine/request.h"
#include "kernels/step_input.h"

namespace servelab {

struct LoraAdapter;
class ShapeDecoder;  // engine/backend/shape_decoder.h

/// One step as every backend runs it: the flat per-step arrays (kernels/step_input.h: rows,
/// KV addressing, one entry per draw with its sampling parameters and optional token mask) and
/// the padding rows static batching computes and throws away (token 0, never written to the
/// cache, never attended to, never sampled). The engine builds it once per step
/// (engine/backend/step_input.h); backends never see a Sequence or the KvManager.
struct Step {
  kernels::StepInput in;
  int n_padding = 0;
  /// The step's shape and draws only (a backend whose caps().reads_rows is false: the sim): the
  /// per-row arrays and KV addressing (token_ids, positions, slot_mapping, block_tables,
  /// base_slots, lora_slot) are left empty; query_start, context_lens, seq_ids and every draw's
  /// arrays are filled as always. in.validate() does not hold for it; check_step_shape does.
  bool shape_only = false;
  /// Multi-LoRA: each sequence's (entry's) adapter slot, -1 for the base model, set by the engine
  /// for every step while LoRA is on (empty otherwise, and when no entry runs one). What a backend
  /// that prices steps reads (the sim: engine/backend/sim_lora.h); in.lora_slot carries it per row
  /// on a full step.
  std::vector<int32_t> seq_lora_slot;
  bool want_logprobs = false;  ///< fill StepOutput::logprobs (backends whose caps().logprobs)
  /// fill StepOutput::draw_probs (backends whose caps().draw_probs): a draft model's q
  bool want_draw_probs = false;
  /// Late token masks (in.late_masks > 0; structured output): writes the step's in.late_masks
  /// masks, in.mask_words_per_row words each, into `words`. A backend calls it exactly once per
  /// execute, after it has launched the forward and before it samples, so the host's mask work
  /// overlaps the device's (cuda); it runs on the thread that called execute. What it throws is
  /// the step's error. Null when the step has no late masks (unconstrained steps pay nothing).
  std::function<void(uint32_t* words)> fill_masks;
  int n_rows() const { return in.n_tokens() + n_padding; }
  /// The step's token masks on the host: in.mask_words, or the late masks written by fill_masks
  /// into `scratch` (called here, once); nullptr when the step has none. Throws
  /// std::invalid_argument when late masks have no filler.
  const uint32_t* host_masks(std::vector<uint32_t>& scratch) const {
    if (!in.has_late_masks()) return in.mask_words.empty() ? nullptr : in.mask_words.data();
    if (!fill_masks) throw std::invalid_argument("step: in.late_masks > 0 but fill_masks is not set");
    scratch.resize(size_t(in.late_masks) * size_t(in.mask_words_per_row));
    fill_masks(scratch.data());
    return scratch.data();
  }
};

/// What a step produced: one token per draw, in the step's draw order. Draw i samples row
/// in.sample_rows[i] with its own parameters and key (seed, seq_key, sample_position), so the
/// same draw gives the same token whatever else is in the batch. Acceptance of speculative
/// tokens and emission happen in the engine.
struct StepOutput {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;        ///< when asked: log-probability of each drawn token (raw logits)
  /// when asked (Step::want_draw_probs): [n_draws, vocab], the distribution each draw sampled
  /// (one-hot at the argmax when greedy): what a draft model hands the target as q
  std::vector<float> draw_probs;
  std::optional<double> predicted_s;  ///< sim backend: the step's predicted duration
  /// cuda backend: the step's span on its stream, from the forward's launch (after the step's
  /// upload) to its tokens copied back (CUDA events): execute()'s time less the host's packing,
  /// upload and wake-up
  std::optional<double> device_s;
};

/// Storage element types a backend offers for weights and the KV cache.
struct BackendCaps {
  int tensor_parallel = 1;            ///< GPUs one replica runs on
  bool device_memory = false;         ///< has a device memory budget (kv_bytes_for_memory_share works)
  bool logprobs = false;              ///< fills StepOutput::logprobs when asked
  bool token_masks = true;            ///< honours mask_index / mask_words
  /// Verifies drafts against their proposer's distribution (draft_token / draft_dist /
  /// draft_probs, rejection sampling); without it the engine sends drafts as point masses.
  bool draft_probs = false;
  bool draw_probs = false;            ///< fills StepOutput::draw_probs when asked
  bool lora = false;                  ///< runs LoRA adapters (load_lora, the step's lora_slot)
  /// Reads a step's rows and KV addressing. False (the sim: it prices a step from its shape and
  /// draws tokens from the draws' keys): the engine sends shape-only steps (Step::shape_only),
  /// sparing a prefill's thousands of rows and every sequence's block table each step.
  bool reads_rows = true;
  std::vector<DType> weight_dtypes;   ///< storage types of the weights
  std::vector<DType> kv_dtypes;       ///< storage types of the KV cache
  /// `kv_cache_dtype:` values the backend runs (auto: the KV cache in its element type; fp8: E4M3
  /// codes with per-(token, head) scales, KvCacheSpec)
  std::vector<KvCacheDType> kv_cache_dtypes = {KvCacheDType::auto_dtype};
};

/// Host memory for swapped-out K/V: n_slots host slots of bytes_per_slot bytes, in the layout of
/// the backend that made it (only its swap_out/swap_in read it). Allocated once per engine
/// (`engine.swap_space`) by Backend::make_host_pool: pinned and device-mapped on cuda, plain memory
/// on cpu, no memory on sim (it stores no K/V). SwapSpace decides which slots hold what.
class HostKvPool {
 public:
  using FreeFn = void (*)(void*);
  /// Takes ownership of data (freed with free_fn when non-null).
  HostKvPool(void* data, void* device_view, int64_t n_slots, int64_t bytes_per_slot, bool pinned, FreeFn free_fn)
      : data_(data), device_view_(device_view), n_slots_(n_slots), bytes_per_slot_(bytes_per_slot), pinned_(pinned),
        free_(free_fn) {}
  ~HostKvPool() {
    if (data_ && free_) free_(data_);
  }
  HostKvPool(const HostKvPool&) = delete;
  HostKvPool& operator=(const HostKvPool&) = delete;

  std::byte* data() const { return static_cast<std::byte*>(data_); }  ///< nullptr on sim
  /// The pool as the device addresses it (cuda: the mapped pinned memory), else nullptr.
  void* device_view() const { return device_view_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t bytes_per_slot() const { return bytes_per_slot_; }
  int64_t bytes() const { return n_slots_ * bytes_per_slot_; }
  bool pinned() const { return pinned_; }
  /// Throws std::out_of_range naming `who` and the run when a run with n_slots > 0 leaves the
  /// arena [0, arena_slots) or this pool.
  void check(std::span<const KvSwap> runs, int64_t arena_slots, const char* who) const;

 private:
  void* data_;
  void* device_view_;
  int64_t n_slots_;
  int64_t bytes_per_slot_;
  bool pinned_;
  FreeFn free_;
};

/// The largest step an engine sends its backend: rows (tokens), sequences, the longest context,
/// and the KV block size (0 for the naive layout).
struct StepLimits {
  int max_rows = 0;
  int max_seqs = 0;
  int max_context = 0;
  int block_size = 0;
};

/// Step shapes whose first run on a backend costs more than later runs of the same shape (cuda: a
/// decode step's CUDA graph is run eagerly the first time and captured the second, per batch
/// bucket and context bucket; a product's cuBLASLt kernel is loaded at its first launch, per row
/// bucket), for a caller that pays them before serving (ModelProposer::warm_up). Empty lists:
/// nothing to warm (cpu, sim, cuda in batch-invariant mode or without graphs has no graph lists).
struct WarmShapes {
  std::vector<int> decode_batches;   ///< sequences of a one-row-a-sequence step, one per graph bucket, ascending
  std::vector<int> decode_contexts;  ///< the longest context a graph is sized for, one per context bucket, ascending
  std::vector<int> step_rows;        ///< rows of an eager step, one per product row bucket, ascending
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  ///< "cpu", "cuda", "sim"
  virtual const ModelConfig& config() const = 0;
  /// What this backend can do (interface, not casts): see BackendCaps.
  virtual BackendCaps caps() const = 0;
  /// A backend that draws a plain token from its keys alone and prices a step from its shape
  /// (the sim) hands the engine this, and the engine runs its steps of plain decodes without
  /// building a Step (engine/backend/shape_decoder.h). Null (the default): every step is executed.
  virtual ShapeDecoder* shape_decoder() { return nullptr; }
  /// The device this backend runs on, for reports ("cpu (…), OpenBLAS …", "NVIDIA H100 …", "sim: …").
  virtual std::string device_description() const = 0;
  /// The format of one token slot of this backend's KV arena (dtype, scales, this rank's heads).
  virtual KvCacheSpec kv_cache_spec() const = 0;
  /// Bytes one token's K and V take over all layers in this backend's arena.
  int64_t kv_bytes_per_slot() const { return kv_cache_spec().bytes_per_slot(); }
  /// Allocates the arena for n_slots token slots (called once, before any step).
  virtual void init_kv(int64_t n_slots) = 0;
  /// Sizes the step buffers for the largest step the scheduler will send (called by the engine
  /// after init_kv, before any step), so nothing grows mid-run: on cuda a buffer that grows
  /// invalidates every captured graph, and the recaptures land in the measured latencies. A
  /// step larger than `limits` still runs (the buffers grow). Default: nothing to size (cpu, sim).
  virtual void reserve_steps(const StepLimits& limits) { (void)limits; }
  /// Batch sizes a decode-only step is padded up to before it runs (cuda: the CUDA graph
  /// buckets, a step of 9 sequences runs as 16), ascending; empty when steps run as they come
  /// (cpu, sim, cuda without graphs or in batch-invariant mode). The profile records them, so the
  /// sim prices a decode step at the size that actually runs.
  virtual std::vector<int> decode_row_buckets() const { return {}; }
  /// The shapes of steps within `limits` whose first run costs more than later ones (WarmShapes).
  /// Default: none.
  virtual WarmShapes warm_shapes(const StepLimits& limits) const { (void)limits; return {}; }
  /// The engine's clock when the step it is about to run (or price) starts. The sim reads it for
  /// its sustained-load state (engine/backend/sim_sustained.h: how long the GPU idled before the
  /// step); a real backend has its own clock and ignores it (the default).
  virtual void at_time(double now_s) { (void)now_s; }
  /// Runs the step: writes each row's K/V to its slot, attends, and draws one token per draw.
  /// Throws std::invalid_argument naming the field for a malformed step.
  virtual StepOutput execute(const Step& step) = 0;
  /// execute() without drawing: writes K/V like execute() and returns the fp32 logits of each
  /// distinct drawn row, [n_rows_drawn, vocab] in order of first draw (what accuracy checks
  /// compare: engine/backend/quant_check.h). Default: throws std::invalid_argument (the sim has
  /// no weights, hence no logits).
  virtual std::vector<float> step_logits(const Step& step) {
    (void)step;
    throw std::invalid_argument("backend " + name() + " computes no logits (it has no weights)");
  }
  virtual void copy_slots(std::span<const KvCopy> copies) = 0;
  /// A host pool of n_slots slots for swap_out/swap_in (see HostKvPool). Throws
  /// std::runtime_error naming the bytes when the memory cannot be had.
  virtual std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) = 0;
  /// Swap out: copies every layer's K and V of each run's arena slots into its pool slots.
  /// Swap in: the reverse. Runs are whole blocks where the KV layout has blocks; both return
  /// when the copy is done. Throw std::out_of_range for a run outside the arena or the pool.
  virtual void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) = 0;
  virtual void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) = 0;

  // Capabilities some backends have (see caps()); the defaults say "not here".
  /// Multi-LoRA (caps().lora): slot `slot` (>= 0) holds `adapter` from now on (null empties it);
  /// rows whose step lora_slot is that slot run each adapted linear as W + scale · B · A. The
  /// engine (LoraSlots) decides which adapter sits in which slot. Throws std::invalid_argument on a
  /// backend without LoRA, or for an adapter whose shapes do not fit the model.
  virtual void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) {
    (void)slot, (void)adapter;
    throw std::invalid_argument("backend " + name() + " does not run LoRA adapters");
  }
  /// Multi-LoRA: a request naming `adapter` reached the engine (Engine::add, at the engine's
  /// clock `now_s`), so a load_lora of it may follow. A device backend starts preparing that load
  /// off the engine's thread (cuda: packs its image into pinned host memory on a worker,
  /// lora_images.h; the sim prices that worker on the engine's clock). Returns at once; never
  /// throws for a bad adapter (load_lora reports it). Default: nothing to prepare.
  virtual void stage_lora(std::shared_ptr<const LoraAdapter> adapter, double now_s) { (void)adapter, (void)now_s; }
  /// Multi-LoRA: whether a load_lora of `adapter` at the engine's clock `now_s` costs only its copy
  /// (cuda: its image is packed), so the engine admits its request without stalling a step on the
  /// packing (the scheduler's adapter_ready). Where nothing is under way for it, a backend starts
  /// preparing it (as stage_lora) and says false. Never throws. Default: true (nothing to prepare).
  virtual bool lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double now_s) {
    (void)adapter, (void)now_s;
    return true;
  }
  /// Multi-LoRA on a simulated backend: what reading `adapter` into host memory takes (a server's
  /// front end reads an adapter a request names before handing the request over; the run's source
  /// holds the request back that long on the virtual clock: loadgen/lora_source.h). 0 where the
  /// read is real and takes what it takes.
  virtual double lora_read_seconds(const LoraAdapter& adapter) const {
    (void)adapter;
    return 0.0;
  }
  /// Multi-LoRA (caps().lora): room for `max_loras` slots of adapters of rank <= `max_lora_rank`,
  /// asked once before the first load_lora (the engine does when lora.enabled). A device backend
  /// allocates its adapter pool here, so CUDA graphs bake in fixed addresses. Default: nothing to
  /// size (cpu and sim take any slot). Throws std::invalid_argument naming a limit it cannot meet.
  virtual void reserve_loras(int max_loras, int max_lora_rank) { (void)max_loras, (void)max_lora_rank; }
  /// The KV budget a `gpu_memory_utilization` share leaves (vLLM's rule), when caps().device_memory.
  virtual std::optional<int64_t> kv_bytes_for_memory_share(double utilization, int max_tokens, int max_seqs) const {
    (void)utilization, (void)max_tokens, (void)max_seqs;
    return std::nullopt;
  }
  /// A simulated backend: how its steps so far were priced (profile, beyond it, roofline).
  virtual std::optional<CostCounts> priced_steps() const { return std::nullopt; }
  /// Tensor parallel: seconds of one in-place bf16 sum all-reduce over the ranks per message size.
  virtual std::vector<std::pair<int64_t, double>> time_all_reduce(const std::vector<int64_t>& message_bytes) {
    (void)message_bytes;
    return {};
  }
};

}  // namespace servelab
