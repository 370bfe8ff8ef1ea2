#pragma once
// Requests as the engine sees them, and the sequences it schedules.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace servelab {

using TokenId = int32_t;
struct LoraAdapter;  // engine/lora/lora_adapter.h

/// How to pick each output token. temperature 0 means greedy (argmax).
struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;          ///< 0 = no top-k cut
  float top_p = 1.0f;     ///< 1 = no nucleus cut
  uint64_t seed = 0;      ///< per-request seed; with the position it fixes every random draw
  int max_tokens = 16;    ///< output length; with ignore_eos it is the exact output length
  bool ignore_eos = true; ///< benchmarks use fixed output lengths, as vLLM's and guidellm's do
  int n = 1;              ///< parallel samples sharing one prompt (copy-on-write KV)
};

/// Which next tokens a request may take (structured output): the engine asks it for a bitmask
/// before every draw and tells it every token the request emits. One per request; called from
/// the engine's thread only.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  /// Sets bit t of words[t / 32] (bit t % 32) when token t may come next, after the tokens
  /// accepted so far followed by `draft` (speculative tokens not yet verified; empty otherwise).
  /// Clears every other bit; words holds (vocab + 31) / 32 entries.
  virtual void fill_mask(std::span<const TokenId> draft, uint32_t* words) = 0;
  /// The request emitted token t (it was allowed by the last mask filled without a draft, or
  /// with the draft it follows).
  virtual void accept(TokenId t) = 0;
  /// Jump-forward: when exactly one continuation is allowed next, up to max_tokens tokens that
  /// spell (a prefix of) it, each allowed after the ones before; empty when the next token is not
  /// determined. Does not change the state (the engine accept()s the tokens it appends).
  virtual std::vector<TokenId> forced_tokens(int max_tokens) {
    (void)max_tokens;
    return {};
  }
};

/// One request handed to Engine::add.
struct Request {
  uint64_t id = 0;
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  /// Extra key of the prefix cache: K/V computed under one salt is never reused under another
  /// (a LoRA adapter's id; 0 = the base model).
  uint64_t cache_salt = 0;
  /// Structured output: the tokens each draw may take (null = any). Only with n == 1.
  std::shared_ptr<TokenConstraint> constraint;
  /// The LoRA adapter the request runs with (null = the base model); its id is a second root of
  /// the prefix cache's hash, beside cache_salt.
  std::shared_ptr<const LoraAdapter> lora;
  /// The adapter's name as the request gave it (its `model`), for records: an in-process source
  /// names it when it hands the request out, before `lora` is attached (RequestSource::finish).
  std::string lora_name;
};

enum class FinishReason { none, length, eos, rejected, aborted };
const char* to_string(FinishReason r);

enum class SeqStatus { waiting, running, swapped, finished };

/// Where a sequence's KV lives in the arena. Owned by the sequence, managed by a KvManager.
struct KvHandle {
  // Members the step reads for every running sequence first (one cache line with the table's
  // pointers), the naive manager's after them.
  std::vector<int32_t> blocks;  ///< paged: block table, position p is in blocks[p / block_size]
  int n_cached_prefix = 0;      ///< tokens found in the prefix cache at allocation (skipped in prefill)
  /// paged, prefix caching: leading blocks of the table registered in the prefix cache (the
  /// others are not), so registration resumes there without reading the blocks' state.
  int n_registered = 0;
  /// The manager's word that on_computed has nothing to register while n_computed is below this
  /// (paged: the end of the first unregistered block); 0 = ask it (KvManager::after_computed).
  int register_at = 0;
  bool allocated = false;
  int64_t region_begin = -1;    ///< naive: first slot of the contiguous reservation
  int64_t region_slots = 0;     ///< naive: reserved slots
};

/// A sequence the scheduler moves between queues: prompt plus generated tokens.
struct Sequence {
  // The members every step reads for each running sequence (scheduler, KV manager, step input,
  // emit) come first, in the first three cache lines; the simulator's step is bound by how many
  // lines it touches a sequence. The rest follow.
  uint64_t id = 0;          ///< unique per sequence (a request with n > 1 has n of them)
  uint64_t request_id = 0;
  std::vector<TokenId> tokens;  ///< prompt followed by accepted generated tokens
  /// Proposed tokens after `tokens`, not yet verified (speculative decoding): the next step
  /// computes them with the last token and draws one token per position; the engine keeps the
  /// drafts the draws confirm and gives back the KV slots of the rest.
  std::vector<TokenId> spec_tokens;
  int sample_index = 0;     ///< 0..n-1 within its request
  int n_prompt = 0;
  /// Leading positions whose K/V are in the cache. Catches up to n_with_spec() one step at a
  /// time (a prefill chunk, a decode, a verification); after a step it is at most n_tokens() - 1
  /// once the sequence has sampled (the last accepted token is computed by the next step).
  int n_computed = 0;
  SeqStatus status = SeqStatus::waiting;
  /// The scheduler pass that gave it a chunk (0: none yet): "scheduled in this pass" is a
  /// compare on a line the pass reads anyway, not a set lookup a running sequence a step.
  uint64_t sched_pass = 0;
  SamplingParams sampling;
  KvHandle kv;
  /// The proposer's distribution of each draft, [spec_tokens.size(), vocab] (rows past
  /// spec_tokens.size() ignored), for rejection sampling; empty when the drafts are point masses
  /// (n-gram lookup, greedy drafting, a backend without caps().draft_probs).
  std::vector<float> spec_probs;
  uint64_t cache_salt = 0;  ///< the request's prefix-cache salt (Request::cache_salt)
  std::shared_ptr<const LoraAdapter> lora;  ///< Request::lora
  uint64_t lora_id = 0;     ///< lora's LoraAdapter::id (0 = base model): the scheduler's and cache's key
  double arrival_s = 0.0;
  int preemptions = 0;
  /// While swapped out: its blocks of the host swap pool (SwapSpace), positions [0, n_computed).
  std::vector<int32_t> swap_blocks;

  int n_tokens() const { return static_cast<int>(tokens.size()); }
  /// Accepted tokens plus the speculative ones: what the cache catches up to.
  int n_with_spec() const { return n_tokens() + static_cast<int>(spec_tokens.size()); }
  /// Token at position pos < n_with_spec() (a speculative one past n_tokens()).
  TokenId token_at(int pos) const {
    return pos < n_tokens() ? tokens[size_t(pos)] : spec_tokens[size_t(pos - n_tokens())];
  }
  int n_output() const { return n_tokens() - n_prompt; }
  /// Length when done (prompt + max_tokens); exact with ignore_eos, an upper bound otherwise.
  int n_final() const { return n_prompt + sampling.max_tokens; }
  /// Positions whose K/V is ever computed: n_final − 1, since the last sampled token is never fed
  /// back (at least 1). The most KV slots the sequence can ever fill.
  int n_kv_final() const { return std::max(1, n_final() - 1); }
};

}  // namespace servelab
