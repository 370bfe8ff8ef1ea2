#include "engine/backend/sim_backend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/backend/kv_cache_spec.h"
#include "engine/backend/step_input.h"
#include "engine/require.h"
#include "engine/splitmix64.h"

namespace servelab {

SimBackend::SimBackend(const ModelConfig& model, const SimCostModel& cost)
    : model_(model), cost_(cost), token_span_(static_cast<uint64_t>(std::max(1, model.vocab_size - 2))) {
  model_.validate();
  cost_.device.validate();
  if (cost_.tensor_parallel < 1 || model_.n_kv_heads % cost_.tensor_parallel != 0)
    throw std::invalid_argument("sim backend: tensor_parallel (" + std::to_string(cost_.tensor_parallel) +
                                ") must divide " + model_.name + "'s " + std::to_string(model_.n_kv_heads) +
                                " KV heads");
  pricer_.emplace(cost_, model_);
  if (cost_.sustained) {
    sustained_terms_ = RooflineTerms::of(model_, cost_.device, cost_.tensor_parallel);
    sustained_.emplace(*cost_.sustained, sustained_terms_);
  }
}

KvCacheSpec SimBackend::kv_cache_spec() const {
  // The slot of the backend the sim stands in for, from that backend's own sizing code, so that
  // an arena of the same bytes holds as many slots (the capacity, and so where preemption
  // starts): a 4-byte K/V element is the cpu backend's fp32, any other a GPU's bf16 or f16 (a
  // profile of an FP8 cache records 1) as the cuda backend lays it out (FP8 slots padded to 16
  // bytes a layer's K or V, this GPU's share of the KV heads: CudaBackend::kv_cache_spec).
  if (cost_.device.kv_dtype_bytes == 4)
    return KvCacheSpec::of(model_, DType::f32, cost_.tensor_parallel, cost_.formats.kv_cache_dtype);
  KvCacheSpec s = cuda_kv_cache_spec(model_, DType::bf16, cost_.formats.kv_cache_dtype);
  s.n_kv_heads = model_.n_kv_heads / cost_.tensor_parallel;
  return s;
}

void SimBackend::init_kv(int64_t n_slots) {
  if (n_slots < 1) throw std::invalid_argument("sim backend: arena of " + std::to_string(n_slots) + " slots");
  n_slots_ = n_slots;
}

StepOutput SimBackend::execute(const Step& step) {
  if (n_slots_ == 0) throw std::logic_error("sim backend: execute before init_kv");
  if (step.n_padding < 0) throw std::invalid_argument("sim backend: step.n_padding must be >= 0");
  const kernels::StepInput& in = step.in;
  if (step.shape_only) {  // the engine's steps (caps().reads_rows is false): no rows to check
    check_step_shape(in);
  } else {  // a full step (tests, the profiler): its rows must address the arena
    in.validate();
    for (int r = 0; r < in.n_tokens(); ++r)
      if (in.slot_mapping[r] < 0 || in.slot_mapping[r] >= n_slots_)
        throw std::invalid_argument("sim backend: step row " + std::to_string(r) + " (position " +
                                    std::to_string(in.positions[r]) + ") writes slot " +
                                    std::to_string(in.slot_mapping[r]) + ", outside the arena [0, " +
                                    std::to_string(n_slots_) + ")");
  }
  StepOutput out;
  out.tokens.resize(static_cast<size_t>(in.n_samples()));  // written by index
  // Late masks (Step::fill_masks) are filled here, where a device backend would fill them (after
  // the forward is launched). Their host time is not priced: the step is priced as the overlapped
  // path runs it, the masks hidden under the forward (the engine reports the time they took).
  const uint32_t* masks = in.n_samples() > 0 ? step.host_masks(late_masks_) : nullptr;
  int draft_index = -1;  // which draft of its sequence draw i verifies
  const bool accepting = !acceptance_.empty();
  const int n_draws = in.n_samples();
  const uint64_t* seeds = in.seed.data();
  const uint64_t* keys = in.seq_key.data();
  const int32_t* positions = in.sample_position.data();
  TokenId* tokens = out.tokens.data();
  for (int i = 0; i < n_draws; ++i) {
    TokenId t = draw(seeds[i], keys[i], positions[i]);
    if (in.draft_token[i] < 0 && in.mask_index[i] < 0) {  // a plain draw (most of them)
      draft_index = -1;
      tokens[i] = t;
      continue;
    }
    if (in.draft_token[i] < 0) {
      draft_index = -1;
    } else {
      const bool follows = i > 0 && in.seq_key[i - 1] == in.seq_key[i] && in.draft_token[i - 1] >= 0;
      draft_index = follows ? draft_index + 1 : 0;
      if (accepting) t = verify_draw(in, i, draft_index, t);
    }
    if (in.mask_index[i] >= 0) {
      const uint32_t* words = masks + size_t(in.mask_index[i]) * in.mask_words_per_row;
      int tried = 0;
      // A rejected draft stays rejected while the mask moves the draw on.
      const TokenId rejected =
          draft_index >= 0 && accepting && t != in.draft_token[i] ? in.draft_token[i] : -1;
      while (!((words[t / 32] >> (t % 32)) & 1u) || t == rejected) {
        if (++tried > model_.vocab_size) throw std::invalid_argument("sim backend: a token mask allows no token");
        t = (t + 1) % model_.vocab_size;
      }
    }
    tokens[i] = t;
  }
  out.predicted_s = price(StepShape::of(step)) + lora_step_seconds(cost_.device, model_, step, lora_slots_);
  return out;
}

void SimBackend::load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) {
  if (slot < 0) throw std::invalid_argument("sim backend: load_lora slot " + std::to_string(slot) + " must be >= 0");
  if (size_t(slot) >= lora_slots_.size()) lora_slots_.resize(size_t(slot) + 1);
  const int64_t params = lora_params(model_, adapter.get());
  lora_slots_[size_t(slot)].params = params;
  pending_lora_copies_s_.push_back(lora_load_seconds(cost_.device, params));  // beside the step: price()
  // Its image kept? (the same object, still alive: one drawn or read again is packed again)
  if (KeptImage* k = kept_image(adapter)) {
    k->used = ++lora_clock_;
    return;
  }
  // Staged: the step waits for what is left of the worker's pack; else it packs it all.
  double pack = lora_pack_seconds(cost_.device, params);
  if (StagedImage* staged = staged_image(adapter)) {
    pack = std::max(0.0, staged->ready_s - lora_now_s_);
    lora_staged_.erase(lora_staged_.begin() + (staged - lora_staged_.data()));
  }
  pending_s_ += pack;
  // Its buffer, as DeviceLoraPool picks it (every one allocated when the pool was reserved): a
  // free one (never used, or its adapter freed), else the least recently loaded image's.
  const size_t cap = lora_images_max_ > 0 ? lora_images_max_ : 2 * lora_slots_.size();
  const KeptImage image{adapter.get(), adapter, ++lora_clock_};
  auto dead = std::find_if(lora_images_.begin(), lora_images_.end(), [](const KeptImage& k) { return k.owner.expired(); });
  if (dead != lora_images_.end()) {
    *dead = image;
  } else if (lora_images_.size() < cap) {
    lora_images_.push_back(image);
  } else {
    *std::min_element(lora_images_.begin(), lora_images_.end(),
                      [](const KeptImage& a, const KeptImage& b) { return a.used < b.used; }) = image;
  }
}

SimBackend::KeptImage* SimBackend::kept_image(const std::shared_ptr<const LoraAdapter>& adapter) {
  for (KeptImage& k : lora_images_)
    if (k.key == adapter.get() && k.owner.lock() == adapter) return &k;
  return nullptr;
}

SimBackend::StagedImage* SimBackend::staged_image(const std::shared_ptr<const LoraAdapter>& adapter) {
  for (StagedImage& s : lora_staged_)
    if (s.key == adapter.get() && s.owner.lock() == adapter) return &s;
  return nullptr;
}

void SimBackend::stage_lora(std::shared_ptr<const LoraAdapter> adapter, double now_s) {
  lora_now_s_ = std::max(lora_now_s_, now_s);
  if (!adapter || kept_image(adapter)) return;
  std::erase_if(lora_staged_, [](const StagedImage& s) { return s.owner.expired(); });
  if (staged_image(adapter)) return;  // under way
  const double ready = std::max(lora_now_s_, lora_worker_free_s_) + lora_pack_seconds(cost_.device, lora_params(model_, adapter.get()));
  lora_worker_free_s_ = ready;
  lora_staged_.push_back({adapter.get(), adapter, ready});
}

bool SimBackend::lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double now_s) {
  lora_now_s_ = std::max(lora_now_s_, now_s);
  if (!adapter || kept_image(adapter)) return true;
  if (!staged_image(adapter)) stage_lora(adapter, now_s);  // neither kept nor under way: staged now
  return now_s >= staged_image(adapter)->ready_s;
}

double SimBackend::lora_read_seconds(const LoraAdapter& adapter) const {
  return lora_host_load_seconds(cost_.device, lora_params(model_, &adapter));
}

void SimBackend::reserve_loras(int max_loras, int max_lora_rank) {
  (void)max_lora_rank;
  lora_images_max_ = size_t(std::max(1, 2 * max_loras));
}

double SimBackend::price(StepShape shape) {
  if (n_slots_ == 0) throw std::logic_error("sim backend: a step before init_kv");
  shape.swap_bytes = pending_swap_bytes_;
  CostSource used = CostSource::roofline;
  double t = pricer_->seconds(shape, &used);
  counts_.add(used);
  if (sustained_) t = sustained_->price(step_start_s_, t, shape);  // the GPU's recent load
  step_start_s_ = -1.0;
  t += lora_copies_seconds(pending_lora_copies_s_, t, model_.n_layers);  // the loads' copies beside the step
  pending_lora_copies_s_.clear();
  t += cost_.host.seconds(shape.n_seqs);  // the engine's own work around the step (profiled)
  t += 2.0 * static_cast<double>(pending_copy_bytes_) / cost_.device.mem_bw_bytes_s;  // copy-on-write
  t += pending_s_;  // drafting priced by a sim proposer
  pending_swap_bytes_ = 0;
  pending_copy_bytes_ = 0;
  pending_s_ = 0.0;
  return t;
}

TokenId SimBackend::verify_draw(const kernels::StepInput& in, int i, int draft_index, TokenId drawn) const {
  const TokenId draft = in.draft_token[i];
  double p = size_t(draft_index) < acceptance_.size() ? acceptance_[size_t(draft_index)] : 0.0;
  if (!request_scale_.empty()) {  // the request's own scale of rejections, one per (seed, sample)
    const uint64_t r = splitmix64(splitmix64(in.seed[i] ^ 0x7e9e5ca1e5ull) ^ in.seq_key[i]);
    p = std::clamp(1.0 - request_scale_[size_t(r % request_scale_.size())] * (1.0 - p), 0.0, 1.0);
  }
  // Its own stream (the constant), so the coin is independent of the token the draw would be.
  const uint64_t h = splitmix64(splitmix64(in.seed[i] ^ splitmix64(in.seq_key[i] ^ 0x5eedacce97ull)) +
                                static_cast<uint64_t>(in.sample_position[i]));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  if (u < p) return draft;
  if (drawn != draft) return drawn;
  const int64_t span = std::max(1, model_.vocab_size - 2);  // the next token of [2, vocab), cyclically
  return static_cast<TokenId>(2 + (static_cast<int64_t>(drawn) - 2 + 1) % span);
}

void SimBackend::charge_seconds(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds))
    throw std::invalid_argument("SimBackend::charge_seconds: seconds must be finite and >= 0 (got " +
                                std::to_string(seconds) + ")");
  pending_s_ += seconds;
}

BackendCaps SimBackend::caps() const {
  BackendCaps c;
  c.tensor_parallel = cost_.tensor_parallel;
  c.lora = true;  // priced (engine/backend/sim_lora.h), never run
  c.reads_rows = false;  // priced from the step's shape, tokens drawn from the draws' keys
  c.weight_dtypes = {DType::bf16, DType::f16};
  c.kv_dtypes = {DType::bf16, DType::f16};
  c.kv_cache_dtypes = {KvCacheDType::auto_dtype, KvCacheDType::fp8};  // priced from the slot bytes
  return c;
}

std::string SimBackend::device_description() const {
  return "simulated " + cost_.device.name + " (predicted step times)";
}

void SimBackend::copy_slots(std::span<const KvCopy> copies) {
  for (const KvCopy& c : copies) pending_copy_bytes_ += c.n_slots * kv_bytes_per_slot();
}

std::unique_ptr<HostKvPool> SimBackend::make_host_pool(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("SimBackend::make_host_pool: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  return std::make_unique<HostKvPool>(nullptr, nullptr, n_slots, kv_bytes_per_slot(), false, nullptr);
}

void SimBackend::swap_out(std::span<const KvSwap> runs, HostKvPool& pool) {
  pool.check(runs, n_slots_, "SimBackend::swap_out");
  for (const KvSwap& r : runs) pending_swap_bytes_ += std::max<int64_t>(0, r.n_slots) * kv_bytes_per_slot();
}

void SimBackend::swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) {
  pool.check(runs, n_slots_, "SimBackend::swap_in");
  for (const KvSwap& r : runs) pending_swap_bytes_ += std::max<int64_t>(0, r.n_slots) * kv_bytes_per_slot();
}

}  // namespace servelab
