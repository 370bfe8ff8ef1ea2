#pragma once
// SiLU in fp32, one expression for every kernel that applies it (SiLU·mul in elementwise.cu and
// silu_mul_rows.cuh, the LoRA consumers in lora_act.cu, the gemv epilogues in gemv.cu and
// quant_gemv_rows.cuh), so they round alike: the GPU tests hold them to the same bits.
namespace servelab::kernels {

/// silu(g) = g · sigmoid(g), as g / (1 + e^-g).
__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }
/// silu(g) · u: the gated MLP's activation.
__device__ __forceinline__ float silu_mul_f(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace servelab::kernels
