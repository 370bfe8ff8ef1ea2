#pragma once
// Accuracy of quantized formats, measured: the same weights run unquantized and in each format
// over the same teacher-forced token streams, their next-token logits compared position by
// position — on the CPU backend (the numerical reference of every format: `servelab quant-check`)
// or on any backend that computes logits (quant_check_backends: the cuda backend's own kernels,
// in a run's report). And the outlier channels real LLMs have, synthesized into random weights so
// the comparison sees them.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/kv_cache_spec.h"
#include "engine/model/weights.h"

namespace servelab {

/// One format to compare with the unquantized model.
struct QuantVariant {
  std::string label;   ///< "fp8-tensor", "int4_awq-g128+kvfp8", ...
  QuantScheme scheme;  ///< none: the weights as they are (e.g. only the KV cache quantized)
  KvCacheDType kv_cache_dtype = KvCacheDType::auto_dtype;
};

/// The variants `servelab quant-check` compares by default: FP8 per-tensor (vLLM's dynamic FP8),
/// FP8 per-channel weights with per-token activations, FP8 weight-only, INT4 AWQ- and GPTQ-style
/// (group int4_group_size(config)), the FP8 KV cache alone, and FP8 per-channel with an FP8 KV cache.
std::vector<QuantVariant> default_quant_variants(const ModelConfig& config);

struct QuantCheckOptions {
  int n_positions = 1024;  ///< compared positions (>= 1), split over n_sequences streams
  int n_sequences = 8;     ///< token streams run side by side as one batch per step
  uint64_t seed = 0;       ///< the streams' tokens
  int n_threads = 0;       ///< CPU backend threads, 0 = all
  /// Token ids that carry massive activations (add_massive_activations); a stream's position is one
  /// of them (uniformly) with probability massive_rate, else any token.
  std::vector<int32_t> massive_tokens;
  double massive_rate = 0.0;  ///< in [0, 1]
  void validate() const;   ///< throws std::invalid_argument naming the field
};

/// How one variant's next-token distributions compare with the unquantized model's.
struct QuantAccuracy {
  QuantVariant variant;
  int64_t n_positions = 0;
  double top1_agreement = 0.0;    ///< share of positions whose argmax token is the reference's
  /// The same over the positions whose own token is not a massive one (all of them without massive
  /// tokens): what a massive token in the same step does to the other rows.
  double top1_agreement_other = 0.0;
  double mean_kl = 0.0;           ///< mean KL(P_ref ‖ P_variant) over positions, nats
  double max_kl = 0.0;
  double max_logit_error = 0.0;   ///< max |logit − reference logit| over positions and vocabulary
  double rel_logit_error = 0.0;   ///< ‖logits − reference‖ / ‖reference‖ over everything
  double linear_bytes_per_weight = 2.0;  ///< the format's bytes per decoder Linear weight (bf16 = 2)
};

/// Runs `weights` (unquantized) and every variant over the same n_positions teacher-forced
/// positions and compares. Throws std::invalid_argument for quantized input weights or bad options.
std::vector<QuantAccuracy> quant_check(const ModelWeights& weights, const std::vector<QuantVariant>& variants,
                                       const QuantCheckOptions& options);

/// Makes a fresh backend holding the weights in one format.
using BackendMaker = std::function<std::unique_ptr<Backend>()>;

/// One format under test on a backend: its label, scheme and KV dtype, and how to make it.
struct BackendVariant {
  QuantVariant variant;  ///< scheme: what the format stores (its bytes per weight); not applied here
  BackendMaker make;
};

/// quant_check on backends that compute logits (Backend::step_logits): `reference()` holds the
/// unquantized weights, each variant's make() the same weights in its format; every backend runs
/// the same streams, one at a time, each freed before the next is
/// made. `config`: the model's shapes. Throws std::invalid_argument for bad options or a backend
/// without logits (the sim).
std::vector<QuantAccuracy> quant_check_backends(const ModelConfig& config, const BackendMaker& reference,
                                                const std::vector<BackendVariant>& variants,
                                                const QuantCheckOptions& options);

/// Gives `w` outlier activation channels: n_channels random channels (seeded) of both RMSNorm
/// weights of every layer times `magnitude`, so the inputs of Q/K/V and gate/up carry those
/// channels `magnitude` times larger at every token, as the outlier features of real LLMs
/// (LLM.int8(), SmoothQuant). Throws std::invalid_argument for n_channels outside [0, d] or a
/// magnitude <= 0.
void add_outlier_channels(ModelWeights& w, int n_channels, float magnitude, uint64_t seed);

}  // namespace servelab
