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
#include "kernels/mma_util.cuh"
#include "kernels/silu_mul_rows.cuh"
#include "kernels/silu.cuh"

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
  for (int j = 0; j < 8; ++j) g[j] = silu_mul_f(g[j], u[j]);
  *reinterpret_cast<Vec8*>(out + r * ffn + c) = pack8<T>(g);
}

/// lora_silu_mul_runs: blockIdx.y a tile of 16 rows, blockIdx.x 128 columns of gate (and the same
/// of up), a warp 32 of them as 4 mma column tiles of 8. Each lane first loads the gate and up
/// pairs its accumulator fragments cover (rows g and g + 8, columns 2t and 2t + 1 of each tile),
/// so the warp waits for memory once; then for each slot among the tile's rows (one, but at a
/// run's edge) it multiplies the tile's xa (staged in shared memory, the other slots' rows zero)
/// by its columns' B on the tensor cores (mma m16n8k16, R / 16 rounded up k-steps), and finally
/// adds the deltas, applies SiLU·mul and stores its pairs.
constexpr int kRunTileRows = 16, kRunWarps = 4, kRunTiles = 4;  // a warp: kRunTiles column tiles of 8
template <typename T>
__device__ __forceinline__ uint32_t load_pair(const T* p, bool ok) {
  return ok ? *reinterpret_cast<const uint32_t*>(p) : 0u;
}
template <typename T>
__device__ __forceinline__ void unpack_pair(uint32_t v, float& lo, float& hi) {
  T h[2];
  memcpy(h, &v, 4);
  lo = to_float<T>(h[0]);
  hi = to_float<T>(h[1]);
}
template <typename T, int R>
__global__ void __launch_bounds__(kRunWarps * 32) lora_silu_mul_runs_kernel(const T* gate_up, const LoraRunsDelta d,
                                                                            T* out, int ffn, int n_rows) {
  constexpr int kPad = 8;  // xa rows 2R + 8 wide: conflict-free fragment reads
  __shared__ __align__(16) T xs[kRunTileRows][2 * R + kPad];
  __shared__ int slot_of[kRunTileRows];
  pdl_wait();
  pdl_launch_dependents();
  const int r0 = int(blockIdx.y) * kRunTileRows, rows = min(kRunTileRows, n_rows - r0);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  if (threadIdx.x < kRunTileRows) {
    const int i = int(threadIdx.x);
    int s = -1;
#pragma unroll
    for (int q = 0; q < kLoraConsumerRuns; ++q)  // unrolled: the runs stay in the parameter space
      if (q < d.n_runs && i < rows && r0 + i >= d.first[q] && r0 + i < d.first[q] + d.count[q]) s = d.slot[q];
    slot_of[i] = s;
  }
  __syncthreads();
  const T* xa = static_cast<const T*>(d.xa);
  for (int e = int(threadIdx.x); e < kRunTileRows * 2 * R; e += kRunWarps * 32) {
    const int i = e / (2 * R), k = e % (2 * R);
    xs[i][k] = slot_of[i] >= 0 ? xa[int64_t(r0 + i) * 2 * R + k] : from_float<T>(0.0f);
  }
  __syncthreads();
  const int c_warp = (int(blockIdx.x) * kRunWarps + warp) * kRunTiles * 8;  // the warp's first column
  if (c_warp >= ffn) return;
  const bool lo_ok = g < rows, hi_ok = g + 8 < rows;
  const T* row_lo = gate_up + int64_t(r0 + g) * 2 * ffn;
  const T* row_hi = row_lo + int64_t(8) * 2 * ffn;
  uint32_t gv[kRunTiles][2], uv[kRunTiles][2];
#pragma unroll
  for (int n = 0; n < kRunTiles; ++n) {
    const int col = c_warp + 8 * n + 2 * t;
    const bool in = c_warp + 8 * n < ffn;  // ffn is a multiple of 8: a column tile is all in or all out
    gv[n][0] = load_pair(row_lo + col, in && lo_ok);
    gv[n][1] = load_pair(row_hi + col, in && hi_ok);
    uv[n][0] = load_pair(row_lo + ffn + col, in && lo_ok);
    uv[n][1] = load_pair(row_hi + ffn + col, in && hi_ok);
  }
  float accg[kRunTiles][4] = {}, accu[kRunTiles][4] = {};
  const T* b = static_cast<const T*>(d.b);
  int done = -1;  // the tile's slots in turn, smallest first (the block agrees on the order)
  for (;;) {
    int s = -1;
    for (int i = 0; i < kRunTileRows; ++i)
      if (slot_of[i] > done && (s < 0 || slot_of[i] < s)) s = slot_of[i];
    if (s < 0) break;
    done = s;
    const bool mine_lo = slot_of[g] == s, mine_hi = slot_of[g + 8] == s;
    const T* bs = b + int64_t(s) * 2 * ffn * R;
#pragma unroll
    for (int k0 = 0; k0 < R; k0 += 16) {
      const int k_lo = k0 + 2 * t, k_hi = k0 + 8 + 2 * t;
      const bool lo_in = k_lo < R, hi_in = k_hi < R;
      auto a_reg = [&](int row, bool ok, int k) -> uint32_t {
        return ok ? *reinterpret_cast<const uint32_t*>(&xs[row][k]) : 0u;
      };
      const uint32_t ag[4] = {a_reg(g, mine_lo && lo_in, k_lo), a_reg(g + 8, mine_hi && lo_in, k_lo),
                              a_reg(g, mine_lo && hi_in, k_hi), a_reg(g + 8, mine_hi && hi_in, k_hi)};
      const uint32_t au[4] = {a_reg(g, mine_lo && lo_in, R + k_lo), a_reg(g + 8, mine_hi && lo_in, R + k_lo),
                              a_reg(g, mine_lo && hi_in, R + k_hi), a_reg(g + 8, mine_hi && hi_in, R + k_hi)};
#pragma unroll
      for (int n = 0; n < kRunTiles; ++n) {
        const bool in = c_warp + 8 * n < ffn;
        const int col = c_warp + 8 * n + g;  // B's column for this lane (the fragment's n index g)
        const T* bg = bs + int64_t(col) * R;
        const T* bu = bs + int64_t(ffn + col) * R;
        mma_16816<T>(accg[n], ag, load_pair(bg + k_lo, in && lo_in), load_pair(bg + k_hi, in && hi_in));
        mma_16816<T>(accu[n], au, load_pair(bu + k_lo, in && lo_in), load_pair(bu + k_hi, in && hi_in));
      }
    }
  }
  // The accumulator fragment: acc[n][0..1] row g, acc[n][2..3] row g + 8, columns 2t and 2t + 1.
  const bool delta_lo = slot_of[g] >= 0, delta_hi = slot_of[g + 8] >= 0;
#pragma unroll
  for (int n = 0; n < kRunTiles; ++n) {
    if (c_warp + 8 * n >= ffn) continue;
    const int col = c_warp + 8 * n + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!(h ? hi_ok : lo_ok)) continue;
      float g0, g1, u0, u1;
      unpack_pair<T>(gv[n][h], g0, g1);
      unpack_pair<T>(uv[n][h], u0, u1);
      if (h ? delta_hi : delta_lo) {
        g0 += accg[n][2 * h];
        g1 += accg[n][2 * h + 1];
        u0 += accu[n][2 * h];
        u1 += accu[n][2 * h + 1];
      }
      T o[2] = {from_float<T>(silu_mul_f(g0, u0)), from_float<T>(silu_mul_f(g1, u1))};
      uint32_t packed;
      memcpy(&packed, o, 4);
      *reinterpret_cast<uint32_t*>(out + int64_t(r0 + g + 8 * h) * ffn + col) = packed;
    }
  }
}

template <typename T>
void launch_silu_mul_runs(const void* gate_up, const LoraRunsDelta& d, void* act, int n_rows, int ffn,
                          cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(ffn, kRunWarps * kRunTiles * 8)), unsigned(ceil_div(n_rows, kRunTileRows)));
  const auto* g = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(act);
  constexpr int threads = kRunWarps * 32;
  switch (d.max_rank) {
    case 8: launch_pdl(lora_silu_mul_runs_kernel<T, 8>, grid, threads, 0, stream, g, d, o, ffn, n_rows); break;
    case 16: launch_pdl(lora_silu_mul_runs_kernel<T, 16>, grid, threads, 0, stream, g, d, o, ffn, n_rows); break;
    case 24: launch_pdl(lora_silu_mul_runs_kernel<T, 24>, grid, threads, 0, stream, g, d, o, ffn, n_rows); break;
    default: launch_pdl(lora_silu_mul_runs_kernel<T, 32>, grid, threads, 0, stream, g, d, o, ffn, n_rows); break;
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
