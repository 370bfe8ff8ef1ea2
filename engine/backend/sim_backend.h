#pragma once
// SimBackend: never runs the model. It predicts each step's duration from a cost model
// (engine/backend/cost_model.h: a roofline over a device's peak FLOP/s and memory bandwidth, or a
// model fitted to step times that `servelab profile --json` measured on a real backend) and hands
// back deterministic pseudo-random tokens, so schedulers can be studied at GPU scale on a laptop.
// With an acceptance distribution (set_acceptance) a draw that verifies a speculative draft
// equals it with that position's probability, so the engine's own verification runs unchanged.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cost_model.h"
#include "engine/backend/shape_decoder.h"
#include "engine/backend/sim_lora.h"
#include "engine/backend/sim_sustained.h"
#include "engine/fast_remainder.h"
#include "engine/splitmix64.h"

namespace servelab {

/// The simulated backend. K/V are never stored: init_kv allocates nothing and swaps only add
/// their transfer time to the next step.
class SimBackend final : public Backend, public ShapeDecoder {
 public:
  SimBackend(const ModelConfig& model, const SimCostModel& cost);
  SimBackend(const SimBackend&) = delete;  // pricer_ points into model_ and cost_
  SimBackend& operator=(const SimBackend&) = delete;

  std::string name() const override { return "sim"; }
  const ModelConfig& config() const override { return model_; }
  /// The real backend's slot: 2 (K and V) × n_layers × n_kv_heads / tensor_parallel × head_dim ×
  /// the element (the arena is one GPU's, holding its share of the KV heads); fp32 as the cpu
  /// backend's when device.kv_dtype_bytes is 4, else as the cuda backend's (cuda_kv_cache_spec:
  /// an FP8 cache's codes and scales padded to 16 bytes a layer's K or V).
  KvCacheSpec kv_cache_spec() const override;
  void init_kv(int64_t n_slots) override;
  BackendCaps caps() const override;
  std::string device_description() const override;
  /// Checks the step (a shape-only one, as the engine sends it: check_step_shape; a full one:
  /// its slots lie in the arena), predicts the step, and draws a token per draw: a
  /// pure function of (seed, seq_key, position) in [2, vocab), or with a token mask the first
  /// allowed token from there on (cyclically). A draw that verifies draft j of its sequence
  /// (draft_token >= 0, the j-th such draw in a row of the sequence) returns the draft with
  /// probability acceptance[j] (a keyed uniform of seed, seq_key, position), else a token other
  /// than the draft. The step's price includes the seconds charged since the last step.
  StepOutput execute(const Step& step) override;
  /// Itself: its draws and prices need only the keys and the shape.
  ShapeDecoder* shape_decoder() override { return this; }
  TokenId draw(uint64_t seed, uint64_t seq_key, int sample_position) const override {
    return draw_at(SimBackend::sequence_key(seed, seq_key), sample_position);
  }
  uint64_t sequence_key(uint64_t seed, uint64_t seq_key) const override { return splitmix64(seed ^ splitmix64(seq_key)); }
  void draw_all(std::span<const DrawKey> keys, TokenId* out) const override {
    for (const DrawKey& k : keys) *out++ = draw_at(k.sequence_key, k.sample_position);
  }
  /// With a profile's sustained-load probe (SimCostModel::sustained), the step's price follows
  /// the GPU's recent load: its start is the engine's clock given by at_time (without one since
  /// the last step, right after that step ended). Without a probe every step is the grid's price.
  double price(StepShape shape) override;
  void at_time(double now_s) override {
    step_start_s_ = now_s;
    lora_now_s_ = std::max(lora_now_s_, now_s);
  }
  std::optional<CostCounts> priced_steps() const override { return counts_; }
  /// Takes any adapter into any slot (null empties it); the copy from host memory is charged to
  /// the next step, and steps whose rows run it are priced with it (engine/backend/sim_lora.h).
  /// Packing its image is charged too unless kept: what is left of a staged pack, else all of it.
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override;
  /// The cuda backend's packing worker on the engine's clock: one pack at a time
  /// (lora_pack_seconds each), from max(now_s, the engine's clock so far) or the end of the pack
  /// before it, unless the adapter's image is kept or already staged.
  void stage_lora(std::shared_ptr<const LoraAdapter> adapter, double now_s) override;
  /// Kept, or its staged pack done by now_s; an adapter neither kept nor staged is staged now.
  bool lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double now_s) override;
  /// Keeps images for twice max_loras adapters, as the cuda backend does.
  void reserve_loras(int max_loras, int max_lora_rank) override;
  /// Reading `adapter` into host memory before its request reaches the engine (sim_lora.h:
  /// lora_host_load_seconds), which the run's source holds the request back for.
  double lora_read_seconds(const LoraAdapter& adapter) const override;
  void copy_slots(std::span<const KvCopy> copies) override;
  /// Bookkeeping only: no memory behind it (the sim stores no K/V).
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override;
  /// Add the runs' bytes to the next step's swap traffic (cost model: host link bandwidth).
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override;
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override;

  /// Conditional acceptance of draft j given drafts < j accepted (SimAcceptance::per_position);
  /// empty (the default): drafts are accepted only when the random draw happens to equal them.
  /// With `request_scale` (SimAcceptance::request_scale) each request (its draws' seed and
  /// sample) draws one scale s, and draft j is accepted with 1 - s (1 - per_position[j]).
  void set_acceptance(std::vector<double> per_position, std::vector<double> request_scale = {}) {
    acceptance_ = std::move(per_position);
    request_scale_ = std::move(request_scale);
  }
  /// Adds `seconds` to the next step's price: work the engine does before it that the sim
  /// predicts rather than runs (a sim proposer's drafting, engine/spec/sim_proposer.h).
  void charge_seconds(double seconds);

  const SimCostModel& cost() const { return cost_; }
  /// How many steps so far were priced from the profile, beyond its grid, or by the roofline.
  const CostCounts& cost_counts() const { return counts_; }

 private:
  ModelConfig model_;
  SimCostModel cost_;
  /// Over model_ and cost_, built once they are validated: pricing a step is then arithmetic.
  std::optional<StepPricer> pricer_;
  /// cost_.sustained's state, over the profiled device's roofline (sustained_terms_).
  RooflineTerms sustained_terms_;
  std::optional<SustainedState> sustained_;
  double step_start_s_ = -1.0;  // at_time since the last step (-1: none)
  CostCounts counts_;
  /// max(1, vocab − 2): a draw's token is 2 + its hash modulo this (a division avoided a draw).
  FastRemainder token_span_;
  int64_t n_slots_ = 0;
  int64_t pending_swap_bytes_ = 0;
  int64_t pending_copy_bytes_ = 0;
  double pending_s_ = 0.0;               // charge_seconds since the last step
  std::vector<double> pending_lora_copies_s_;  // the adapter loads' copies since the last step, in order
  std::vector<double> acceptance_;       // set_acceptance
  std::vector<double> request_scale_;    // set_acceptance: empty, every request alike
  TokenId draw_at(uint64_t sequence_key, int sample_position) const {
    const uint64_t h = splitmix64(sequence_key + static_cast<uint64_t>(sample_position));
    return static_cast<TokenId>(std::min<int64_t>(model_.vocab_size - 1, 2 + static_cast<int64_t>(token_span_.of(h))));
  }
  /// The token a draw returns (masks ignored): its draft when the keyed coin accepts it.
  TokenId verify_draw(const kernels::StepInput& in, int i, int draft_index, TokenId drawn) const;
  std::vector<uint32_t> late_masks_;  // the step's late token masks (Step::fill_masks)
  std::vector<SimLoraSlot> lora_slots_;  // load_lora: each slot's adapter as priced
  /// The adapters whose packed image the cuda backend would keep (DeviceLoraPool: twice max_loras,
  /// least recently loaded out first, an adapter known by its object): a load of one not here packs.
  struct KeptImage {
    const LoraAdapter* key = nullptr;
    std::weak_ptr<const LoraAdapter> owner;
    uint64_t used = 0;
  };
  std::vector<KeptImage> lora_images_;
  size_t lora_images_max_ = 0;  // 0: twice the slots loaded so far
  uint64_t lora_clock_ = 0;
  KeptImage* kept_image(const std::shared_ptr<const LoraAdapter>& adapter);
  /// Adapters staged and not loaded yet: when the worker's pack of each ends (engine clock).
  struct StagedImage {
    const LoraAdapter* key = nullptr;
    std::weak_ptr<const LoraAdapter> owner;
    double ready_s = 0.0;
  };
  std::vector<StagedImage> lora_staged_;
  StagedImage* staged_image(const std::shared_ptr<const LoraAdapter>& adapter);
  double lora_worker_free_s_ = 0.0;  // when the packing worker's last staged pack ends
  double lora_now_s_ = 0.0;          // the engine's clock so far (at_time, stage_lora, lora_ready)
};

}  // namespace servelab
