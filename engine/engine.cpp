// Engine::step reads like nano-vllm's: propose drafts -> schedule -> move KV (swaps,
// copy-on-write) -> build the step (masks of constrained draws) -> run the backend (which draws;
// a request's n parallel samples all draw from its prefill's logits) -> accept drafts, append
// tokens and stamp times -> give back rejected drafts' KV -> fork parallel samples -> retire.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <unordered_map>

#include "engine/backend/step_input.h"
#include "engine/engine_state.h"
#include "engine/lora/lora_adapter.h"
#include "engine/lora/lora_slots.h"
#include "engine/sched/scheduler.h"

namespace servelab {

void EngineConfig::validate() const {
  sched.validate();
  kv.validate();
  if (kv_cache_bytes <= 0)
    throw std::invalid_argument("engine.kv_cache_bytes must be > 0 (got " + std::to_string(kv_cache_bytes) + ")");
  if (lora.enabled) {
    lora.validate();
    if (sched.kind != BatchingKind::continuous)
      throw std::invalid_argument(std::string("LoRA adapters need continuous batching (got ") + to_string(sched.kind) + ")");
  }
  if (structured_output.jump_forward && sched.kind != BatchingKind::continuous)
    throw std::invalid_argument(std::string("structured_output.jump_forward needs continuous batching (got ") +
                                to_string(sched.kind) + ")");
  if (swap_space_bytes < 0 || swap_space_bytes > kMaxSwapSpaceBytes)
    throw std::invalid_argument("engine.swap_space must be in [0, 1024] GiB (got " + std::to_string(swap_space_bytes) +
                                " bytes)");
}

namespace {

std::string slots_text(int64_t n_slots, int64_t per_slot) {
  return std::to_string(n_slots) + " token slots of " + std::to_string(per_slot) + " bytes";
}

}  // namespace


Engine::Engine(const EngineConfig& config, std::unique_ptr<Backend> backend)
    : config_(config), backend_(std::move(backend)), state_(std::make_unique<State>()) {
  if (!backend_) throw std::invalid_argument("Engine needs a backend (got none)");
  config_.validate();
  const ModelConfig& model = backend_->config();
  // The KV manager's notion of the longest sequence cannot exceed the model's.
  config_.kv.max_model_len = std::min(config_.kv.max_model_len, model.max_position);

  const int64_t n_slots = check_kv_arena(config_, model, backend_->kv_bytes_per_slot());
  kv_ = make_kv_manager(config_.kv, n_slots);
  backend_->init_kv(n_slots);
  backend_->reserve_steps(step_limits(config_));
  state_->step_detail = backend_->caps().reads_rows ? StepDetail::full : StepDetail::shape;
  if (state_->step_detail == StepDetail::shape) state_->decoder = backend_->shape_decoder();
  if (config_.sched.kind == BatchingKind::continuous && config_.sched.preempt == PreemptMode::swap) {
    // Host blocks as large as the arena's (paged), or vLLM's default block of 16 (naive).
    const int block = config_.kv.kind == KvKind::paged ? config_.kv.block_size : 16;
    const int64_t host_slots = config_.swap_space_bytes / backend_->kv_bytes_per_slot() / block * block;
    swap_ = std::make_unique<SwapSpace>(host_slots, block);
    if (host_slots > 0) host_pool_ = backend_->make_host_pool(host_slots);
  }
  SchedulerConfig sched = config_.sched;
  sched.max_loras = config_.lora.enabled ? config_.lora.max_loras : 0;
  if (config_.lora.enabled) {
    if (!backend_->caps().lora)  // the device names tensor parallelism, which cuda refuses LoRA under
      throw std::invalid_argument("backend " + backend_->name() + " (" + backend_->device_description() +
                                  ") does not run LoRA adapters");
    backend_->reserve_loras(config_.lora.max_loras, config_.lora.max_lora_rank);
    lora_slots_ = std::make_unique<LoraSlots>(config_.lora.max_loras);
    // A request whose adapter is neither resident nor packed yet lets others go first (the step
    // that loads it then pays the copy alone, not the packing: continuous_scheduler.h).
    sched.adapter_ready_wait_s = config_.lora.admit_wait_s;
    if (config_.lora.admit_when_packed) sched.adapter_ready = [this](const Sequence& s, double now) {
      return !s.lora || lora_slots_->holds(s.lora_id) || backend_->lora_ready(s.lora, now);
    };
  }
  scheduler_ = make_scheduler(sched, *kv_, swap_.get());
}

Engine::~Engine() = default;

StepLimits step_limits(const EngineConfig& config) {
  StepLimits limits;
  limits.max_rows = max_step_rows(config.sched, config.kv.max_model_len);
  limits.max_seqs = max_step_seqs(config.sched);
  limits.max_context = config.kv.max_model_len;
  limits.block_size = config.kv.kind == KvKind::paged ? config.kv.block_size : 0;
  return limits;
}

int64_t check_kv_arena(const EngineConfig& config, const ModelConfig& model, int64_t per_slot) {
  if (per_slot <= 0)
    throw std::logic_error("model " + model.name + ": kv_bytes_per_slot " + std::to_string(per_slot) + " must be > 0");
  if (config.kv_cache_bytes <= 0)
    throw std::invalid_argument("engine.kv_cache_bytes must be > 0 (got " + std::to_string(config.kv_cache_bytes) + ")");
  const int64_t n_slots = config.kv_cache_bytes / per_slot;
  const int max_len = std::min(config.kv.max_model_len, model.max_position > 0 ? model.max_position : config.kv.max_model_len);
  int64_t min_slots = 1;
  std::string unit = "one token";
  if (config.kv.kind == KvKind::paged) {
    min_slots = config.kv.block_size;
    unit = "one block of kv.block_size = " + std::to_string(config.kv.block_size) + " tokens";
  } else if (config.kv.reserve == NaiveReserve::max) {
    min_slots = max_len;
    unit = "one request's reservation of max_model_len = " + std::to_string(min_slots) + " tokens";
  }
  if (n_slots < min_slots)
    throw std::invalid_argument(
        "engine.kv_cache_bytes = " + std::to_string(config.kv_cache_bytes) + " holds " +
        slots_text(n_slots, per_slot) + " (model " + model.name + "), too small for " + unit +
        ": it must be >= " + std::to_string(min_slots * per_slot));
  return n_slots;
}

void Engine::set_token_times(bool on) { state_->token_times = on; }
bool Engine::token_times() const { return state_->token_times; }

std::optional<FinishedRequest> Engine::add(Request request, double arrival) {
  const SamplingParams& sp = request.sampling;
  const int n_prompt = static_cast<int>(request.prompt.size());
  auto reject = [&](const std::string& why) {
    FinishedRequest f;
    f.request_id = request.id;
    f.reason = FinishReason::rejected;
    f.error = why;
    f.arrival_s = arrival;
    f.end_s = arrival;
    f.n_prompt = n_prompt;
    f.outputs.resize(std::max(1, sp.n));
    return f;
  };
  const int max_len = config_.kv.max_model_len;
  const int vocab = backend_->config().vocab_size;
  if (state_->requests.count(request.id))
    return reject("request id " + std::to_string(request.id) + " is already in flight");
  if (n_prompt == 0) return reject("empty prompt: a request needs at least one token");
  if (sp.max_tokens < 1) return reject("max_tokens must be >= 1 (got " + std::to_string(sp.max_tokens) + ")");
  if (sp.n < 1) return reject("n must be >= 1 (got " + std::to_string(sp.n) + ")");
  if (!std::isfinite(sp.temperature) || sp.temperature < 0.0f)
    return reject("temperature must be a finite number >= 0 (got " + std::to_string(sp.temperature) + ")");
  if (sp.top_k < 0) return reject("top_k must be >= 0 (got " + std::to_string(sp.top_k) + ")");
  if (!std::isfinite(sp.top_p) || !(sp.top_p > 0.0f && sp.top_p <= 1.0f))
    return reject("top_p must be in (0, 1] (got " + std::to_string(sp.top_p) + ")");
  // A token t is in [0, vocab) exactly when neither t nor (vocab - 1) - t, as 32-bit unsigned
  // words, has its top bit set: one or over the prompt (~600 tokens a chat prompt), which GCC
  // vectorises (a bool or of compares it did not: six instructions a token). The loop that names
  // the first bad one runs only when there is one.
  uint32_t any_top = 0;
  const auto last_id = static_cast<uint32_t>(vocab - 1);
  for (const TokenId t : request.prompt) any_top |= static_cast<uint32_t>(t) | (last_id - static_cast<uint32_t>(t));
  const bool outside = vocab < 1 || (any_top >> 31) != 0;
  for (int i = 0; outside && i < n_prompt; ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
      return reject("prompt token " + std::to_string(request.prompt[i]) + " at index " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (static_cast<int64_t>(n_prompt) + sp.max_tokens > max_len)
    return reject("prompt (" + std::to_string(n_prompt) + " tokens) + max_tokens (" + std::to_string(sp.max_tokens) +
                  ") exceeds the max model length " + std::to_string(max_len));

  auto seq = std::make_unique<EngineSequence>();
  seq->id = state_->next_seq_id++;
  seq->request_id = request.id;
  // Moved, not copied: the prompt lives in sample 0's tokens from here on (the request state
  // keeps none), so a long prompt is not held twice.
  seq->tokens = std::move(request.prompt);
  seq->n_prompt = n_prompt;
  seq->sampling = sp;
  seq->arrival_s = arrival;
  seq->cache_salt = request.cache_salt;
  if (request.lora) {
    if (!config_.lora.enabled) return reject("request names LoRA adapter '" + request.lora->name + "' but LoRA is off");
    if (request.lora->id == 0) return reject("LoRA adapter '" + request.lora->name + "' has no id (register it first)");
    if (request.lora->rank > config_.lora.max_lora_rank)
      return reject("LoRA adapter '" + request.lora->name + "' has rank " + std::to_string(request.lora->rank) +
                    " > max_lora_rank " + std::to_string(config_.lora.max_lora_rank));
    seq->lora = request.lora;
    seq->lora_id = request.lora->id;
  }
  if (request.constraint && sp.n > 1) return reject("structured output needs n = 1 (got n = " + std::to_string(sp.n) + ")");
  if (auto why = scheduler_->never_schedulable(*seq)) return reject(*why);

  auto rs = std::make_unique<RequestState>();
  rs->record.request_id = request.id;
  rs->record.arrival_s = arrival;
  rs->record.n_prompt = n_prompt;
  rs->record.outputs.resize(sp.n);
  seq->n_first_draws = std::max(1, sp.n);
  seq->constrained = request.constraint != nullptr;
  rs->request = std::move(request);
  seq->request = rs.get();
  if (seq->lora) backend_->stage_lora(seq->lora, arrival);  // its load may follow: prepared off this thread
  scheduler_->add(seq.get());
  rs->seqs.push_back(std::move(seq));
  const uint64_t id = rs->record.request_id;
  state_->requests.emplace(id, std::move(rs));
  return std::nullopt;
}

namespace {

/// Carries out the KV moves a schedule asked for, in the only safe order: swap-outs read slots
/// that were just released (before anything reuses them), copy-on-write copies, then swap-ins,
/// whose host blocks go back to the swap space. One swap_out and one swap_in call per step.
void move_kv(const ScheduledStep& plan, KvManager& kv, Backend& backend, SwapSpace* swap, HostKvPool* pool) {
  if (!plan.swap_out.empty() || !plan.swap_in.empty()) {
    if (!swap || !pool) throw std::logic_error("engine: the scheduler swapped without a host swap pool");
  }
  std::vector<KvSwap> runs;
  for (const SwapTransfer& t : plan.swap_out) runs.insert(runs.end(), t.runs.begin(), t.runs.end());
  if (!runs.empty()) backend.swap_out(runs, *pool);
  const std::vector<KvCopy> copies = kv.take_pending_copies();
  if (!copies.empty()) backend.copy_slots(copies);
  runs.clear();
  for (const SwapTransfer& t : plan.swap_in) runs.insert(runs.end(), t.runs.begin(), t.runs.end());
  if (!runs.empty()) backend.swap_in(runs, *pool);
  for (const SwapTransfer& t : plan.swap_in) swap->release(*t.seq);
}

/// A step's prompts of one adapter next to each other (with LoRA on): the cuda backend multiplies
/// each contiguous run of one slot's rows by its own GEMMs (kernels/lora_runs.h), so 32 prompts
/// alternating over 8 adapters cost as much as over 32 (an H200 profile: 0.50x the base step,
/// one adapter 0.89x; results/gpu/lora/2026-11-30-h200x2-99c35a2-profile). Only the chunks of more
/// than one row without drafts move, among their own places, each adapter's in their order, the
/// adapters in the order of their first prompt; decodes and verifications stay where they are.
void group_prompts_by_adapter(std::vector<ScheduledChunk>& chunks, std::vector<size_t>& at,
                              std::vector<ScheduledChunk>& prompts) {
  at.clear();
  for (size_t i = 0; i < chunks.size(); ++i)
    if (chunks[i].n_new > 1 && chunks[i].seq->spec_tokens.empty()) at.push_back(i);
  if (at.size() < 3) return;  // two prompts make the same runs in either order
  prompts.clear();
  for (size_t i : at) prompts.push_back(chunks[i]);
  size_t k = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {  // each adapter's prompts in turn, from its first
    const uint64_t id = prompts[i].seq->lora_id;
    bool first = true;
    for (size_t j = 0; j < i && first; ++j) first = prompts[j].seq->lora_id != id;
    if (!first) continue;
    for (size_t j = i; j < prompts.size(); ++j)
      if (prompts[j].seq->lora_id == id) chunks[at[k++]] = prompts[j];
  }
}

}  // namespace

namespace {

/// Token masks of the entry's draws (structured output), filled now, before the step: one per
/// drawn row, after the accepted tokens and the drafts before that row.
void add_masks(Batch& batch, BatchEntry& entry, TokenConstraint& constraint, int words) {
  const Sequence& s = *entry.seq;
  const int rows = s.spec_tokens.empty() ? 1 : static_cast<int>(s.spec_tokens.size()) + 1;
  batch.mask_words_per_row = words;
  entry.first_mask = static_cast<int>(batch.mask_words.size() / size_t(words));
  for (int j = 0; j < rows; ++j) {
    batch.mask_words.resize(batch.mask_words.size() + size_t(words));
    constraint.fill_mask(std::span<const TokenId>(s.spec_tokens.data(), size_t(j)),
                         batch.mask_words.data() + batch.mask_words.size() - size_t(words));
  }
}

}  // namespace

void Engine::State::fill_late_masks(uint32_t* words) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const LateMasks& m : late_masks)
    for (int j = 0; j < m.rows; ++j)
      m.constraint->fill_mask(std::span<const TokenId>(m.seq->spec_tokens.data(), size_t(j)),
                              words + size_t(m.first_mask + j) * size_t(mask_words));
  mask_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

StepOutcome Engine::step(double now) {
  StepOutcome out;
  out.start_s = now;
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> forward_end;  // set when a forward ran
  const int asked = proposer_ ? propose_drafts(out) : 0;
  ScheduledStep plan = scheduler_->schedule(now);
  if (lora_slots_ && config_.lora.group_prompts) group_prompts_by_adapter(plan.chunks, state_->prompt_at, state_->prompts);
  for (const Sequence* s : plan.preempted) out.preempted.push_back(s->request_id);
  out.n_lora_waits = plan.n_adapter_waits;
  for (const Sequence* s : plan.swap_pool_full) out.swap_pool_full.push_back(s->request_id);
  move_kv(plan, *kv_, *backend_, swap_.get(), host_pool_.get());

  if (!plan.empty()) {
    backend_->at_time(now);  // before the adapter loads below, which the sim prices on this clock
    Batch& batch = state_->batch;
    batch.entries.clear();
    batch.mask_words.clear();
    batch.mask_words_per_row = 0;
    batch.n_late_masks = 0;
    batch.n_padding_tokens = plan.n_padding_tokens;
    const int mask_words = (backend_->config().vocab_size + 31) / 32;
    const bool overlap_masks = config_.structured_output.overlap_masks;
    state_->late_masks.clear();
    state_->mask_words = mask_words;
    state_->mask_s = 0.0;
    if (!batch.fill_masks) batch.fill_masks = [st = state_.get()](uint32_t* words) { st->fill_late_masks(words); };
    Step& step = state_->step;
    // A shape-only step is built as its entries are made, each sequence read once (entries with
    // masks are planned here and checked against every mask: those steps are built after).
    bool built = state_->step_detail == StepDetail::shape;
    if (built)
      state_->shape_builder.begin(*kv_, backend_->config().vocab_size, step, -1, plan.chunks.size(),
                                  plan.n_padding_tokens);
    // With a ShapeDecoder, a step of plain decodes (the steady state) is drawn and priced here, as
    // its entries are made; at the first entry that is not one, the entries so far go to the
    // builder and the step is built and executed as any other. Not with LoRA on: the backend
    // prices a step's adapters from Step::seq_lora_slot (the sim: engine/backend/sim_lora.h).
    ShapeDecoder* const decoder = state_->decoder;
    bool decoding = decoder != nullptr && !lora_slots_;
    if (decoding) {
      state_->decode_shape = DecodeShape{};
      state_->decode_tokens.clear();
    }
    // The loops over the entries read the sequences (EngineSequence) only: a request's state is
    // reached through them in the rare cases that need it (masks, the record's first stamp).
    for (const ScheduledChunk& c : plan.chunks) {
      out.max_context = std::max(out.max_context, c.seq->n_computed + c.n_new);
      EngineSequence& es = state_->own(*c.seq);
      const bool sample = c.seq->n_computed + c.n_new == c.seq->n_with_spec();
      // Sample 0's first draw also draws the first token of every other parallel sample.
      const int n_samples = sample ? es.n_first_draws : 1;
      BatchEntry& e = batch.entries.emplace_back(BatchEntry{c.seq, c.n_new, sample, n_samples, -1, -1});
      if (lora_slots_ && c.seq->lora) {  // add() refuses adapters unless LoRA is enabled
        const int64_t loads = lora_slots_->n_loads();
        e.lora_slot = lora_slots_->acquire(c.seq->lora, n_steps_ + 1, *backend_);
        out.n_lora_loads += static_cast<int>(lora_slots_->n_loads() - loads);
      }
      if (sample && es.constrained) {
        RequestState& rs = *es.request;
        if (overlap_masks) {  // the same masks as add_masks, planned now, filled by the backend's call
          const int rows = c.seq->spec_tokens.empty() ? 1 : static_cast<int>(c.seq->spec_tokens.size()) + 1;
          batch.mask_words_per_row = mask_words;
          e.first_mask = batch.n_late_masks;
          batch.n_late_masks += rows;
          state_->late_masks.push_back({rs.request.constraint.get(), c.seq, e.first_mask, rows});
        } else {
          const auto m0 = std::chrono::steady_clock::now();
          add_masks(batch, e, *rs.request.constraint, mask_words);
          state_->mask_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
        }
      }
      if (!es.stamped) {
        es.stamped = true;
        if (es.request->record.scheduled_s < 0) es.request->record.scheduled_s = now;
      }
      if (decoding) {
        const Sequence& seq = *c.seq;
        const SamplingParams& p = seq.sampling;
        const int begin = seq.n_computed;
        // ShapeStepBuilder::add's plain decode, and the checks it makes of one: what the sim's
        // execute draws and prices from such a step.
        if (e.n_new == 1 && sample && n_samples == 1 && e.first_mask == -1 && seq.spec_tokens.empty() && begin >= 0 &&
            begin < seq.n_tokens() && p.temperature >= 0.0f && p.temperature <= std::numeric_limits<float>::max() &&
            p.top_k >= 0 && p.top_p > 0.0f && p.top_p <= 1.0f) {
          state_->decode_tokens.push_back(decoder->draw(p.seed, static_cast<uint64_t>(seq.sample_index), begin + 1));
          state_->decode_shape.add(begin + 1);
          continue;
        }
        decoding = false;
        for (size_t i = 0; built && i + 1 < batch.entries.size(); ++i) built = state_->shape_builder.add(batch.entries[i]);
      }
      if (built) built = state_->shape_builder.add(e);
    }
    ++n_steps_;
    step.seq_lora_slot.clear();  // each entry's slot, kept when some entry runs an adapter
    for (size_t i = 0; lora_slots_ && i < batch.entries.size(); ++i) {  // distinct adapters: one slot each
      const int slot = batch.entries[i].lora_slot;
      step.seq_lora_slot.push_back(slot);
      bool first = slot >= 0;
      for (size_t j = 0; j < i && first; ++j) first = batch.entries[j].lora_slot != slot;
      out.n_loras += first ? 1 : 0;
    }
    if (out.n_loras == 0) step.seq_lora_slot.clear();
    if (!decoding) {
      if (built) state_->shape_builder.finish();
      else build_step_input(batch, *kv_, backend_->config().vocab_size, step, state_->step_detail);
    }
    const auto f0 = std::chrono::steady_clock::now();
    StepOutput result;
    if (decoding) {  // drawn above; priced now
      result.predicted_s = decoder->price(state_->decode_shape.finish(plan.n_padding_tokens));
      result.tokens.swap(state_->decode_tokens);
    } else {
      result = backend_->execute(step);
    }
    const size_t n_draws = decoding ? batch.entries.size() : size_t(step.in.n_samples());
    out.n_masks = decoding ? 0 : step.in.n_masks();
    out.mask_s = state_->mask_s;
    const auto f1 = std::chrono::steady_clock::now();
    const double measured = std::chrono::duration<double>(f1 - t0).count();
    out.host_before_s = std::chrono::duration<double>(f0 - t0).count();
    out.forward_s = std::chrono::duration<double>(f1 - f0).count();
    out.device_s = result.device_s.value_or(0.0);
    forward_end = f1;
    out.duration_s = result.predicted_s.value_or(measured);
    if (result.tokens.size() != n_draws)
      throw std::logic_error("backend " + backend_->name() + " returned " + std::to_string(result.tokens.size()) +
                             " tokens for " + std::to_string(n_draws) + " draws");
    const double end = now + out.duration_s;
    const int eos = backend_->config().eos_token;

    std::vector<std::pair<Sequence*, FinishReason>>& done = state_->done;
    done.clear();
    const bool jump = config_.structured_output.jump_forward;
    const int vocab = backend_->config().vocab_size;
    out.tokens.reserve(result.tokens.size());
    size_t k = 0;
    bool decode_only = true;  // every entry a decode or verification row set (for the measured rule)
    for (size_t entry = 0; entry < batch.entries.size(); ++entry) {
      const BatchEntry& e = batch.entries[entry];
      EngineSequence& s = state_->own(*e.seq);
      decode_only = decode_only && e.sample && e.n_new == 1 + static_cast<int>(s.spec_tokens.size());
      s.n_computed += e.n_new;
      if (!e.sample) {
        kv_->after_computed(s);
        continue;
      }
      if (s.spec_tokens.empty()) {
        const std::span<const TokenId> draws(result.tokens.data() + k, static_cast<size_t>(e.n_samples));
        k += draws.size();
        const size_t n_done = done.size();
        state_->emit(s, draws[0], end, eos, out, done);
        if (jump && s.constrained && done.size() == n_done) {
          state_->jump_forward(s, end, eos, vocab, out);
          scheduler_->on_tokens_appended(s);
        }
        kv_->after_computed(s);
        if (e.n_samples > 1) state_->fork_samples(s, draws, end, eos, *kv_, *scheduler_, out, done);
        continue;
      }
      // Verification: draw j scored the position after draft j - 1. Drafts are accepted while
      // the draw equals them; the first draw that differs (or the one after the last draft) is
      // the step's own token. Only positions up to the last accepted draft keep their K/V.
      const size_t n_spec = s.spec_tokens.size();
      const std::span<const TokenId> draws(result.tokens.data() + k, n_spec + 1);
      k += draws.size();
      const int before = s.n_tokens();
      size_t accepted = 0;
      while (accepted < n_spec && draws[accepted] == s.spec_tokens[accepted]) ++accepted;
      // A probe counts what would have stood and keeps only the plain step's token.
      const size_t kept = out.spec_probe ? 0 : accepted;
      if (out.spec_probe) {
        ++out.spec_probe_drafts;
        out.spec_probe_draft_tokens += static_cast<int>(n_spec);
        out.spec_probe_accepted_tokens += static_cast<int>(accepted);
      } else {
        ++out.spec_drafts;
        out.spec_draft_tokens += static_cast<int>(n_spec);
        out.spec_accepted_tokens += static_cast<int>(accepted);
        if (out.spec_accepted_per_pos.size() < n_spec) out.spec_accepted_per_pos.resize(n_spec, 0);
        for (size_t j = 0; j < accepted; ++j) ++out.spec_accepted_per_pos[j];
        if (out.spec_drafted_per_pos.size() < n_spec) out.spec_drafted_per_pos.resize(n_spec, 0);
        for (size_t j = 0; j < n_spec; ++j) ++out.spec_drafted_per_pos[j];
      }
      s.spec_tokens.clear();
      s.spec_probs.clear();
      if (auto st = state_->spec_stats.find(s.id); st != state_->spec_stats.end()) {
        st->second.drafted += static_cast<int64_t>(n_spec);
        st->second.accepted += static_cast<int64_t>(accepted);
        if (spec_.adaptive && !out.spec_probe)
          st->second.k = next_num_drafts(st->second.k, static_cast<int>(n_spec), static_cast<int>(accepted),
                                         spec_.num_speculative_tokens);
      }
      s.n_computed = before + static_cast<int>(kept);
      const size_t n_done = done.size();
      for (size_t j = 0; j <= kept && done.size() == n_done; ++j) state_->emit(s, draws[j], end, eos, out, done);
      if (done.size() == n_done) kv_->truncate(s, s.n_computed);  // rejected drafts' slots back
      if (jump && s.constrained && done.size() == n_done) {
        state_->jump_forward(s, end, eos, vocab, out);
        scheduler_->on_tokens_appended(s);
      }
      kv_->after_computed(s);
    }
    for (auto& [s, reason] : done) state_->retire(*s, reason, end, *kv_, *scheduler_, out);
    // Under the count it was asked by. A step with drafts for all as it ran, catch-up included
    // (taking it off made the rule flip to drafts and back where they lose, paying the catch-up
    // at each flip: docs/speculative-decoding.md); a probe as the step for all it estimates.
    if (asked > 0 && spec_.adaptive && spec_.measured && decode_only) {
      if (out.spec_probe_drafts > 0)
        state_->spec_meter.record_probe(
            asked, ProbeStep{out.spec_probe_drafts, static_cast<int>(out.tokens.size()), out.duration_s, out.spec_draft_s,
                             out.spec_catch_up_s, out.spec_probe_draft_tokens, out.spec_probe_accepted_tokens});
      else
        state_->spec_meter.record(asked, out.spec_drafts > 0, static_cast<int>(out.tokens.size()), out.duration_s);
    }

    if (decoding) state_->decode_tokens.swap(result.tokens);  // its buffer, for the next step
    out.batch_size = static_cast<int>(batch.entries.size());
    out.n_tokens = batch.n_tokens();
    out.n_padding_tokens = batch.n_padding_tokens;
  }
  if (kv_breakdown_) {
    const std::vector<const Sequence*> live = scheduler_->live();
    out.kv = kv_->breakdown(live, scheduler_->next_waiting());
  }
  out.n_waiting = scheduler_->n_waiting();
  out.n_running = scheduler_->n_running();
  if (forward_end)
    out.host_after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *forward_end).count();
  return out;
}

bool Engine::has_work() const { return !state_->requests.empty(); }

std::optional<double> Engine::next_wakeup() const { return scheduler_->next_wakeup(); }

void Engine::check_invariants() const {
  kv_->check_invariants(scheduler_->live());
  if (!swap_) return;
  std::vector<const Sequence*> all;
  for (const auto& [id, rs] : state_->requests)
    for (const auto& s : rs->seqs) all.push_back(s.get());
  swap_->check_invariants(all);
}

}  // namespace servelab
