// kernels/lora_act.h: SiLU·mul with the rows' gate|up LoRA delta added first: kernels::silu_mul's
// grid-stride loop (kernels/silu_mul_rows.cuh) with a read of the row's slot and (for an adapter
// row) of its two delta vectors.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

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

/// lora_silu_mul_runs: blockIdx.y a tile of kRunTileRows rows, blockIdx.x 256 columns (two a
/// thread). The tile's rows' slots and xa (fp32) are staged in shared memory; each thread loads
/// its columns' B for a row's slot when it differs from the one it holds (uniform over the block).
constexpr int kRunTileRows = 16, kRunThreads = 128;
template <typename T>
__device__ __forceinline__ void pair_to_float(const T* p, float (&f)[2]) {
  const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
  T h[2];
  memcpy(h, &v, 4);
  f[0] = to_float<T>(h[0]);
  f[1] = to_float<T>(h[1]);
}
template <typename T, int R>
__global__ void __launch_bounds__(kRunThreads) lora_silu_mul_runs_kernel(const T* gate_up, const LoraRunsDelta d,
                                                                         T* out, int ffn, int n_rows) {
  __shared__ float xs[kRunTileRows][2 * R];
  __shared__ int slot_of[kRunTileRows];
  pdl_wait();
  pdl_launch_dependents();
  const int r0 = int(blockIdx.y) * kRunTileRows, rows = min(kRunTileRows, n_rows - r0);
  for (int i = threadIdx.x; i < rows; i += kRunThreads) {
    int s = -1;
    for (int q = 0; q < d.n_runs; ++q)
      if (r0 + i >= d.first[q] && r0 + i < d.first[q] + d.count[q]) s = d.slot[q];
    slot_of[i] = s;
  }
  __syncthreads();
  const T* xa = static_cast<const T*>(d.xa);
  for (int e = threadIdx.x; e < rows * 2 * R; e += kRunThreads) {
    const int i = e / (2 * R), k = e % (2 * R);
    xs[i][k] = slot_of[i] >= 0 ? to_float<T>(xa[int64_t(r0 + i) * 2 * R + k]) : 0.0f;
  }
  __syncthreads();
  const int j = (int(blockIdx.x) * kRunThreads + int(threadIdx.x)) * 2;
  if (j >= ffn) return;
  const T* b = static_cast<const T*>(d.b);
  Vec8 bg[2][R / 8], bu[2][R / 8];  // columns j, j + 1 of gate's and up's B
  int held = -1;
  for (int i = 0; i < rows; ++i) {
    const int s = slot_of[i];
    const int64_t row = r0 + i;
    const T* g_at = gate_up + row * 2 * ffn + j;  // j even, ffn a multiple of 8: 4-byte pairs
    float g[2], u[2];
    pair_to_float(g_at, g);
    pair_to_float(g_at + ffn, u);
    if (s >= 0) {
      if (s != held) {
        const T* bs = b + int64_t(s) * 2 * ffn * R;
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
          for (int k = 0; k < R / 8; ++k) {
            bg[c][k] = *reinterpret_cast<const Vec8*>(bs + int64_t(j + c) * R + 8 * k);
            bu[c][k] = *reinterpret_cast<const Vec8*>(bs + int64_t(ffn + j + c) * R + 8 * k);
          }
        held = s;
      }
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int k = 0; k < R / 8; ++k) {
          float fg[8], fu[8];
          unpack8<T>(bg[c][k], fg);
          unpack8<T>(bu[c][k], fu);
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            g[c] += xs[i][8 * k + t] * fg[t];
            u[c] += xs[i][R + 8 * k + t] * fu[t];
          }
        }
    }
    T o[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) o[c] = from_float<T>(g[c] / (1.0f + expf(-g[c])) * u[c]);
    uint32_t packed;
    memcpy(&packed, o, 4);
    *reinterpret_cast<uint32_t*>(out + row * ffn + j) = packed;
  }
}

template <typename T>
void launch_silu_mul_runs(const void* gate_up, const LoraRunsDelta& d, void* act, int n_rows, int ffn,
                          cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(ffn, 2 * kRunThreads)), unsigned(ceil_div(n_rows, kRunTileRows)));
  const auto* g = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(act);
  switch (d.max_rank) {
    case 8: launch_pdl(lora_silu_mul_runs_kernel<T, 8>, grid, kRunThreads, 0, stream, g, d, o, ffn, n_rows); break;
    case 16: launch_pdl(lora_silu_mul_runs_kernel<T, 16>, grid, kRunThreads, 0, stream, g, d, o, ffn, n_rows); break;
    case 24: launch_pdl(lora_silu_mul_runs_kernel<T, 24>, grid, kRunThreads, 0, stream, g, d, o, ffn, n_rows); break;
    default: launch_pdl(lora_silu_mul_runs_kernel<T, 32>, grid, kRunThreads, 0, stream, g, d, o, ffn, n_rows); break;
  }
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

void lora_silu_mul_runs(ScalarType t, const void* gate_up, const LoraRunsDelta& d, void* act, int n_rows, int ffn,
                        cudaStream_t stream) {
  if (ffn % 8 != 0) throw std::invalid_argument("lora_silu_mul_runs: ffn must be a multiple of 8");
  if (!lora_silu_mul_runs_fits(d.n_runs, d.max_rank) || d.xa == nullptr || d.b == nullptr)
    throw std::invalid_argument("lora_silu_mul_runs: " + std::to_string(d.n_runs) + " runs of rank " +
                                std::to_string(d.max_rank) + " (at most " + std::to_string(kLoraConsumerRuns) +
                                " runs of rank 8, 16, 24 or 32, with xa and B)");
  for (int q = 0; q < d.n_runs; ++q)
    if (d.first[q] < 0 || d.count[q] < 0 || d.first[q] + d.count[q] > n_rows || d.slot[q] < 0)
      throw std::invalid_argument("lora_silu_mul_runs: run " + std::to_string(q) + " outside the step's " +
                                  std::to_string(n_rows) + " rows");
  if (n_rows == 0 || ffn == 0) return;
  SERVELAB_DISPATCH_16(t, launch_silu_mul_runs<__nv_bfloat16>(gate_up, d, act, n_rows, ffn, stream),
                       launch_silu_mul_runs<__half>(gate_up, d, act, n_rows, ffn, stream));
}

}  // namespace servelab::kernels
