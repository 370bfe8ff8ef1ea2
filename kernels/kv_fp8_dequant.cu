// dequantize_kv_fp8 (kv_fp8.h): the step's sequences' FP8 K/V into a dtype scratch laid out naive,
// for prefill attention over an FP8 cache. One thread block computes the sequences' base slots
// (an exclusive prefix sum of the context lengths, serially: steps have at most a few hundred
// sequences); then grid (position tiles, sequences): each thread turns 8 codes of one (position,
// K|V, KV head) row into 8 dtype values, code value * scale in fp32 (the CPU backend's read-back:
// fp8_e4m3_to_f32(code) * scale), rounded to the dtype.
#include <cuda_fp8.h>

#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/kv_fp8.h"

namespace servelab::kernels {
namespace kv_fp8_dequant_detail {  // named: the kernels library may be compiled as unity batches

constexpr int kThreads = 256, kPositions = 16;  // positions a block

__global__ void base_slots_kernel(const int32_t* context_lens, int n_seqs, int64_t* base_slots) {
  if (threadIdx.x != 0) return;
  int64_t at = 0;
  for (int s = 0; s < n_seqs; ++s) {
    base_slots[s] = at;
    at += context_lens[s];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) dequant_kernel(const KvFp8DequantArgs a, const Fp8KvLayout lay) {
  const int s = blockIdx.y, ctx = a.context_lens[s];
  const int p0 = blockIdx.x * kPositions;
  if (p0 >= ctx) return;
  const int hd = a.shape.head_dim, n_kv = a.shape.n_kv_heads, vecs = hd / 8;
  const int per_pos = 2 * n_kv * vecs;  // (K|V, head, vector) items of a position
  const int n_pos = min(kPositions, ctx - p0);
  const int64_t base = a.base_slots[s];
  const int64_t table_row = a.kv.kind == KvLayoutKind::paged ? a.kv.table_row(s) : int64_t(s);
  for (int i = threadIdx.x; i < n_pos * per_pos; i += kThreads) {
    const int pp = i / per_pos, r = i % per_pos;
    const bool is_v = r >= n_kv * vecs;
    const int hv = is_v ? r - n_kv * vecs : r, h = hv / vecs, c = (hv % vecs) * 8;
    const int p = p0 + pp;
    const int64_t slot = a.kv.slot_in_row(s, table_row, p);
    const uint8_t* src = static_cast<const uint8_t*>(is_v ? a.v_cache : a.k_cache);
    const uint2 codes = *reinterpret_cast<const uint2*>(src + lay.codes_at(slot, h) + c);
    const float scale = *reinterpret_cast<const float*>(src + lay.scale_at(slot, h));
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&codes);
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
      const __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(b[j] | (b[j + 1] << 8)), __NV_E4M3);
      const float2 v = __half22float2(__half2(h2));  // E4M3 -> fp16 -> fp32: exact
      f[j] = v.x * scale;
      f[j + 1] = v.y * scale;
    }
    T* dst = static_cast<T*>(is_v ? a.v_out : a.k_out) + (base + p) * a.shape.row_elems() + int64_t(h) * hd + c;
    *reinterpret_cast<Vec8*>(dst) = pack8<T>(f);
  }
}

}  // namespace kv_fp8_dequant_detail

void dequantize_kv_fp8(const KvFp8DequantArgs& a, cudaStream_t stream) {
  using namespace kv_fp8_dequant_detail;
  if (a.n_seqs == 0) return;
  const int hd = a.shape.head_dim;
  if (hd % 16 != 0 || hd <= 0) throw std::invalid_argument("dequantize_kv_fp8: head_dim must be a multiple of 16");
  if (a.total_context > a.out_slots)
    throw std::invalid_argument("dequantize_kv_fp8: the step's contexts hold " + std::to_string(a.total_context) +
                                " positions, the scratch " + std::to_string(a.out_slots) + " slots");
  if (!a.base_slots || !a.k_out || !a.v_out) throw std::invalid_argument("dequantize_kv_fp8: no scratch given");
  base_slots_kernel<<<1, 32, 0, stream>>>(a.context_lens, a.n_seqs, a.base_slots);
  CUDA_CHECK_LAUNCH();
  if (a.max_context <= 0) return;
  const dim3 grid(ceil_div(a.max_context, kPositions), a.n_seqs);
  const Fp8KvLayout lay = Fp8KvLayout::of(a.shape.n_kv_heads, hd);
  SERVELAB_DISPATCH_16(a.dtype, (dequant_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a, lay)),
                       (dequant_kernel<__half><<<grid, kThreads, 0, stream>>>(a, lay)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
