#pragma once
// The engine's private state (engine.cpp, engine_requests.cpp): the requests in flight with
// their sequences and records, and the per-step scratch Engine::step reuses. Not for other code.
#include <algorithm>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/spec/adaptive.h"
#include "engine/backend/shape_decoder.h"
#include "engine/backend/step_input.h"
#include "engine/engine.h"
#include "engine/sched/scheduler.h"

namespace servelab {

namespace engine_internal {

struct RequestState;

/// A sequence as the engine owns it: with its request's state, so a step finds each chunk's
/// request through the chunk's sequence rather than a map lookup a chunk (the scheduler and the
/// KV manager see only the Sequence). Every sequence the engine schedules is one of these.
struct EngineSequence : Sequence {
  RequestState* request = nullptr;
  /// When each of its output tokens came. Its tokens and times live here, beside what a step
  /// reads anyway, rather than in the request's state (a cache line or two more a sequence a
  /// step); the record gets them when the request leaves (RequestState::settle).
  std::vector<double> token_times;
  /// When its first output token came (-1: none yet); with Engine::set_token_times(false) the
  /// only time it keeps, token_times staying empty.
  double first_token_s = -1.0;
  /// Draws its next sampled chunk makes: the request's n for sample 0 until its parallel samples
  /// are forked (its prefill draws every sample's first token), else 1.
  int n_first_draws = 1;
  bool constrained = false;  ///< its request has a TokenConstraint (structured output)
  bool stamped = false;      ///< it has been in a step: the record's scheduled_s is set
  bool has_draw_key = false;
  /// ShapeDecoder::sequence_key of its draws' seed and sample, once a step of plain decodes
  /// (Engine::step_decodes) has drawn for it (has_draw_key).
  uint64_t draw_key = 0;
};

/// A request in flight: its sequences (sample 0 first; the other samples are forked from it
/// once its prefill has drawn every sample's first token) and the record handed back when all
/// of them are finished.
struct RequestState {
  Request request;  ///< as added, but its prompt moved into sample 0's tokens (Sequence::tokens)
  std::vector<std::unique_ptr<EngineSequence>> seqs;
  /// Its timeline and outputs are filled when it leaves (settle): until then each sample's
  /// tokens and times are in its sequence.
  FinishedRequest record;
  bool forked = false;

  bool complete() const {
    if (request.sampling.n > 1 && !forked) return false;
    return std::all_of(seqs.begin(), seqs.end(),
                       [](const auto& s) { return s->status == SeqStatus::finished; });
  }
  /// Fills the record's outputs (each sample's tokens after the prompt) and its timeline from
  /// the samples' token times (see FinishedRequest), or without token_times (the engine kept
  /// none: Engine::set_token_times) its first token's time and its length only, the same values
  /// the timeline would give them. Called once, as the request leaves: the
  /// samples' tokens and times move into the record (an output is its sample's token vector with
  /// the prompt erased from its front: a move of the outputs' ids within it, where a copy took
  /// an allocation and a free a request).
  void settle(bool token_times) {
    for (const auto& s : seqs) {
      std::vector<TokenId>& out = record.outputs[size_t(s->sample_index)];
      out = std::move(s->tokens);
      out.erase(out.begin(), out.begin() + std::min<ptrdiff_t>(s->n_prompt, static_cast<ptrdiff_t>(out.size())));
    }
    if (!token_times) {  // what the timeline below gives its first entry and its length
      record.first_token_s = -1.0;
      record.n_output = 0;
      for (const auto& s : seqs) {
        record.first_token_s = std::max(record.first_token_s, s->first_token_s);
        record.n_output = std::max(record.n_output, static_cast<int>(record.outputs[size_t(s->sample_index)].size()));
      }
      return;
    }
    std::vector<double>& out = record.token_times_s;
    if (seqs.size() == 1) {  // one sample: its times, each at least the one before
      out = std::move(seqs.front()->token_times);
      for (size_t k = 0; k < out.size(); ++k) out[k] = std::max(out[k], k > 0 ? out[k - 1] : -1.0);
    } else {
      size_t longest = 0;
      for (const auto& s : seqs) longest = std::max(longest, s->token_times.size());
      out.assign(longest, -1.0);
      for (size_t k = 0; k < longest; ++k) {
        for (const auto& s : seqs)
          if (k < s->token_times.size()) out[k] = std::max(out[k], s->token_times[k]);
        if (k > 0) out[k] = std::max(out[k], out[k - 1]);  // a finished sample is already past token k
      }
    }
    record.first_token_s = out.empty() ? -1.0 : out.front();
    record.n_output = static_cast<int>(out.size());
  }
};

}  // namespace engine_internal

using engine_internal::EngineSequence;
using engine_internal::RequestState;

struct Engine::State {
  /// Output tokens a sample's vectors are sized for at its first token (emit): its max_tokens,
  /// capped because max_tokens may be far above where eos stops it.
  static constexpr int kReservedOutputTokens = 1024;
  /// Engine::set_token_times: keep every token's time (else each sample's first only).
  bool token_times = true;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests;
  uint64_t next_seq_id = 1;
  Batch batch;  // reused each step
  Step step;    // ... and its flat input
  ShapeStepBuilder shape_builder;  // a shape-only step built as its entries are made
  /// The backend's ShapeDecoder when it has one and takes shape-only steps (else null): a step
  /// of plain decodes is then drawn and priced as its entries are made, with no Step at all.
  ShapeDecoder* decoder = nullptr;
  DecodeShape decode_shape;            // ... its shape
  std::vector<TokenId> decode_tokens;  // ... and its draws
  std::vector<ShapeDecoder::DrawKey> decode_keys;  // ... their keys (Engine::step_decodes)
  /// Full steps, or shape-only ones for a backend that reads no rows (BackendCaps::reads_rows),
  /// decided once: caps() builds a struct with vectors, too dear to ask every step.
  StepDetail step_detail = StepDetail::full;
  std::vector<std::pair<Sequence*, FinishReason>> done;  // the step's finished samples (reused)
  std::vector<size_t> prompt_at;          // group_prompts_by_adapter's places of the prompt chunks
  std::vector<ScheduledChunk> prompts;    // ... and the chunks (reused)
  std::vector<uint32_t> mask_scratch;
  /// Late masks of the step (StructuredOutputConfig::overlap_masks): per constrained draw entry,
  /// its constraint, sequence, first mask and rows; fill_late_masks writes them when the backend
  /// calls the step's filler.
  struct LateMasks {
    TokenConstraint* constraint;
    const Sequence* seq;
    int first_mask;
    int rows;
  };
  std::vector<LateMasks> late_masks;
  int mask_words = 0;      // per mask
  double mask_s = 0.0;     // host seconds spent filling this step's masks
  void fill_late_masks(uint32_t* words);
  /// Jump-forward (StructuredOutputConfig::jump_forward): after s drew a token and did not
  /// finish, emits the tokens its constraint forces next (TokenConstraint::forced_tokens), up to
  /// max_tokens, without a forward; their K/V is computed by the next step that schedules s.
  void jump_forward(EngineSequence& s, double end, int eos, int vocab, StepOutcome& out);
  /// Per drawing sequence: its k and its acceptance so far (adaptive speculation).
  struct SpecStats {
    int k = 0;
    int64_t drafted = 0, accepted = 0;
    /// Acceptance rate with a prior of one accepted draft in two.
    double alpha() const { return (double(accepted) + 1.0) / (double(drafted) + 2.0); }
  };
  std::unordered_map<uint64_t, SpecStats> spec_stats;  // by sequence id
  SpecRateMeter spec_meter;  // SpecPolicy::measured
  Proposer* proposer = nullptr;

  /// The request of a sequence the engine made (EngineSequence).
  static RequestState& of(const Sequence& s) { return *static_cast<const EngineSequence&>(s).request; }
  /// The engine's own view of a sequence it made.
  static EngineSequence& own(Sequence& s) { return static_cast<EngineSequence&>(s); }
  /// Appends a sampled token to s, stamps it, and queues s in `done` when it is finished.
  void append(EngineSequence& s, TokenId tok, double end, int eos, std::vector<std::pair<Sequence*, FinishReason>>& done);
  /// append, and the token's event in out.tokens.
  void emit(EngineSequence& s, TokenId tok, double end, int eos, StepOutcome& out,
            std::vector<std::pair<Sequence*, FinishReason>>& done) {
    append(s, tok, end, eos, done);
    out.tokens.push_back({s.request_id, s.sample_index, tok, end});
  }
  /// Sample 0's prefill drew every sample's first token (`firsts`, sample 0's included): samples
  /// 1..n-1 start at n_prompt with their own first token, sharing the parent's prompt K/V.
  void fork_samples(EngineSequence& parent, std::span<const TokenId> firsts, double end, int eos, KvManager& kv,
                    Scheduler& scheduler, StepOutcome& out, std::vector<std::pair<Sequence*, FinishReason>>& done);
  /// seq left the engine: the proposer and the adaptive rule drop what they kept for it.
  void forget(const Sequence& seq) {
    if (proposer) proposer->forget(seq.id);
    spec_stats.erase(seq.id);
  }
  /// seq is done: frees its KV; when its request has no sample left, the record goes to `out`.
  void retire(Sequence& seq, FinishReason reason, double end, KvManager& kv, Scheduler& scheduler,
              StepOutcome& out);
};

}  // namespace servelab
