#pragma once
// ModelProposer: drafts by running a model — a smaller one with the target's vocabulary
// (`draft_model`) or the target's own first L' layers and LM head (`self`, layer-skip
// self-speculation). It keeps its own copy of each sequence (the accepted tokens plus its last
// drafts) with its own paged K/V in its own arena, on its own backend (cpu beside a cpu target,
// a CudaBackend on the target's GPU beside a cuda one): each call rolls a copy back to the tokens
// the target accepted (rejected drafts' blocks freed), catches its K/V up in one batched step,
// then drafts one position per step for every sequence together (on cuda those one-row steps
// replay the draft's CUDA graphs).
// Greedy requests draft the argmax. Sampled ones, on the cpu backend, draw from q = the draft's
// sampling distribution at the request's temperature, top-k and top-p (their own uniform stream)
// and hand q over for rejection sampling; on a backend without host logits (cuda) the draft's
// own sampler draws the token with the key the target's draw at that position uses (seed,
// sequence, position) and, where the backend has caps().draw_probs (cuda), writes the
// distribution it sampled, which goes to the target as q; elsewhere the draft goes as a point
// mass: exact either way.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/spec/draft_warm_up.h"
#include "engine/spec/proposer.h"

namespace servelab {

/// The draft's own arena and threads. validate() names the bad field.
struct ModelProposerOptions {
  int64_t kv_cache_bytes = 16ll << 20;  ///< the draft's K/V arena (a sequence that does not fit gets no drafts)
  int max_model_len = 2048;             ///< longest sequence it drafts for
  int block_size = 16;
  int n_threads = 1;                    ///< its CPU backend's pool (the weights constructor)
  int max_num_seqs = 256;               ///< the most sequences one draft step holds (the backend's step buffers)
  int max_num_batched_tokens = 2048;    ///< the most rows one draft step holds (a longer catch-up runs in steps of this many)
  void validate() const;
};

class ModelProposer final : public Proposer {
 public:
  /// `method` is what name() reports ("self", "draft_model"). Throws std::invalid_argument when
  /// the draft's vocabulary is not target_vocab.
  ModelProposer(std::string method, std::shared_ptr<const ModelWeights> draft, int target_vocab,
                ModelProposerOptions options = {});
  /// A draft on a backend built by the caller (make_proposer: a CudaBackend of the draft's
  /// weights). It gets its own arena of options.kv_cache_bytes here.
  ModelProposer(std::string method, std::unique_ptr<Backend> draft, int target_vocab, ModelProposerOptions options = {});
  ~ModelProposer() override;
  const char* name() const override { return method_.c_str(); }
  /// One task, its distributions dropped (point masses).
  void propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) override;
  void propose_batch(std::span<const DraftTask> tasks) override;
  void forget(uint64_t seq_id) override;
  /// The first draft step's wall time times the share of its rows beyond 2 a sequence (the step's
  /// time taken as proportional to its rows, which holds where the excess matters: a catch-up of
  /// many rows a sequence).
  double catch_up_excess_s() const override { return excess_s_; }
  /// seq's tokens beyond its copy's computed prefix that seq kept (sync's rollback point).
  int catch_up_rows(const Sequence& seq) const override;
  /// Runs draft_warm_up_plan's rounds for the draft backend's warm_shapes within this proposer's
  /// step limits, on sequences no engine hands out (ids counted down from the top), forgotten
  /// after each round: what the backend pays the first time it runs a shape (on cuda a decode
  /// graph's eager run and capture, a cuBLASLt kernel's load) is paid here, before serving.
  /// Nothing on a backend without such shapes (cpu, sim). make_proposer calls it for a draft on
  /// a device.
  DraftWarmUpStats warm_up();
  /// Draft backend steps run so far (warm-up rounds and catch-up chunks included).
  int64_t n_steps() const { return n_steps_; }
  /// The limits the draft's step buffers were sized for (Backend::reserve_steps): a catch-up of
  /// more rows than limits().max_rows runs in several steps.
  const StepLimits& limits() const { return limits_; }

  const ModelConfig& draft_config() const { return backend_->config(); }
  const Backend& backend() const { return *backend_; }
  const KvManager& kv() const { return *kv_; }
  int n_sequences() const { return static_cast<int>(copies_.size()); }  ///< sequences it holds K/V for

 private:
  /// Rolls seq's copy back to its common prefix with `target` and gives it target's tokens.
  Sequence& sync(const Sequence& target);
  /// A task and its sequence's copy.
  struct Work {
    const DraftTask* task;
    Sequence* copy;
  };
  /// One batched step over the copies in `live`: each computes its pending positions and draws one
  /// draft for its task. Drops from `live` the copies the arena could not grow.
  void draft_step(std::vector<Work>& live);
  /// Computes the K/V of all but the last pending row of the copies in `live` in steps of at most
  /// limits_.max_rows rows, without draws, until the rows the first draft step computes fit in
  /// that limit; returns the rows computed. A catch-up never grows the draft backend's step
  /// buffers (on cuda that would make every captured graph be captured again).
  int64_t catch_up_in_chunks(const std::vector<Work>& live);

  std::string method_;
  int max_len_ = 0;
  double excess_s_ = 0.0;  ///< catch_up_excess_s of the last propose_batch
  int64_t n_steps_ = 0;
  StepLimits limits_;
  /// Sizes the arena and step buffers; the constructors' common part.
  void init(ModelProposerOptions options, int target_vocab);
  /// The draft token of each of `ran`'s draws: from host logits on the cpu backend, else drawn by
  /// the backend's own sampler.
  void draw_drafts(const std::vector<Work>& ran);

  std::unique_ptr<Backend> backend_;
  CpuBackend* cpu_ = nullptr;  // backend_ when it is the cpu backend (host logits, q)
  std::unique_ptr<KvManager> kv_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> copies_;  // by target sequence id
  Batch batch_;
  Step step_;
  std::vector<float> q_;
};

}  // namespace servelab
