#include "engine/spec/model_proposer.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/backend/sampler.h"

namespace servelab {

void ModelProposerOptions::validate() const {
  if (kv_cache_bytes <= 0)
    throw std::invalid_argument("draft kv_cache_bytes must be > 0 (got " + std::to_string(kv_cache_bytes) + ")");
  if (max_model_len < 2) throw std::invalid_argument("draft max_model_len must be >= 2 (got " + std::to_string(max_model_len) + ")");
  if (block_size < 1) throw std::invalid_argument("draft block_size must be >= 1 (got " + std::to_string(block_size) + ")");
  if (n_threads < 0) throw std::invalid_argument("draft n_threads must be >= 0 (got " + std::to_string(n_threads) + ")");
  if (max_num_seqs < 1) throw std::invalid_argument("draft max_num_seqs must be >= 1 (got " + std::to_string(max_num_seqs) + ")");
  if (max_num_batched_tokens < 1)
    throw std::invalid_argument("draft max_num_batched_tokens must be >= 1 (got " + std::to_string(max_num_batched_tokens) + ")");
}

ModelProposer::ModelProposer(std::string method, std::shared_ptr<const ModelWeights> draft, int target_vocab,
                             ModelProposerOptions options)
    : method_(std::move(method)) {
  options.validate();
  if (!draft) throw std::invalid_argument(method_ + " proposer: no draft weights");
  CpuBackendOptions o;
  o.n_threads = options.n_threads;
  auto cpu = std::make_unique<CpuBackend>(std::move(draft), o);
  cpu_ = cpu.get();
  backend_ = std::move(cpu);
  init(options, target_vocab);
}

ModelProposer::ModelProposer(std::string method, std::unique_ptr<Backend> draft, int target_vocab,
                             ModelProposerOptions options)
    : method_(std::move(method)), backend_(std::move(draft)) {
  options.validate();
  if (!backend_) throw std::invalid_argument(method_ + " proposer: no draft backend");
  init(options, target_vocab);
}

void ModelProposer::init(ModelProposerOptions options, int target_vocab) {
  const ModelConfig& draft = backend_->config();
  if (draft.vocab_size != target_vocab)
    throw std::invalid_argument(method_ + " proposer: the draft " + draft.name + " has a vocabulary of " +
                                std::to_string(draft.vocab_size) + " tokens, the target " +
                                std::to_string(target_vocab) + "; they must be the same");
  KvConfig kc;
  kc.kind = KvKind::paged;
  kc.block_size = options.block_size;
  kc.prefix_caching = false;  // its copies are rolled back and forth; nothing to share
  kc.max_model_len = std::min(options.max_model_len, draft.max_position);
  max_len_ = kc.max_model_len;
  const int64_t n_slots = options.kv_cache_bytes / backend_->kv_bytes_per_slot();
  if (n_slots < options.block_size)
    throw std::invalid_argument(method_ + " proposer: its kv_cache_bytes (" + std::to_string(options.kv_cache_bytes) +
                                ") hold less than one block of the draft's K/V");
  kv_ = make_kv_manager(kc, n_slots);
  backend_->init_kv(n_slots);
  limits_.max_seqs = options.max_num_seqs;
  limits_.max_rows = std::max(options.max_num_batched_tokens, options.max_num_seqs);
  limits_.max_context = max_len_;
  limits_.block_size = options.block_size;
  backend_->reserve_steps(limits_);
}

ModelProposer::~ModelProposer() = default;

void ModelProposer::propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) {
  const DraftTask task{&seq, max_k, &draft, nullptr};
  propose_batch(std::span<const DraftTask>(&task, 1));
}

void ModelProposer::forget(uint64_t seq_id) {
  auto it = copies_.find(seq_id);
  if (it == copies_.end()) return;
  kv_->release(*it->second);
  copies_.erase(it);
}

namespace model_proposer_detail {  // named: a unity batch shares one translation unit

/// The K/V positions of `copy` that sync would keep for `target`: its computed prefix common
/// with target's tokens, less target's last token (whose row draws the first draft).
int kept_positions(const Sequence& copy, const Sequence& target) {
  const size_t common = static_cast<size_t>(
      std::mismatch(copy.tokens.begin(), copy.tokens.end(), target.tokens.begin(), target.tokens.end()).first -
      copy.tokens.begin());
  return std::min({copy.n_computed, static_cast<int>(common), target.n_tokens() - 1});
}

}  // namespace model_proposer_detail

int ModelProposer::catch_up_rows(const Sequence& seq) const {
  const auto it = copies_.find(seq.id);
  return seq.n_tokens() - (it == copies_.end() ? 0 : model_proposer_detail::kept_positions(*it->second, seq));
}

Sequence& ModelProposer::sync(const Sequence& target) {
  auto& slot = copies_[target.id];
  if (!slot) {
    slot = std::make_unique<Sequence>();
    slot->id = target.id;
    slot->request_id = target.request_id;
  }
  Sequence& c = *slot;
  // Keep the K/V of the common prefix, less the last accepted token (its row draws the first draft).
  c.n_computed = model_proposer_detail::kept_positions(c, target);
  if (c.kv.allocated) kv_->truncate(c, c.n_computed);
  c.tokens = target.tokens;
  c.spec_tokens.clear();
  c.n_prompt = target.n_prompt;
  c.sampling = target.sampling;
  c.sample_index = target.sample_index;
  c.status = SeqStatus::running;
  return c;
}

void ModelProposer::propose_batch(std::span<const DraftTask> tasks) {
  std::vector<Work> live;
  for (const DraftTask& t : tasks) {
    if (t.max_k < 1 || t.seq->n_tokens() < 1 || t.seq->n_tokens() + t.max_k > max_len_) continue;
    live.push_back({&t, &sync(*t.seq)});
  }
  // Step 0 catches each copy up to its last accepted token (a long catch-up in chunks before it)
  // and drafts one token; step j drafts the (j + 1)-th for the tasks that want that many. A copy
  // the arena cannot hold stops drafting.
  excess_s_ = 0.0;
  int64_t rows = 0, steady = 0;  // the catch-up's rows, and the <= 2 a sequence of them steady drafting has
  for (const Work& w : live) {
    const int pending = w.copy->n_tokens() - w.copy->n_computed;
    rows += pending, steady += std::min(pending, 2);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!live.empty()) catch_up_in_chunks(live);
  for (int j = 0; !live.empty(); ++j) {
    std::erase_if(live, [&](const Work& w) { return w.task->max_k <= j; });
    if (live.empty()) break;
    draft_step(live);  // synchronous: its drafts are read back
    if (j > 0 || rows <= steady) continue;
    excess_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() *
                static_cast<double>(rows - steady) / static_cast<double>(rows);
  }
}

int64_t ModelProposer::catch_up_in_chunks(const std::vector<Work>& live) {
  int64_t pending = 0, done = 0;
  for (const Work& w : live) pending += w.copy->n_tokens() - w.copy->n_computed;
  while (pending > limits_.max_rows) {
    batch_.entries.clear();
    int budget = limits_.max_rows;
    for (const Work& w : live) {
      Sequence& c = *w.copy;
      const int take = std::min(c.n_tokens() - c.n_computed - 1, budget);  // its last row draws, in step 0
      if (take <= 0 || !kv_->allocate_slots(c, take)) continue;  // a full arena: draft_step drops it
      batch_.entries.push_back(BatchEntry{&c, take, false, 1, -1});
      budget -= take;
      if (budget == 0) break;
    }
    if (batch_.entries.empty()) break;
    build_step_input(batch_, *kv_, backend_->config().vocab_size, step_);
    step_.want_draw_probs = false;
    backend_->execute(step_);
    ++n_steps_;
    for (const BatchEntry& e : batch_.entries) {
      e.seq->n_computed += e.n_new;
      pending -= e.n_new;
      done += e.n_new;
    }
  }
  return done;
}

DraftWarmUpStats ModelProposer::warm_up() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t steps0 = n_steps_;
  const std::vector<DraftWarmRound> plan = draft_warm_up_plan(backend_->warm_shapes(limits_), limits_);
  const int vocab = backend_->config().vocab_size;
  std::vector<Sequence> seqs;
  std::vector<std::vector<TokenId>> drafts;
  std::vector<std::vector<float>> probs;
  std::vector<DraftTask> tasks;
  for (const DraftWarmRound& r : plan) {
    const size_t n = r.lengths.size();
    seqs.assign(n, Sequence{});
    drafts.assign(n, {});
    probs.assign(n, {});
    tasks.clear();
    for (size_t i = 0; i < n; ++i) {
      Sequence& s = seqs[i];
      s.id = s.request_id = UINT64_MAX - i;  // the engine counts its ids up from 0
      s.n_prompt = r.lengths[i];
      for (int t = 0; t < r.lengths[i]; ++t) s.tokens.push_back(TokenId((7919 * uint64_t(t) + 104729 * i + 1) % uint64_t(vocab)));
      s.status = SeqStatus::running;
      s.sampling.temperature = r.sampled ? 1.0f : 0.0f;
      s.sampling.seed = i;
      tasks.push_back(DraftTask{&s, r.k, &drafts[i], r.sampled ? &probs[i] : nullptr});
    }
    propose_batch(tasks);
    for (const Sequence& s : seqs) forget(s.id);
  }
  excess_s_ = 0.0;
  DraftWarmUpStats st;
  st.rounds = static_cast<int>(plan.size());
  st.steps = static_cast<int>(n_steps_ - steps0);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void ModelProposer::draft_step(std::vector<Work>& live) {
  batch_.entries.clear();
  std::vector<Work> ran;
  for (const Work& w : live) {
    Sequence& c = *w.copy;
    const int n_new = c.n_tokens() - c.n_computed;
    if (!kv_->allocate_slots(c, n_new)) continue;  // the draft's arena is full
    batch_.entries.push_back(BatchEntry{&c, n_new, true, 1, -1});
    ran.push_back(w);
  }
  live = ran;
  if (ran.empty()) return;
  build_step_input(batch_, *kv_, backend_->config().vocab_size, step_);
  ++n_steps_;
  draw_drafts(ran);
}

void ModelProposer::draw_drafts(const std::vector<Work>& ran) {
  if (!cpu_) {  // the backend's sampler draws each draft (argmax, or the target's key at that position)
    // Sampled drafts whose target verifies q (task.probs) take the distribution each draw sampled
    // from the backend (cuda: the sampler writes it beside the token), so the target runs
    // rejection sampling against q instead of taking the draft as a point mass.
    bool want_q = false;
    if (backend_->caps().draw_probs)
      for (const Work& w : ran) {
        const SamplingParams& sp = w.copy->sampling;
        want_q = want_q || (w.task->probs && sp.temperature != 0.0f && sp.top_k != 1);
      }
    step_.want_draw_probs = want_q;
    const StepOutput out = backend_->execute(step_);
    const size_t vocab = size_t(backend_->config().vocab_size);
    for (size_t i = 0; i < ran.size(); ++i) {
      Sequence& c = *ran[i].copy;
      const DraftTask& t = *ran[i].task;
      c.n_computed += batch_.entries[i].n_new;
      t.tokens->push_back(out.tokens[i]);
      c.tokens.push_back(out.tokens[i]);
      if (want_q && t.probs && c.sampling.temperature != 0.0f && c.sampling.top_k != 1)
        t.probs->insert(t.probs->end(), out.draw_probs.begin() + ptrdiff_t(i * vocab),
                        out.draw_probs.begin() + ptrdiff_t((i + 1) * vocab));
    }
    return;
  }
  const std::span<const float> logits = cpu_->logits(step_);
  const size_t vocab = size_t(backend_->config().vocab_size);
  for (size_t i = 0; i < ran.size(); ++i) {
    const DraftTask& t = *ran[i].task;
    Sequence& c = *ran[i].copy;
    c.n_computed += batch_.entries[i].n_new;
    const std::span<const float> row = logits.subspan(i * vocab, vocab);
    const int position = c.n_tokens();  // the index the draft takes
    TokenId x;
    if (c.sampling.temperature == 0.0f || c.sampling.top_k == 1) {
      x = argmax_token(row);
    } else {
      sampling_distribution(row, c.sampling, q_);
      x = draw_from(q_, uniform_draw(c.sampling.seed, uint64_t(c.sample_index), position, kStreamDraft));
      if (t.probs) t.probs->insert(t.probs->end(), q_.begin(), q_.end());
    }
    t.tokens->push_back(x);
    c.tokens.push_back(x);
  }
}

}  // namespace servelab
