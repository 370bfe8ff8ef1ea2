#pragma once
// SpeculativeConfig: a strategy's `speculative:` block (the scenario's, or serve's flags) and the
// proposer it builds.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/backend/make_backend.h"
#include "engine/model/weights.h"
#include "engine/spec/sim_acceptance.h"
#include "engine/spec/proposer.h"

namespace servelab {

/// ngram: prompt lookup, no model. self: the target's first num_layers layers and its LM head.
/// draft_model: a smaller preset or checkpoint (`model`) with the target's vocabulary.
enum class SpecMethod { ngram, self, draft_model };
const char* to_string(SpecMethod m);  ///< "ngram", "self", "draft_model"

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::ngram;
  int num_speculative_tokens = 3;  ///< the most drafts per step and sequence, in [1, 16]
  int prompt_lookup_min = 1;       ///< ngram: shortest suffix matched
  int prompt_lookup_max = 3;       ///< ngram: longest suffix matched
  int num_layers = 0;              ///< self: layers the draft runs, >= 1 (< the target's, checked at build)
  std::string model;               ///< draft_model: a preset name or a checkpoint folder
  /// Adaptive k: each sequence drafts k in [1, num_speculative_tokens], moved by its acceptance
  /// (engine/spec/adaptive.h); false keeps k = num_speculative_tokens.
  bool adaptive = true;
  /// Backend sim only: how often its drafts are accepted (given, or measured by a real run's
  /// summary.json). Required there for self and draft_model; ngram without it keeps the
  /// n-gram proposer over the sim's random tokens (a draft stands only if a draw equals it).
  std::optional<SimAcceptance> sim_acceptance;
  /// Throws std::invalid_argument naming the field.
  void validate() const;
};

/// `servelab serve --speculative-config JSON` (vLLM's flag): {"method": "ngram" | "self" |
/// "draft_model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
/// "num_layers", "model", "adaptive", "sim_acceptance"}; a `model` without `method` means
/// draft_model, as in vLLM. sim_acceptance (serve on backend sim: how often drafts are accepted)
/// is {"per_position": [p1, ...]} or {"summary": FILE, "strategy": LABEL}, either with "requests":
/// FILE (request_acceptance.py's JSON: each request draws its own acceptance), as in a scenario.
/// Throws std::invalid_argument naming the key (spec_config_json.cpp).
SpeculativeConfig speculative_config_from_json(const std::string& text);

/// What a model proposer needs of the run: the target's weights (the cpu backend's, which a
/// cpu draft shares) or, on cuda, the target's backend spec (the draft is built on its GPU from
/// it), the longest sequence, the scheduler's step bounds, and the run's seed (a preset draft's
/// random weights are drawn with seed + 1: another model than a target of the same preset).
struct ProposerTarget {
  std::shared_ptr<const ModelWeights> weights;
  std::optional<BackendSpec> backend;  ///< cuda targets: the spec the draft's backend derives from
  int vocab_size = 0;
  int max_model_len = 2048;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  uint64_t seed = 0;
  /// The draft's K/V arena on a device backend (the cpu draft keeps ModelProposerOptions'
  /// default): a sequence the arena cannot hold gets no drafts.
  int64_t device_draft_kv_bytes = int64_t(1) << 30;
};

/// Builds the configured proposer. ngram needs nothing of the target; self and draft_model run
/// on the cpu backend beside target weights, or on the target's GPU beside a cuda target's spec
/// (self: the preset's first num_layers layers, drawn again: ~1 layer + embedding + LM head of
/// extra memory), and throw std::invalid_argument otherwise, or for a draft of another vocabulary.
std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, const ProposerTarget& target = {});

}  // namespace servelab
