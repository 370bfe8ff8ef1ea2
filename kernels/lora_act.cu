// kernels/lora_act.h: SiLU·mul with the rows' gate|up LoRA delta added first: kernels::silu_mul's
// grid-stride loop (kernels/silu_mul_rows.cuh) with a read of the row's slot and (for an adapter
// row) of its two delta vectors.
#include <algorithm>
#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/lora_act.h"
#include "kernels/lora_delta.cuh"
#include "kernels/silu_mul_rows.cuh"

namespace servelab::kernels {
namespace {

template <typename T>
__global__ void lora_silu_mul_kernel(const T* gate_up, const T* delta, const int32_t* row_slot, T* out, int ffn,
                                     int64_t n_vec) {
  pdl_wait();
  pdl_launch_dependents();
  silu_mul_rows<T, true>(gate_up, delta, row_slot, out, ffn, n_vec);
}

/// lora_silu_mul_xa: a block per (row, kActVectors vectors of the row): for an adapter row, the
/// block stages the delta of its gate and up columns in shared memory (lora_delta.cuh's
/// lora_xa_stage: B read in order), then each thread one vector of 8 outputs.
constexpr int kActVectors = 256;
template <typename T>
__global__ void __launch_bounds__(kActVectors) lora_silu_mul_xa_kernel(const T* gate_up, const LoraXaDelta d, T* out,
                                                                       int ffn, int row_blocks) {
  __shared__ __align__(16) float dg[kActVectors * 8], du[kActVectors * 8];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r = blockIdx.x / row_blocks;
  const int v0 = int(blockIdx.x % row_blocks) * kActVectors, n_vec = min(kActVectors, ffn / 8 - v0), c0 = v0 * 8;
  const int s = d.row_slot[r];
  if (s >= 0) {
    lora_xa_stage<T>(d, r, s, 8 * n_vec, [&](int q) { return c0 + q; }, dg);
    lora_xa_stage<T>(d, r, s, 8 * n_vec, [&](int q) { return ffn + c0 + q; }, du);
  }
  const int v = threadIdx.x;
  if (v >= n_vec) return;
  const int c = c0 + 8 * v;
  float g[8], u[8];
  unpack8<T>(*reinterpret_cast<const Vec8*>(gate_up + r * 2 * ffn + c), g);
  unpack8<T>(*reinterpret_cast<const Vec8*>(gate_up + r * 2 * ffn + ffn + c), u);
  if (s >= 0)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      g[j] += dg[8 * v + j];
      u[j] += du[8 * v + j];
    }
#pragma unroll
  for (int j = 0; j < 8; ++j) g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
  *reinterpret_cast<Vec8*>(out + r * ffn + c) = pack8<T>(g);
}

int silu_grid(int64_t n_vec) { return static_cast<int>(std::clamp<int64_t>(ceil_div(n_vec, 256), 1, 8192)); }

}  // namespace

void lora_silu_mul(ScalarType t, const void* gate_up, const void* delta, const int32_t* row_slot, void* act,
                   int n_rows, int ffn, cudaStream_t stream) {
  if (ffn % 8 != 0) throw std::invalid_argument("lora_silu_mul: ffn must be a multiple of 8");
  const int64_t n_vec = int64_t(n_rows) * ffn / 8;
  if (n_vec == 0) return;
  SERVELAB_DISPATCH_16(t,
                       launch_pdl(lora_silu_mul_kernel<__nv_bfloat16>, silu_grid(n_vec), 256, 0, stream,
                                  static_cast<const __nv_bfloat16*>(gate_up), static_cast<const __nv_bfloat16*>(delta),
                                  row_slot, static_cast<__nv_bfloat16*>(act), ffn, n_vec),
                       launch_pdl(lora_silu_mul_kernel<__half>, silu_grid(n_vec), 256, 0, stream,
                                  static_cast<const __half*>(gate_up), static_cast<const __half*>(delta), row_slot,
                                  static_cast<__half*>(act), ffn, n_vec));
}

void lora_silu_mul_xa(ScalarType t, const void* gate_up, const LoraXaDelta& delta, void* act, int n_rows, int ffn,
                      cudaStream_t stream) {
  if (ffn % 8 != 0) throw std::invalid_argument("lora_silu_mul_xa: ffn must be a multiple of 8");
  if (delta.xa == nullptr) throw std::invalid_argument("lora_silu_mul_xa: no xa");
  lora_xa_delta_check(delta, "lora_silu_mul_xa");
  if (delta.n_out != 2 * ffn) throw std::invalid_argument("lora_silu_mul_xa: the delta's n_out must be 2 · ffn");
  if (n_rows == 0 || ffn == 0) return;
  const int row_blocks = int(ceil_div(int64_t(ffn / 8), int64_t(kActVectors)));
  const int grid = int(int64_t(n_rows) * row_blocks);
  SERVELAB_DISPATCH_16(t,
                       launch_pdl(lora_silu_mul_xa_kernel<__nv_bfloat16>, grid, kActVectors, 0, stream,
                                  static_cast<const __nv_bfloat16*>(gate_up), delta,
                                  static_cast<__nv_bfloat16*>(act), ffn, row_blocks),
                       launch_pdl(lora_silu_mul_xa_kernel<__half>, grid, kActVectors, 0, stream,
                                  static_cast<const __half*>(gate_up), delta, static_cast<__half*>(act), ffn,
                                  row_blocks));
}

}  // namespace servelab::kernels
