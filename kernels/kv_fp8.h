#pragma once
// The FP8 KV cache on the GPU (`kv_cache_dtype: fp8`, issue 26): E4M3 codes with one fp32 scale
// (amax / 448) per (token, layer, K|V, KV head), the CPU backend's format
// (engine/backend/cpu_backend_kv.cpp, docs/quantization.md).
//
// Arena layout. Per layer one K and one V arena, as for bf16, but a slot of an arena is
// fp8_kv_slot_bytes() bytes: its n_kv_heads rows of head_dim codes, then their n_kv_heads fp32
// scales, padded to 16 bytes ([codes h0 | codes h1 | ... | scale h0 | scale h1 | ... | pad]). A
// slot stays self-contained (copies, swaps and prefix sharing move whole slots, scales included:
// kv_copy.cu runs unchanged with block_bytes = slots x fp8_kv_slot_bytes()) and 16-byte aligned.
// The padding is 0 whenever n_kv_heads is a multiple of 4 (every preset above `tiny`).
//
// The kernels: the fused RoPE + K/V write quantizes each K or V row in the same launch
// (rope_kv_write_fp8: the row is rounded to the dtype first, then quantized with the CPU's formula,
// so the codes and scales are bit-equal to CpuBackend::store_kv on that row); decode attention
// reads the codes and scales (decode_attention_fp8: tensor cores by default, CUDA cores for
// comparison and head_dim 32); prefill attention dequantizes
// the step's sequences into a dtype scratch (dequantize_kv_fp8) and runs the existing prefill
// kernels over it (the simplest correct thing; it costs a write and a read of the scratch).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kernels/step_input.h"

namespace servelab::kernels {

/// Bytes of one slot of one layer's K (or V) arena in the FP8 layout above.
SERVELAB_HD int64_t fp8_kv_slot_bytes(int n_kv_heads, int head_dim) {
  const int64_t codes = int64_t(n_kv_heads) * head_dim, scales = int64_t(n_kv_heads) * 4;
  return codes + (scales + 15) / 16 * 16;
}
/// Byte offset of the scales within a slot (the codes come first).
SERVELAB_HD int64_t fp8_kv_scales_offset(int n_kv_heads, int head_dim) { return int64_t(n_kv_heads) * head_dim; }

/// Fused: bias, RoPE on Q (in place, in the dtype) and K, then K and V quantized into the FP8
/// arenas a.k_cache / a.v_cache at slot_mapping (padding rows, slot < 0, are not written).
/// head_dim 32, 64 or 128.
void rope_kv_write_fp8(const QkvArgs& a, cudaStream_t stream);
/// Unfused step 2 (after rope_inplace): K and V of qkv quantized into the FP8 arenas.
void kv_write_fp8(const QkvArgs& a, cudaStream_t stream);

/// Which kernel decode_attention_fp8 runs, and how it turns codes into numbers:
/// - mma2 (the default): tensor cores (attention_decode_fp8_mma.cu), the bf16 tensor-core decode
///   kernel's structure with 2 16-position steps a warp a pass loaded into registers; each code
///   becomes a bf16 of its value · 2^-120 in registers, the K scale multiplies the score, the V
///   scale the softmax weight fed to P·V. Head_dim 64 or 128 (others, and arenas of 2^31 slots or
///   more, take shift_mask);
/// - mma: the same kernel with 4 steps a pass (comparison);
/// - mma_async: the same arithmetic with each warp's next pass copied into shared memory by
///   cp.async while it computes the current one (attention_decode_fp8_async.cu);
/// - shift_mask / prmt: the CUDA-core kernel (attention_decode_fp8.cu), codes to fp32 by two
///   shifts and two masks a code, or by a byte permute, an arithmetic shift and one mask (the same
///   bits either way);
/// by_env: SERVELAB_FP8KV_DECODE=mma2|mma|mma_async|shift_mask|prmt, else mma2.
enum class Fp8KvDecode { by_env, shift_mask, prmt, mma, mma2, mma_async };
/// The variant decode_attention_fp8 runs for these arguments (by_env read, mma on a head_dim it
/// does not build replaced by shift_mask).
Fp8KvDecode resolve_fp8_kv_decode(const DecodeAttentionArgs& a, Fp8KvDecode variant);
/// Decode attention over FP8 arenas (a.k_cache, a.v_cache in the layout above; a.shape.n_slots
/// slots): one launch, FlashDecoding as decode_attention with its split rules and workspace
/// (decode_attention_workspace_bytes; no cluster merge, no load pipeline). a.tensor_cores is
/// ignored (the variant chooses). Head_dim 32, 64, 128; any GQA ratio; both layouts.
void decode_attention_fp8(const DecodeAttentionArgs& a, cudaStream_t stream,
                          Fp8KvDecode variant = Fp8KvDecode::by_env);
/// How decode_attention_fp8 cuts these arguments' contexts for that variant (decode_attention_split
/// with the tensor-core rules aimed at 2 blocks per SM unless a.split says otherwise, or the
/// CUDA-core kernel's rules; DecodeSplit::tensor_cores says which runs).
DecodeSplit decode_attention_fp8_split(const DecodeAttentionArgs& a, int n_sms,
                                       Fp8KvDecode variant = Fp8KvDecode::by_env);

/// Dequantizes positions [0, context_lens[s]) of every sequence of a step from FP8 arenas into
/// dtype arenas [out_slots, n_kv_heads, head_dim] laid out naive: sequence s at base_slots[s] =
/// context_lens[0] + ... + context_lens[s - 1] (written here too), so prefill_attention can run
/// over them with KvAddressing{naive, base_slots}.
struct KvFp8DequantArgs {
  ScalarType dtype = ScalarType::bf16;
  const void* k_cache = nullptr;  ///< FP8 arenas
  const void* v_cache = nullptr;
  KvShape shape;                  ///< the FP8 arenas' slots, n_kv_heads, head_dim
  KvAddressing kv;
  int n_seqs = 0;
  const int32_t* context_lens = nullptr;  ///< [n_seqs] (device)
  int max_context = 0;            ///< host-side upper bound of context_lens (sizes the grid)
  int64_t total_context = 0;      ///< host-side sum of context_lens (must be <= out_slots)
  void* k_out = nullptr;          ///< [out_slots, n_kv_heads, head_dim] in dtype
  void* v_out = nullptr;
  int64_t out_slots = 0;
  int64_t* base_slots = nullptr;  ///< [n_seqs] (device), written
};
void dequantize_kv_fp8(const KvFp8DequantArgs& a, cudaStream_t stream);

}  // namespace servelab::kernels
