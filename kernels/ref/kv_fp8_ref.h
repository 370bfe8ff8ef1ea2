#pragma once
// Plain C++ reference of the FP8 KV cache on the GPU (kernels/kv_fp8.h): the quantization of one
// K or V row (the CPU backend's formula, CpuBackend::store_kv: scale = amax / 448, or 1 for an
// all-zero row; codes = E4M3(x * (1 / scale)), round to nearest even, saturating), its read-back,
// and whole arenas converted between fp32 [n_slots, n_kv_heads, head_dim] and the GPU's FP8
// layout (pages of 16 slots split by KV head: head h's 16 rows of codes, then their 16 scales;
// a page is 16 slots of kv_fp8_slot_bytes_ref, padding zero at its end). The decode and
// prefill kernels over an FP8 arena are checked against attention_ref over the read-back arena.
#include <cstdint>
#include <vector>

#include "kernels/step_input.h"

namespace servelab::kernels {

/// Quantizes head_dim values into codes; returns the row's scale.
float quantize_kv_row_fp8_ref(const float* row, int head_dim, uint8_t* codes);
/// codes[i] * scale, as fp32 (the CPU backend's read-back).
void dequantize_kv_row_fp8_ref(const uint8_t* codes, float scale, int head_dim, float* out);

/// Bytes of one slot of an FP8 arena (kv_fp8.h's fp8_kv_slot_bytes, restated for host code).
int64_t kv_fp8_slot_bytes_ref(int n_kv_heads, int head_dim);
/// Slots an arena of n_slots is allocated with: whole pages of 16 (fp8_kv_arena_slots).
int64_t kv_fp8_arena_slots_ref(int64_t n_slots);
/// Byte offsets of head h's codes and of its scale of `slot` (Fp8KvLayout::codes_at / scale_at).
int64_t kv_fp8_codes_at_ref(int64_t slot, int h, int n_kv_heads, int head_dim);
int64_t kv_fp8_scale_at_ref(int64_t slot, int h, int n_kv_heads, int head_dim);
/// An fp32 arena [shape.n_slots, n_kv_heads, head_dim] quantized row by row into the FP8 layout
/// (kv_fp8_arena_slots_ref(n_slots) slots; padding and the slots past n_slots zero).
std::vector<uint8_t> kv_fp8_pack_ref(const std::vector<float>& cache, const KvShape& shape);
/// An FP8 arena read back into fp32 [n_slots, n_kv_heads, head_dim].
std::vector<float> kv_fp8_unpack_ref(const std::vector<uint8_t>& arena, const KvShape& shape);

}  // namespace servelab::kernels
