#pragma once
// Quantized Hugging Face checkpoints: the quantization_config of config.json, the tensors of one
// quantized Linear in each layout, and a writer of small folders in those layouts (tests, demos).
//   compressed-tensors ("float-quantized") and vLLM "fp8": <linear>.weight F8_E4M3 [out, in],
//     <linear>.weight_scale F32 [1] / [] (per tensor) or [out, 1] (per channel), optional
//     <linear>.input_scale F32 [1] (static activations).
//   AutoAWQ ("awq", version gemm): <linear>.qweight / .qzeros / .scales (quant_pack.h).
//   GPTQ ("gptq"): <linear>.qweight / .qzeros / .scales / .g_idx (quant_pack.h).
//   compressed-tensors "pack-quantized" (int4 weight-only, llm-compressor's W4A16):
//     <linear>.weight_packed / .weight_scale / .weight_zero_point / .weight_g_idx / .weight_shape
//     (quant_pack.h).
// Only the decoder layers' seven Linears are quantized; embeddings, norms and the LM head stay
// in the checkpoint's dtype.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/quant.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

namespace servelab {

/// The layouts the writer produces and the loader reads.
enum class QuantCheckpointFormat { compressed_tensors_fp8, vllm_fp8, awq, gptq, compressed_tensors_int4 };
/// "compressed-tensors", "fp8", "awq", "gptq", "compressed-tensors-int4"
const char* to_string(QuantCheckpointFormat f);

/// The scheme config.json's "quantization_config" describes, or nullopt when it has none.
/// Throws std::runtime_error("PATH: ...") for what servelab cannot run (bits other than 4 for
/// AWQ/GPTQ, FP8 block scales, int8 compressed-tensors, ...), naming the key.
std::optional<QuantScheme> read_quant_scheme(const std::string& config_json_path);

/// Whether `name` (an HF tensor name) is one of a decoder layer's seven Linear weights, and its
/// module prefix ("model.layers.3.mlp.up_proj").
bool is_quantized_linear(const std::string& name, std::string* prefix = nullptr);

/// Where a checkpoint tensor lives: nullptr file when absent.
struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
};
using TensorLookup = std::function<TensorRef(const std::string& name)>;

/// Reads the quantized tensors of the Linear `prefix` ([out, in]) under `scheme` and names each
/// one read in `consumed`. Throws std::runtime_error naming the file and tensor when one is
/// missing or has the wrong shape or dtype.
QuantLinear read_quant_linear(const TensorLookup& lookup, const std::string& prefix, const QuantScheme& scheme,
                              int64_t out, int64_t in, std::vector<std::string>& consumed);

/// How write_quantized_checkpoint quantizes.
struct QuantWriteOptions {
  QuantCheckpointFormat format = QuantCheckpointFormat::compressed_tensors_fp8;
  Fp8WeightScales fp8_scales = Fp8WeightScales::per_channel;  ///< fp8 formats
  float static_input_scale = 0.0f;  ///< fp8: > 0 writes this input_scale for every Linear (static)
  int group_size = 128;             ///< int4
  bool act_order = false;           ///< gptq, compressed-tensors-int4: g_idx from channels sorted by weight column norm
  bool symmetric = true;            ///< compressed-tensors-int4: no zero points (GPTQ's sym), else AWQ's asymmetric
  bool gptq_v1 = true;              ///< gptq: zeros stored minus one (checkpoint_format "gptq")
};

/// Writes `w` (fp32 in memory) as a quantized checkpoint in `dir`: config.json with its
/// quantization_config and one model.safetensors (unquantized tensors in bf16). Throws
/// std::invalid_argument when a shape does not fit the format (in or out not a multiple of 8,
/// in not divisible by group_size), std::runtime_error on I/O errors.
void write_quantized_checkpoint(const ModelWeights& w, const std::string& dir, const QuantWriteOptions& options);

}  // namespace servelab
