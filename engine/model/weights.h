#pragma once
// Model weights in fp32 for the CPU backend, loaded from a checkpoint or drawn at random.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/quant.h"

namespace servelab {

/// One decoder layer. Matrices are row-major [out, in], as Hugging Face stores them,
/// so y = x · Wᵀ (cblas_sgemm with CblasTrans on the weight).
struct LayerWeights {
  std::vector<float> attn_norm;  // [d]
  std::vector<float> wq;         // [n_heads*head_dim, d]
  std::vector<float> wk;         // [n_kv_heads*head_dim, d]
  std::vector<float> wv;         // [n_kv_heads*head_dim, d]
  std::vector<float> bq, bk, bv; // [out] or empty when the model has no attention bias
  std::vector<float> wo;         // [d, n_heads*head_dim]
  std::vector<float> ffn_norm;   // [d]
  std::vector<float> w_gate;     // [ffn, d]
  std::vector<float> w_up;       // [ffn, d]
  std::vector<float> w_down;     // [d, ffn]
};

/// The decoder Linears of a layer in ModelWeights::quant_linears' order.
inline constexpr const char* kQuantLinearNames[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                     "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                     "mlp.down_proj"};

/// All weights of a model, fp32 in memory whatever the checkpoint's dtype. A quantized model's
/// Linear matrices hold their dequantized values (what the CPU backend, the reference, runs) and
/// `quant` says how they were quantized and how activations entering them are.
struct ModelWeights {
  ModelConfig config;
  QuantScheme quant;
  std::vector<float> embedding;   // [vocab, d]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [d]
  std::vector<float> lm_head;     // [vocab, d]; empty when tied to the embedding

  /// A quantized checkpoint's decoder Linears as stored (codes, scales, zeros), when load() was
  /// asked to keep them: [layer * 7 + j], j = q, k, v, o, gate, up, down (kQuantLinearNames). The
  /// fp32 matrices above hold the same values dequantized. Empty otherwise.
  std::vector<QuantLinear> quant_linears;

  const std::vector<float>& output_matrix() const { return lm_head.empty() ? embedding : lm_head; }

  /// Random weights with a seed (std normal scaled by 1/sqrt(fan_in); norms near 1), rounded
  /// through config.dtype so they equal what a synthesized checkpoint of that dtype loads as.
  static ModelWeights random(const ModelConfig& config, uint64_t seed);
  /// Load a Hugging Face folder: config.json plus model.safetensors, or shards listed in
  /// model.safetensors.index.json. A config.json with a quantization_config (compressed-tensors
  /// or vLLM fp8, AWQ, GPTQ: quant_checkpoint.h) loads the quantized Linears dequantized.
  /// Throws std::runtime_error naming the file and tensor.
  /// How a quantized checkpoint's Linears load: dequantized into their fp32 tensors (the cpu
  /// backend's reference), also kept as stored (quant_linears), or kept as stored only, their fp32
  /// tensors left empty (the cuda backend runs them in their format: no fp32 copy of the Linears
  /// in host memory, ~4 bytes a weight). An unquantized checkpoint loads the same in every mode.
  enum class QuantLinears { dequantize, dequantize_and_keep, keep_only };
  static ModelWeights load(const std::string& dir, QuantLinears quant = QuantLinears::dequantize);
  /// keep_only, a layer at a time: each layer's seven Linears (kQuantLinearNames' order) go to
  /// `sink` in layer order as soon as they are read, and none stay in quant_linears, so host memory
  /// holds one layer's codes unpacked (a byte a weight) at a time, beside whatever the sink keeps
  /// (the cuda backend: the layer packed, half a byte an INT4 weight). The memory check counts
  /// that, not the fp32 weights. An unquantized checkpoint never calls the sink.
  using QuantLayerSink = std::function<void(int layer, std::vector<QuantLinear>&& linears)>;
  static ModelWeights load_streamed(const std::string& dir, const QuantLayerSink& sink);
};

}  // namespace servelab
