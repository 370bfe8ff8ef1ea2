#pragma once
// The FP8 KV cache on the GPU (`kv_cache_dtype: fp8`, issue 26): E4M3 codes with one fp32 scale
// (amax / 448) per (token, layer, K|V, KV head), the CPU backend's format
// (engine/backend/cpu_backend_kv.cpp, docs/quantization.md).
//
// Arena layout. Per layer one K and one V arena, as for bf16; each arena is cut into pages of
// kFp8KvPageSlots (16) consecutive slots, and a page is split by KV head: head h's 16 rows of
// head_dim codes (slot order), then their 16 fp32 scales, then head h + 1's
// ([h0: codes s0..s15 | scales s0..s15][h1: ...]...[padding]). A page takes 16 x
// fp8_kv_slot_bytes() bytes (n_kv_heads x (head_dim + 4) a slot, padded to 16 bytes), so the
// engine's sizing per slot is unchanged; an arena holds fp8_kv_arena_slots(n_slots) slots (whole
// pages). Why by head: decode attention reads one KV head of a sequence at a time, and a page of
// it is then 2 KB of codes and 64 bytes of scales in two runs instead of 16 rows of 128 bytes and
// 16 scattered scales a slot apart; on an H200 a read-only kernel over the same pages reads 0.99-1.02
// of the copy by head against 0.87-0.93 by slot at GQA 1 and 0.94-0.99 against 0.75-0.86 at GQA 4
// (bench/kernels/kv_read_probe.cu). Copies of whole pages (runs of 16-aligned slots) move bytes
// as before (kv_copy.cu with block_bytes = slots x fp8_kv_slot_bytes()); other runs and the
// swaps go slot by slot (kv_fp8_copy.cu; the host pool keeps a slot's rows and scales together).
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

/// Slots a page of an FP8 arena holds (the layout above).
constexpr int kFp8KvPageSlots = 16;
/// Bytes of one layer's K (or V) arena a slot accounts for in the FP8 layout above.
SERVELAB_HD int64_t fp8_kv_slot_bytes(int n_kv_heads, int head_dim) {
  const int64_t codes = int64_t(n_kv_heads) * head_dim, scales = int64_t(n_kv_heads) * 4;
  return codes + (scales + 15) / 16 * 16;
}
/// Slots an arena of n_slots usable slots is allocated with (whole pages).
SERVELAB_HD int64_t fp8_kv_arena_slots(int64_t n_slots) {
  return (n_slots + kFp8KvPageSlots - 1) / kFp8KvPageSlots * kFp8KvPageSlots;
}
/// Where a slot's rows and scales lie in an FP8 arena (the layout above).
struct Fp8KvLayout {
  int64_t page_bytes = 0;  ///< kFp8KvPageSlots x fp8_kv_slot_bytes
  int64_t head_bytes = 0;  ///< one head's part of a page: kFp8KvPageSlots x (head_dim + 4)
  int head_dim = 0;
  SERVELAB_HD static Fp8KvLayout of(int n_kv_heads, int head_dim) {
    return {kFp8KvPageSlots * fp8_kv_slot_bytes(n_kv_heads, head_dim), kFp8KvPageSlots * (int64_t(head_dim) + 4), head_dim};
  }
  /// Byte offset of head h's codes of `slot` (head_dim bytes).
  SERVELAB_HD int64_t codes_at(int64_t slot, int h) const {
    return slot / kFp8KvPageSlots * page_bytes + h * head_bytes + slot % kFp8KvPageSlots * head_dim;
  }
  /// Byte offset of head h's fp32 scale of `slot`.
  SERVELAB_HD int64_t scale_at(int64_t slot, int h) const {
    return slot / kFp8KvPageSlots * page_bytes + h * head_bytes + int64_t(kFp8KvPageSlots) * head_dim +
           slot % kFp8KvPageSlots * 4;
  }
};

/// Copy-on-write slot by slot: for each pair, slot src_dst[2i] -> src_dst[2i + 1] of every arena
/// (rows and scales; for runs of whole pages kv_copy.cu's copy_blocks moves the same bytes).
void copy_slots_fp8(void* const* arenas, int n_arenas, const int32_t* src_dst, int n_pairs, int n_kv_heads, int head_dim,
                    cudaStream_t stream);
/// Swap out: slots[i] of every arena packed into dst[(i * n_arenas + a) * fp8_kv_slot_bytes] as
/// [codes h0 | ... | scales | pad]; dst may be mapped pinned host memory.
void gather_slots_fp8(void* const* arenas, int n_arenas, const int32_t* slots, int n_slots, int n_kv_heads, int head_dim,
                      void* dst, cudaStream_t stream);
/// Swap in: the inverse of gather_slots_fp8.
void scatter_slots_fp8(void* const* arenas, int n_arenas, const int32_t* slots, int n_slots, int n_kv_heads, int head_dim,
                       const void* src, cudaStream_t stream);

/// Fused: bias, RoPE on Q (in place, in the dtype) and K, then K and V quantized into the FP8
/// arenas a.k_cache / a.v_cache at slot_mapping (padding rows, slot < 0, are not written).
/// head_dim 32, 64 or 128.
void rope_kv_write_fp8(const QkvArgs& a, cudaStream_t stream);
/// Unfused step 2 (after rope_inplace): K and V of qkv quantized into the FP8 arenas.
void kv_write_fp8(const QkvArgs& a, cudaStream_t stream);

/// Which kernel decode_attention_fp8 runs, and how it turns codes into numbers:
/// - mma2: tensor cores (attention_decode_fp8_mma.cu), the bf16 tensor-core decode kernel's
///   structure with 2 16-position steps a warp a pass loaded into registers; each code becomes a
///   bf16 of its value · 2^-120 in registers, the K scale multiplies the score, the V scale the
///   softmax weight fed to P·V. Head_dim 64 or 128 (others, and arenas of 2^31 slots or more, take
///   shift_mask);
/// - mma: the same kernel with 4 steps a pass (comparison);
/// - mma_async, mma_async3, mma_async4: the same arithmetic fed from a ring of one-step stages a
///   warp in shared memory filled by cp.async ahead of the step it computes, as many stages as fit
///   2, 3 or 4 blocks an SM (6, 4, 3 at head_dim 128; attention_decode_fp8_async.cu);
/// - mma_async4f: mma_async4 with the codes turned into f16 by one cvt.rn.f16x2.e4m3x2 a pair
///   instead of masks and shifts (Q and the softmax weights in f16, times a power of two and a
///   ratio of V scales);
/// - shift_mask / prmt: the CUDA-core kernel (attention_decode_fp8.cu), codes to fp32 by two
///   shifts and two masks a code, or by a byte permute, an arithmetic shift and one mask (the same
///   bits either way);
/// - mma_bulk: mma_async4f with each step's page brought by two bulk copies (cp.async.bulk from one
///   lane: the head's K run and V run of the page, codes then scales, as they lie; an mbarrier a
///   stage) where every step is a 16-aligned page (paged blocks a multiple of 16, head_dim 128,
///   sm_90), else mma_async4f;
/// - mma_regs: mma_async4f's arithmetic with each step's codes and scales loaded straight into the
///   registers its fragments take (plain 16-byte loads, no shared-memory stage), 2 steps ahead, 2
///   blocks an SM (attention_decode_fp8_regs.cu); where mma_bulk fits, else mma_async4f;
/// by_env: SERVELAB_FP8KV_DECODE=<any name above but by_env>, else by shape (fp8_kv_decode_by_shape).
enum class Fp8KvDecode { by_env, shift_mask, prmt, mma, mma2, mma_async, mma_async3, mma_async4, mma_async4f, mma_bulk, mma_regs };
/// Blocks an SM a cp.async-ring variant is built for (2, 3, 4), 0 for the others.
inline int fp8_kv_ring_blocks(Fp8KvDecode v) {
  switch (v) {
    case Fp8KvDecode::mma_async: return 2;
    case Fp8KvDecode::mma_async3: return 3;
    case Fp8KvDecode::mma_async4:
    case Fp8KvDecode::mma_async4f:
    case Fp8KvDecode::mma_bulk: return 4;
    default: return 0;
  }
}
/// Whether a variant loads its codes into registers ahead of the step (mma_regs).
inline bool fp8_kv_regs(Fp8KvDecode v) { return v == Fp8KvDecode::mma_regs; }
/// Whether a ring variant turns codes into f16 operands by cvt (mma_async4f).
inline bool fp8_kv_f16(Fp8KvDecode v) { return v == Fp8KvDecode::mma_async4f || v == Fp8KvDecode::mma_bulk; }
/// The default where SERVELAB_FP8KV_DECODE is unset. Where mma_bulk fits (bulk_fits: paged blocks a
/// multiple of 16, head_dim 128, sm_90): mma_bulk where fewer than 4 query heads share a KV head and
/// sequences × KV heads × ceil(max_context / 1024) >= 3 × SMs, else mma_regs. Elsewhere: mma_async4f
/// where sequences × KV heads >= 4 × SMs, else mma2. Measured on the H200 (results/gpu/quant/README.md):
/// the bulk ring wins at GQA 1 where its blocks fill the SMs with long runs of pages, the register
/// loads at GQA 4 and 8 and on small grids.
Fp8KvDecode fp8_kv_decode_by_shape(int n_seqs, int n_kv_heads, int group, int max_context, int n_sms, bool bulk_fits);
/// The variant decode_attention_fp8 runs for these arguments on n_sms SMs (by_env read, else by
/// shape; mma on a head_dim it does not build replaced by shift_mask).
Fp8KvDecode resolve_fp8_kv_decode(const DecodeAttentionArgs& a, int n_sms, Fp8KvDecode variant);
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
