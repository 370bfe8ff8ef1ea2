// Engine::step_decodes: a step of plain decodes of every running sequence without a scheduler
// pass, a Batch, a StepShape walk or token events: the steady state of a simulated run (a plain
// decode is one row at the end of its sequence, one draw, no drafts, no mask). Two walks over the
// running sequences: hold each one's slot and add it to the step's shape; then, its draws made
// in one call and the step priced, append and stamp each token and retire the finished. The same state, draws and times as
// Engine::step makes for that step, in the same order.
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_state.h"
#include "engine/sched/scheduler.h"

namespace servelab {

bool Engine::step_decodes(double now, StepOutcome& out) {
  ShapeDecoder* const decoder = state_->decoder;
  // Off where a step is more than its decodes: drafts (a proposer), adapter slots (LoRA), the
  // per-step KV breakdown, and a backend that executes Steps (no ShapeDecoder).
  if (!decoder || proposer_ || lora_slots_ || kv_breakdown_) return false;
  const std::span<Sequence* const> running = scheduler_->decodes_only();
  if (running.empty()) return false;
  DecodeShape& shape = state_->decode_shape;
  std::vector<ShapeDecoder::DrawKey>& keys = state_->decode_keys;
  shape = DecodeShape{};
  keys.clear();
  for (Sequence* const seq : running) {
    EngineSequence& s = state_->own(*seq);
    // What step() would take another way: a constrained draw (its mask), sample 0's first draw of
    // parallel samples, a sequence not yet in any step (its record's scheduled_s), a position
    // that is not the end of its sequence. A hold made before stopping is one the pass makes.
    if (s.constrained || s.n_first_draws != 1 || !s.stamped || s.n_computed != s.n_tokens() - 1) return false;
    if (!kv_->allocate_slots(*seq, 1)) return false;  // the pass preempts: step() does
    if (!s.has_draw_key) {
      s.draw_key = decoder->sequence_key(s.sampling.seed, static_cast<uint64_t>(s.sample_index));
      s.has_draw_key = true;
    }
    keys.push_back({s.draw_key, s.n_computed + 1});
    shape.add(s.n_computed + 1);
  }
  std::vector<TokenId>& draws = state_->decode_tokens;
  draws.resize(keys.size());
  decoder->draw_all(keys, draws.data());
  // What move_kv does for a step without swaps: a write into a shared block copies it first.
  if (std::vector<KvCopy> copies = kv_->take_pending_copies(); !copies.empty()) backend_->copy_slots(copies);
  ++n_steps_;
  out.finished.clear();
  out.start_s = now;
  out.duration_s = decoder->price(shape.finish(0));  // a continuous step has no padding rows
  out.batch_size = static_cast<int>(running.size());
  out.n_tokens = out.batch_size;
  const double end = now + out.duration_s;
  const int eos = backend_->config().eos_token;
  std::vector<std::pair<Sequence*, FinishReason>>& done = state_->done;
  done.clear();
  for (size_t i = 0; i < running.size(); ++i) {
    EngineSequence& s = state_->own(*running[i]);
    s.n_computed += 1;
    state_->append(s, draws[i], end, eos, done);
    kv_->after_computed(s);
  }
  // Retiring takes finished sequences out of the scheduler's running list (`running`): last.
  for (auto& [s, reason] : done) state_->retire(*s, reason, end, *kv_, *scheduler_, out);
  return true;
}

}  // namespace servelab
