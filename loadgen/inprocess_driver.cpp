#include "loadgen/inprocess_driver.h"

#include "engine/lora/lora_adapter.h"

#include <algorithm>

namespace servelab {

namespace {

RecordStatus status_of(FinishReason r) {
  switch (r) {
    case FinishReason::length:
    case FinishReason::eos: return RecordStatus::ok;
    case FinishReason::rejected: return RecordStatus::rejected;
    case FinishReason::aborted: return RecordStatus::aborted;
    case FinishReason::none: break;
  }
  return RecordStatus::error;
}

}  // namespace

DriveStats drive_in_process(Engine& engine, RequestSource& source, Clock& clock,
                            const std::string& run_label, const RecordSinks& sinks,
                            const std::function<bool(uint64_t)>& is_warmup,
                            const std::atomic<bool>* stop) {
  struct Sent {
    double intended_s;
    double sent_s;
    double released_s;  ///< when a max-concurrency cap let it go; -1 when not held
    std::string lora;   ///< its adapter's name
  };
  std::unordered_map<uint64_t, Sent> sent;
  DriveStats stats;

  RunnerCallbacks cb;
  cb.on_sent = [&](const Request& r, double intended_s, double sent_s) {
    // The runner hands the engine the intended time of a request that came due while it was
    // busy, else when it woke for it: that is when the request was sent.
    sent_s = std::max(intended_s, sent_s);
    // Held by the source (a max-concurrency cap): sent when a slot freed, and its latency still
    // counts from intended_s, so the wait shows in TTFT (no coordinated omission); released_s
    // keeps it out of lateness, which measures only the generator falling behind.
    const auto held = source.held_until();
    if (held) sent_s = std::max(sent_s, *held);
    sent[r.id] = {intended_s, sent_s, held ? std::max(*held, intended_s) : -1.0, !r.lora_name.empty() ? r.lora_name : r.lora ? r.lora->name : ""};
    ++stats.n_sent;
  };
  cb.on_step = [&](const StepOutcome& s) {
    stats.n_tokens += static_cast<int>(s.tokens.size());
    ++stats.n_steps;
    if (!sinks.on_step) return;
    StepRecord st;
    st.run = run_label;
    st.start_s = s.start_s;
    st.duration_s = s.duration_s;
    st.batch_size = s.batch_size;
    st.n_tokens = s.n_tokens;
    st.max_context = s.max_context;
    st.n_padding_tokens = s.n_padding_tokens;
    st.n_waiting = s.n_waiting;
    st.n_running = s.n_running;
    st.n_preempted = static_cast<int>(s.preempted.size());
    st.n_swap_pool_full = static_cast<int>(s.swap_pool_full.size());
    st.spec_drafts = s.spec_drafts;
    st.spec_draft_tokens = s.spec_draft_tokens;
    st.spec_accepted_tokens = s.spec_accepted_tokens;
    st.spec_accepted_per_pos = s.spec_accepted_per_pos;
    st.spec_drafted_per_pos = s.spec_drafted_per_pos;
    st.spec_draft_s = s.spec_draft_s;
    st.spec_catch_up_s = s.spec_catch_up_s;
    st.spec_probe_drafts = s.spec_probe_drafts;
    st.spec_probe_draft_tokens = s.spec_probe_draft_tokens;
    st.spec_probe_accepted_tokens = s.spec_probe_accepted_tokens;
    st.n_loras = s.n_loras;
    st.n_lora_loads = s.n_lora_loads;
    st.n_lora_waits = s.n_lora_waits;
    st.n_masks = s.n_masks;
    st.mask_s = s.mask_s;
    st.jump_forward_tokens = s.n_jump_forward_tokens;
    st.kv_capacity = s.kv.capacity;
    st.kv_stored = s.kv.stored;
    st.kv_reserved = s.kv.reserved;
    st.kv_internal_frag = s.kv.internal_frag;
    st.kv_external_frag = s.kv.external_frag;
    st.kv_free = s.kv.free;
    if (!clock.is_virtual()) {  // wall time on a real backend; on the sim's virtual clock it means nothing
      st.host_before_s = s.host_before_s;
      st.forward_s = s.forward_s;
      st.host_after_s = s.host_after_s;
      st.device_s = s.device_s;
    }
    sinks.on_step(st);
  };
  // Without a step sink a step is only counted: steps of plain decodes are taken without their
  // token events (Engine::step_decodes), each drawing one token a sequence.
  if (!sinks.on_step)
    cb.on_decode_step = [&](const StepOutcome& s) {
      stats.n_tokens += s.n_tokens;
      ++stats.n_steps;
    };
  cb.on_finished = [&](const FinishedRequest& f) {
    RequestRecord rec;
    rec.run = run_label;
    rec.id = f.request_id;
    auto it = sent.find(f.request_id);
    rec.arrival_s = it != sent.end() ? it->second.intended_s : f.arrival_s;
    rec.sent_s = it != sent.end() ? it->second.sent_s : f.arrival_s;
    rec.released_s = it != sent.end() ? it->second.released_s : -1.0;
    if (it != sent.end()) rec.lora = it->second.lora;
    rec.scheduled_s = f.scheduled_s;
    rec.first_token_s = f.first_token_s;
    if (sinks.token_times) rec.token_times_s = f.token_times_s;
    rec.end_s = f.end_s;
    rec.prompt_tokens = f.n_prompt;
    rec.output_tokens = f.n_output;
    rec.status = status_of(f.reason);
    rec.error = f.error;
    rec.preemptions = f.preemptions;
    rec.warmup = is_warmup && is_warmup(f.request_id);
    if (it != sent.end()) sent.erase(it);
    ++stats.n_finished;
    stats.end_s = std::max(stats.end_s, f.end_s);
    if (sinks.annotate) sinks.annotate(f, rec);
    if (sinks.on_record) sinks.on_record(rec);
  };

  // The KV breakdown of every step goes only into StepRecords: without a step sink it is not
  // worked out (a walk over the running sequences a step).
  const bool breakdown = engine.kv_breakdown();
  engine.set_kv_breakdown(breakdown && static_cast<bool>(sinks.on_step));
  // Records without token times need only each request's first token's time and its length:
  // the engine keeps no time a token then (a store and a walk at the end, a request).
  const bool token_times = engine.token_times();
  engine.set_token_times(token_times && sinks.token_times);
  run_engine(engine, source, clock, cb, stop);
  engine.set_kv_breakdown(breakdown);
  engine.set_token_times(token_times);
  stats.stopped = stop && stop->load();
  return stats;
}

}  // namespace servelab
