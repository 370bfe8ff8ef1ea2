#pragma once
// A LoRA adapter in memory: per layer and per adapted linear, the low-rank pair (A, B) with
// W' = W + scale · B · A, fp32 whatever the file's dtype. PEFT folders are read and written by
// engine/lora/peft.h; the CPU backend runs adapters by the plain formula (engine/backend/cpu_lora.h).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/config.h"

namespace servelab {

struct ModelWeights;

/// The linears an adapter may target, by PEFT's module names.
enum class LoraTarget : int { q = 0, k, v, o, gate, up, down };
inline constexpr int kLoraTargets = 7;

/// "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj".
const char* peft_module_name(LoraTarget t);
/// "self_attn" for q/k/v/o, "mlp" for gate/up/down (PEFT's tensor path).
const char* peft_block_name(LoraTarget t);
/// The target whose PEFT module name is `name`; false when none is.
bool lora_target_from_name(const std::string& name, LoraTarget& out);
/// Input and output widths of target t's base linear in `config` (y = x · Wᵀ, W [out, in]).
int lora_in_dim(const ModelConfig& config, LoraTarget t);
int lora_out_dim(const ModelConfig& config, LoraTarget t);

/// One adapted linear: A [rank, in], B [out, rank], row-major as PEFT stores them. Both empty when
/// the adapter leaves this linear alone.
struct LoraPair {
  std::vector<float> a;
  std::vector<float> b;
  bool present() const { return !a.empty(); }
};

/// One adapter. scale = lora_alpha / rank (or lora_alpha / sqrt(rank) with use_rslora, as PEFT).
struct LoraAdapter {
  std::string name;
  /// Unique per loaded adapter in a process (LoraRegistry assigns it; never reused, 0 = none): the
  /// prefix cache's key and the device slots' identity.
  uint64_t id = 0;
  int rank = 0;
  float alpha = 0.0f;
  bool use_rslora = false;
  float scale = 0.0f;
  std::array<bool, kLoraTargets> targets{};  ///< which linears it adapts (in every layer)
  std::vector<std::array<LoraPair, kLoraTargets>> layers;  ///< [n_layers]

  bool targets_any() const;
  /// alpha / rank, or alpha / sqrt(rank) with use_rslora.
  static float scale_for(float alpha, int rank, bool use_rslora);
  /// Throws std::invalid_argument naming the adapter, layer, module and both shapes when a pair
  /// does not fit `config` or rank is outside [1, max_rank].
  void validate(const ModelConfig& config, int max_rank) const;
  /// Host bytes of its weights.
  int64_t bytes() const;
};

/// Adds scale · B · A to every adapted matrix of `weights` (the merged model the equivalence test
/// compares against). Throws std::invalid_argument when the shapes do not fit.
void merge_lora(ModelWeights& weights, const LoraAdapter& adapter);

/// An adapter of `config`'s shapes with seeded random A and B (std normal / sqrt(fan in), so the
/// delta is the size of the weights' own): tests and benchmarks write it to a PEFT folder. The
/// layers are drawn on `threads` threads (0: the machine's cores, at most 16); the values do not
/// depend on how many.
LoraAdapter random_lora(const ModelConfig& config, const std::string& name, int rank, float alpha,
                        const std::vector<LoraTarget>& targets, uint64_t seed, int threads = 0);

}  // namespace servelab
