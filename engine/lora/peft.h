#pragma once
// LoRA adapters as users have them: a PEFT folder (adapter_config.json + adapter_model.safetensors,
// as `PeftModel.save_pretrained` writes it), read into a LoraAdapter, and the writer tests and
// benchmarks make such folders with.
//
// adapter_config.json keys read: r, lora_alpha (PEFT's default 8), target_modules (a list of
// q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; or "all-linear"), use_rslora.
// Refused with a message: peft_type other than LORA, fan_in_fan_out, bias other than "none",
// modules_to_save, rank_pattern / alpha_pattern, use_dora, a target_modules regex string.
// Tensors: base_model.model.model.layers.N.{self_attn|mlp}.MODULE.lora_{A|B}.weight, A [r, in],
// B [out, r]; every tensor in the file must be one of those.
#include <string>

#include "engine/lora/lora_adapter.h"
#include "engine/model/config.h"

namespace servelab {

/// Reads the PEFT folder `dir` as adapter `name` for a base model of `config`. Throws
/// std::runtime_error naming the folder and what is wrong: a missing file (adapter_model.bin only:
/// convert it to safetensors), an unknown or unsupported key or module, rank outside
/// [1, max_rank], a tensor of the wrong shape, a layer the base model lacks, a missing A or B.
LoraAdapter read_peft_adapter(const std::string& dir, const std::string& name, const ModelConfig& config, int max_rank);

/// Writes `adapter` as a PEFT folder (created if absent): adapter_config.json and
/// adapter_model.safetensors with tensors in `dtype` (f32, bf16 or f16).
void write_peft_adapter(const std::string& dir, const LoraAdapter& adapter, DType dtype = DType::f32,
                        const std::string& base_model = "servelab");

/// The PEFT tensor name of layer `layer`'s target `t`, matrix 'A' or 'B'.
std::string peft_tensor_name(int layer, LoraTarget t, char matrix);

}  // namespace servelab
