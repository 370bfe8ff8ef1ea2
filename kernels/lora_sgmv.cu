// Grouped multi-LoRA (kernels/lora_sgmv.h; reference kernels/ref/lora_ref.h). Why this shape:
// a decode step's LoRA work is tiny (rank 16 against a 4096-wide input) and latency-bound, so
// the BGMV pair (kernels/lora.cu) spent its time walking the input serially per (row, rank) and
// re-reading each adapter's A and B once per row. Here the rows are grouped by slot once a
// step; the shrink splits the input width over many blocks (fp32 partials, summed by the
// expand, so no extra launch and no atomics: the result does not depend on timing), and each
// block reads its adapter's A chunk or B columns once for all the tile's rows.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/lora_sgmv.h"
#include "kernels/lora_shrink_item.cuh"

namespace servelab::kernels {
namespace {

using lora_detail::kSgmvWarps;
using lora_detail::shrink_finish;
using lora_detail::shrink_item;
constexpr int kSgmvColumns = 256;      // expand: threads (output columns) per block
constexpr int kPlanThreads = 1024;
constexpr int kPlanMaxSlots = 8192;    // the plan's two shared-memory arrays of n_slots ints
constexpr int kSgmvMaxChunks = 16;     // the expand sums at most this many partials per element

__global__ void lora_plan_kernel(const int32_t* row_slot, int n_rows, int n_slots, int32_t* n_tiles, int32_t* tiles,
                                 int32_t* perm, int32_t* perm_slot, int32_t* gemv_done, int n_gemv_done) {
  extern __shared__ int32_t plan_shared[];
  int32_t* count = plan_shared;             // rows per slot
  int32_t* cursor = plan_shared + n_slots;  // next perm index per slot
  __shared__ int32_t warp_rows[32], warp_tiles[32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int s = tid; s < n_slots; s += blockDim.x) count[s] = 0;
  for (int i = tid; i < n_gemv_done; i += blockDim.x) gemv_done[i] = 0;
  __syncthreads();
  for (int r = tid; r < n_rows; r += blockDim.x) {
    const int s = row_slot[r];
    if (s >= 0 && s < n_slots) atomicAdd(&count[s], 1);
  }
  __syncthreads();
  // Each thread a contiguous run of slots; a block scan of (rows, tiles) gives their offsets.
  const int per = (n_slots + blockDim.x - 1) / blockDim.x;
  const int s0 = min(n_slots, tid * per), s1 = min(n_slots, s0 + per);
  int my_rows = 0, my_tiles = 0;
  for (int s = s0; s < s1; ++s) {
    my_rows += count[s];
    my_tiles += (count[s] + kLoraTileRows - 1) / kLoraTileRows;
  }
  int inc_rows = my_rows, inc_tiles = my_tiles;
  for (int o = 1; o < 32; o *= 2) {
    const int r = __shfl_up_sync(0xffffffffu, inc_rows, o), t = __shfl_up_sync(0xffffffffu, inc_tiles, o);
    if (lane >= o) {
      inc_rows += r;
      inc_tiles += t;
    }
  }
  if (lane == 31) {
    warp_rows[warp] = inc_rows;
    warp_tiles[warp] = inc_tiles;
  }
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x / 32;
    int wr = lane < n_warps ? warp_rows[lane] : 0, wt = lane < n_warps ? warp_tiles[lane] : 0;
    for (int o = 1; o < 32; o *= 2) {
      const int r = __shfl_up_sync(0xffffffffu, wr, o), t = __shfl_up_sync(0xffffffffu, wt, o);
      if (lane >= o) {
        wr += r;
        wt += t;
      }
    }
    if (lane < n_warps) {  // exclusive: what the warps before this one hold
      warp_rows[lane] = wr;
      warp_tiles[lane] = wt;
    }
  }
  __syncthreads();
  int row_at = inc_rows - my_rows + (warp > 0 ? warp_rows[warp - 1] : 0);
  int tile_at = inc_tiles - my_tiles + (warp > 0 ? warp_tiles[warp - 1] : 0);
  for (int s = s0; s < s1; ++s) {
    cursor[s] = row_at;
    for (int j = 0; j * kLoraTileRows < count[s]; ++j, ++tile_at) {
      tiles[3 * tile_at] = s;
      tiles[3 * tile_at + 1] = row_at + j * kLoraTileRows;
      tiles[3 * tile_at + 2] = min(kLoraTileRows, count[s] - j * kLoraTileRows);
    }
    row_at += count[s];
  }
  if (tid == blockDim.x - 1) {  // the last thread's ends are the totals
    n_tiles[0] = tile_at;
    n_tiles[1] = row_at;
  }
  __syncthreads();
  for (int r = tid; r < n_rows; r += blockDim.x) {
    const int s = row_slot[r];
    if (s >= 0 && s < n_slots) {
      const int p = atomicAdd(&cursor[s], 1);
      perm[p] = r;
      perm_slot[p] = s;
    }
  }
}

/// What the expand items of one launch share.
template <typename T>
struct ExpandArgs {
  const float* partial;
  int n_chunks;
  const int32_t* tiles;
  const int32_t* perm;
  int n_rows;
  const T* b;
  const float* scale;
  int n_out, max_rank, total, seg_end0, seg_end1;
  T* y;
  int ld_y, c0;
  bool accumulate;  ///< false: y = the delta alone
};

/// Item (tile t, 256 columns from c_begin) of the expand: xa of the tile's rows (chunks summed,
/// scaled) in shared memory xs; each thread one column c of segment m, B[s, c, :] read once for
/// all the tile's rows. On decode this is a chain of dependent loads on the step's critical path,
/// so everything that does not need xa is loaded before the chunks are summed: the tile's rows,
/// their y values and B's first 16 ranks; the chunks' loads are issued together (at most
/// kSgmvMaxChunks, through L2: each is read once per block), and xa is read from shared
/// memory 4 floats at a time. Starts with a barrier (xs is reused by the block's next item).
template <typename T, bool kVec>
__device__ __forceinline__ void expand_item(const ExpandArgs<T>& e, float* xs, int t, int c_begin) {
  const int s = e.tiles[3 * t], p0 = e.tiles[3 * t + 1], n = e.tiles[3 * t + 2];
  const int c = c_begin + threadIdx.x;
  const bool live = c < e.n_out;
  const int cc = live ? c : e.n_out - 1;  // loads stay in bounds; only live columns store
  const int m = (cc >= e.seg_end0) + (cc >= e.seg_end1);  // segment of column c (unused ends are n_out)
  const int total = e.total, max_rank = e.max_rank;
  const T* bc = e.b + (int64_t(s) * e.n_out + cc) * max_rank;
  int row[kLoraTileRows];
  float y_old[kLoraTileRows];
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) row[r] = r < n ? e.perm[p0 + r] : 0;
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r)
    y_old[r] = r < n && e.accumulate ? to_float<T>(e.y[int64_t(row[r]) * e.ld_y + e.c0 + cc]) : 0.0f;
  Vec8 bv[2] = {};
  if constexpr (kVec) {
#pragma unroll
    for (int q = 0; q < 2; ++q)
      if (q * 8 < max_rank) bv[q] = *reinterpret_cast<const Vec8*>(bc + q * 8);
  }
  const float sc = e.scale[s];
  const float* part = e.partial + int64_t(p0) * total;
  const int64_t chunk_stride = int64_t(e.n_rows) * total;
  pdl_wait();  // launched with PDL after the shrink (LoraSgmvConfig::expand_pdl): its partials from here
  __syncthreads();
  for (int i = threadIdx.x; i < n * total; i += blockDim.x) {
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < kSgmvMaxChunks; ++j)
      if (j < e.n_chunks) v += __ldcg(part + j * chunk_stride + i);
    xs[i] = v * sc;
  }
  __syncthreads();
  if (!live) return;
  const float* xm = xs + m * max_rank;
  float acc[kLoraTileRows] = {};
  if constexpr (kVec) {
    auto step = [&](const Vec8& v, int k) {
      float bf[8];
      unpack8<T>(v, bf);
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        const float4 x0 = *reinterpret_cast<const float4*>(xm + r * total + k);
        const float4 x1 = *reinterpret_cast<const float4*>(xm + r * total + k + 4);
        acc[r] += x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] +
                  x1.z * bf[6] + x1.w * bf[7];
      }
    };
#pragma unroll
    for (int q = 0; q < 2; ++q)
      if (q * 8 < max_rank) step(bv[q], q * 8);
    for (int k = 16; k < max_rank; k += 8) step(*reinterpret_cast<const Vec8*>(bc + k), k);
  } else {
    for (int k = 0; k < max_rank; ++k) {
      const float bk = to_float<T>(bc[k]);
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        acc[r] += xm[r * total + k] * bk;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) {
    if (r >= n) break;
    e.y[int64_t(row[r]) * e.ld_y + e.c0 + c] = from_float<T>(y_old[r] + acc[r]);
  }
}

/// Items (tile, chunk) of the plan's n_tiles · n_chunks: block b takes b, b + gridDim.x, ...
/// xa_rows non-null: each tile's xa finished into it (shrink_finish).
template <typename T>
__global__ void __launch_bounds__(kSgmvWarps * 32)
    lora_sgmv_shrink_kernel(const T* x, const int32_t* n_tiles, const int32_t* tiles, const int32_t* perm, int n_rows,
                            const T* a, int n_in, int total, int chunk_len, int n_chunks, float* partial,
                            const float* scale, int32_t* tile_done, float* xa_rows) {
  pdl_launch_dependents();  // an expand launched with PDL after it may start its prologue
  const int n_t = *n_tiles;
  for (int w = blockIdx.x; w < n_t * n_chunks; w += gridDim.x) {
    shrink_item<T>(x, tiles, perm, n_rows, a, n_in, total, chunk_len, partial, w % n_t, w / n_t);
    if (xa_rows) shrink_finish(tiles, perm, n_rows, total, n_chunks, partial, scale, tile_done, xa_rows, w % n_t);
  }
}

/// Items (tile, 256 columns) of the plan's n_tiles · col_blocks: block b takes b, b + gridDim.x, ...
template <typename T, bool kVec, int kMinBlocks>
__global__ void __launch_bounds__(kSgmvColumns, kMinBlocks)  // 3: at most 80 registers (expand_register_cap)
    lora_sgmv_expand_kernel(ExpandArgs<T> e, const int32_t* n_tiles, int col_blocks) {
  __shared__ __align__(16) float xs[kLoraTileRows * kLoraMaxSegments * kLoraMaxRank];
  const int n_t = *n_tiles;
  if (blockIdx.x >= n_t * col_blocks) pdl_wait();  // no item: done only once the shrink is
  for (int w = blockIdx.x; w < n_t * col_blocks; w += gridDim.x)
    expand_item<T, kVec>(e, xs, w % n_t, (w / n_t) * kSgmvColumns);
}

/// Item (kLoraTileRows consecutive perm positions from p0, 256 columns from c_begin),
/// LoraSgmvConfig::expand_by_rows: like expand_item but each row carries its own slot
/// (perm_slot), so a step of many adapters (tiles of one row) makes n_rows / 8 items that each
/// issue 8 rows' B loads together instead of one item (and one dependent-load chain) per row.
/// Rows of one slot read the same B column: the cache serves the repeats. Same sums in the same
/// order as expand_item. n_with: the plan's rows with an adapter. Starts with a barrier.
template <typename T, bool kVec>
__device__ __forceinline__ void expand_rows_item(const ExpandArgs<T>& e, const int32_t* perm_slot, int n_with,
                                                 float* xs, int p0, int c_begin) {
  const int n = min(kLoraTileRows, n_with - p0);
  __syncthreads();
  const int c = c_begin + threadIdx.x;
  const bool live = c < e.n_out;
  const int cc = live ? c : e.n_out - 1;
  const int m = (cc >= e.seg_end0) + (cc >= e.seg_end1);
  int row[kLoraTileRows];
  const T* bc[kLoraTileRows];
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) {
    const int pr = p0 + min(r, n - 1);
    row[r] = e.perm[pr];
    bc[r] = e.b + (int64_t(perm_slot[pr]) * e.n_out + cc) * e.max_rank;
  }
  float y_old[kLoraTileRows];
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r)
    y_old[r] = r < n && e.accumulate ? to_float<T>(e.y[int64_t(row[r]) * e.ld_y + e.c0 + cc]) : 0.0f;
  const float* part = e.partial + int64_t(p0) * e.total;
  const int64_t chunk_stride = int64_t(e.n_rows) * e.total;
  pdl_wait();  // launched with PDL after the shrink (LoraSgmvConfig::expand_pdl): its partials from here
  for (int i = threadIdx.x; i < n * e.total; i += blockDim.x) {
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < kSgmvMaxChunks; ++j)
      if (j < e.n_chunks) v += part[j * chunk_stride + i];
    xs[i] = v * e.scale[perm_slot[p0 + i / e.total]];
  }
  __syncthreads();
  if (!live) return;
  const float* xm = xs + m * e.max_rank;
  float acc[kLoraTileRows] = {};
  if constexpr (kVec) {
    for (int k = 0; k < e.max_rank; k += 8) {
      Vec8 bv[kLoraTileRows];
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r)
        if (r < n) bv[r] = *reinterpret_cast<const Vec8*>(bc[r] + k);
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        float bf[8];
        unpack8<T>(bv[r], bf);
        const float4 x0 = *reinterpret_cast<const float4*>(xm + r * e.total + k);
        const float4 x1 = *reinterpret_cast<const float4*>(xm + r * e.total + k + 4);
        acc[r] += x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] +
                  x1.z * bf[6] + x1.w * bf[7];
      }
    }
  } else {
    for (int k = 0; k < e.max_rank; ++k) {
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        acc[r] += xm[r * e.total + k] * to_float<T>(bc[r][k]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) {
    if (r >= n) break;
    e.y[int64_t(row[r]) * e.ld_y + e.c0 + c] = from_float<T>(y_old[r] + acc[r]);
  }
}

/// Block (row block, column block) of the by-rows expand (expand_rows_item).
template <typename T, bool kVec, int kMinBlocks>
__global__ void __launch_bounds__(kSgmvColumns, kMinBlocks)
    lora_sgmv_expand_rows_kernel(ExpandArgs<T> e, const int32_t* n_tiles, const int32_t* perm_slot) {
  __shared__ __align__(16) float xs[kLoraTileRows * kLoraMaxSegments * kLoraMaxRank];
  const int p0 = blockIdx.x * kLoraTileRows, n_with = n_tiles[1];
  if (p0 >= n_with) {
    pdl_wait();  // no rows: done only once the shrink is
    return;
  }
  expand_rows_item<T, kVec>(e, perm_slot, n_with, xs, p0, blockIdx.y * kSgmvColumns);
}

/// LoraSgmvConfig::expand_auto: the slot-tile grid, each launch choosing on the device from the
/// plan: slot tiles (as lora_sgmv_expand_kernel), or by rows (as lora_sgmv_expand_rows_kernel,
/// the first row blocks × column blocks of the grid) when the tiles are more than
/// kAutoTilesPerRowBlock times the row blocks (steps of many adapters with few rows each).
constexpr int kAutoTilesPerRowBlock = 2;
template <typename T, bool kVec>
__global__ void __launch_bounds__(kSgmvColumns, 2)  // 128 registers: the by-rows item's without spilling
    lora_sgmv_expand_auto_kernel(ExpandArgs<T> e, const int32_t* n_tiles, const int32_t* perm_slot, int col_blocks) {
  __shared__ __align__(16) float xs[kLoraTileRows * kLoraMaxSegments * kLoraMaxRank];
  const int n_t = n_tiles[0], n_with = n_tiles[1];
  const int row_blocks = (n_with + kLoraTileRows - 1) / kLoraTileRows;
  if (n_t > kAutoTilesPerRowBlock * row_blocks) {  // by rows: items (row block, column block)
    if (blockIdx.x >= row_blocks * col_blocks) pdl_wait();
    for (int w = blockIdx.x; w < row_blocks * col_blocks; w += gridDim.x)
      expand_rows_item<T, kVec>(e, perm_slot, n_with, xs, (w % row_blocks) * kLoraTileRows,
                                (w / row_blocks) * kSgmvColumns);
    return;
  }
  if (blockIdx.x >= n_t * col_blocks) pdl_wait();
  for (int w = blockIdx.x; w < n_t * col_blocks; w += gridDim.x)
    expand_item<T, kVec>(e, xs, w % n_t, (w / n_t) * kSgmvColumns);
}

void check_sgmv_pool(const LoraPool& p, const char* who) {
  if (p.max_rank < 1 || p.max_rank > kLoraMaxRank)
    throw std::invalid_argument(std::string(who) + ": max_rank " + std::to_string(p.max_rank) + " outside [1, " +
                                std::to_string(kLoraMaxRank) + "]");
  if (p.n_in < 8 || p.n_in % 8 != 0)
    throw std::invalid_argument(std::string(who) + ": n_in " + std::to_string(p.n_in) +
                                " must be a positive multiple of 8");
  if (p.n_seg < 1 || p.n_seg > kLoraMaxSegments)
    throw std::invalid_argument(std::string(who) + ": n_seg " + std::to_string(p.n_seg) + " outside [1, " +
                                std::to_string(kLoraMaxSegments) + "]");
  if (p.n_slots < 1) throw std::invalid_argument(std::string(who) + ": the pool has no slot");
  for (int m = 0; m + 1 < p.n_seg; ++m)
    if (p.seg_end[m] < (m > 0 ? p.seg_end[m - 1] : 0) || p.seg_end[m] > p.n_out)
      throw std::invalid_argument(std::string(who) + ": seg_end[" + std::to_string(m) + "] = " +
                                  std::to_string(p.seg_end[m]) + " is not ascending within n_out " +
                                  std::to_string(p.n_out));
}

int sgmv_segment_end(const LoraPool& p, int m) { return m + 1 < p.n_seg ? p.seg_end[m] : p.n_out; }

/// Blocks of a slot-tile launch of `items` possible items: all of them, or at most
/// blocks_per_sm an SM of the current device (LoraSgmvConfig::grid_blocks_per_sm).
int sgmv_grid(int64_t items, int blocks_per_sm) {
  if (blocks_per_sm > 0) {
    int device = 0, n_sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
    items = std::min<int64_t>(items, int64_t(blocks_per_sm) * n_sms);
  }
  return int(std::max<int64_t>(items, 1));
}

}  // namespace

int lora_chunk_len(int n_in, int n_rows, int target_blocks) {
  if (target_blocks < 1)
    throw std::invalid_argument("lora_chunk_len: target_blocks " + std::to_string(target_blocks) + " must be >= 1");
  const int passes = std::max(1, (n_in + kLoraChunkUnit - 1) / kLoraChunkUnit);
  const int row_tiles = std::max(1, (n_rows + kLoraTileRows - 1) / kLoraTileRows);
  const int chunks = std::clamp((target_blocks + row_tiles - 1) / row_tiles, 1, std::min(passes, kSgmvMaxChunks));
  return (passes + chunks - 1) / chunks * kLoraChunkUnit;
}

void lora_plan(const int32_t* row_slot, int n_rows, int n_slots, const LoraPlan& plan, cudaStream_t stream) {
  if (n_slots < 1 || n_slots > kPlanMaxSlots)
    throw std::invalid_argument("lora_plan: n_slots " + std::to_string(n_slots) + " outside [1, " +
                                std::to_string(kPlanMaxSlots) + "]");
  if (n_rows < 0) throw std::invalid_argument("lora_plan: n_rows is negative");
  lora_plan_kernel<<<1, kPlanThreads, 2 * sizeof(int32_t) * size_t(n_slots), stream>>>(row_slot, n_rows, n_slots,
                                                                                       plan.n_tiles, plan.tiles, plan.perm, plan.perm_slot,
                                                                                       plan.gemv_done, plan.gemv_done ? plan.n_gemv_done : 0);
  CUDA_CHECK_LAUNCH();
}

void lora_sgmv_shrink(ScalarType t, const void* x, const LoraPlan& plan, int n_rows, const LoraPool& pool,
                      float* partial, cudaStream_t stream, float* xa_rows) {
  check_sgmv_pool(pool, "lora_sgmv_shrink");
  if (xa_rows && plan.tile_done == nullptr)
    throw std::invalid_argument("lora_sgmv_shrink: xa_rows needs the plan's tile_done counters");
  if (n_rows == 0) return;
  const int len = lora_chunk_len(pool.n_in, n_rows, plan.config.shrink_target_blocks);
  const int n_chunks = (pool.n_in + len - 1) / len;
  const int grid = sgmv_grid(int64_t(lora_max_tiles(n_rows, pool.n_slots)) * n_chunks, plan.config.grid_blocks_per_sm);
  const int total = pool.total_rank();
  SERVELAB_DISPATCH_16(t,
                       (lora_sgmv_shrink_kernel<__nv_bfloat16><<<grid, kSgmvWarps * 32, 0, stream>>>(
                           static_cast<const __nv_bfloat16*>(x), plan.n_tiles, plan.tiles, plan.perm, n_rows,
                           static_cast<const __nv_bfloat16*>(pool.a), pool.n_in, total, len, n_chunks, partial,
                           pool.scale, plan.tile_done, xa_rows)),
                       (lora_sgmv_shrink_kernel<__half><<<grid, kSgmvWarps * 32, 0, stream>>>(
                           static_cast<const __half*>(x), plan.n_tiles, plan.tiles, plan.perm, n_rows,
                           static_cast<const __half*>(pool.a), pool.n_in, total, len, n_chunks, partial, pool.scale,
                           plan.tile_done, xa_rows)));
  CUDA_CHECK_LAUNCH();
}

LoraGemvShrink lora_gemv_shrink(const LoraPlan& plan, int n_rows, const LoraPool& pool, float* partial,
                                float* xa_rows, int launch) {
  check_sgmv_pool(pool, "lora_gemv_shrink");
  if (!plan.tile_done || !plan.gemv_done || !partial || !xa_rows)
    throw std::invalid_argument(
        "lora_gemv_shrink: needs the plan's tile_done and gemv_done counters, a partial scratch and xa rows");
  if (launch < 0 || launch >= plan.n_gemv_done)
    throw std::invalid_argument("lora_gemv_shrink: launch " + std::to_string(launch) + " outside the plan's " +
                                std::to_string(plan.n_gemv_done) + " gemv counters");
  const int blocks = plan.config.in_product_shrink_blocks;
  if (blocks < 1)
    throw std::invalid_argument("lora_gemv_shrink: in_product_shrink_blocks " + std::to_string(blocks) + " must be >= 1");
  LoraGemvShrink s;
  s.n_tiles = plan.n_tiles;
  s.tiles = plan.tiles;
  s.perm = plan.perm;
  s.perm_slot = plan.perm_slot;
  s.row_items = plan.config.in_product_row_items;
  s.a = pool.a;
  s.scale = pool.scale;
  s.partial = partial;
  s.tile_done = plan.tile_done;
  s.done = plan.gemv_done + launch;
  s.xa_rows = xa_rows;
  s.n_rows = n_rows;
  s.n_in = pool.n_in;
  s.chunk_len = lora_chunk_len(pool.n_in, n_rows, plan.config.in_product_chunks);
  s.n_chunks = (pool.n_in + s.chunk_len - 1) / s.chunk_len;
  s.blocks = blocks;
  return s;
}

namespace {

template <typename T>
ExpandArgs<T> expand_args(const float* partial, int n_chunks, const LoraPlan& plan, int n_rows, const LoraPool& pool,
                          void* y, int ld_y, int c0, bool accumulate) {
  return ExpandArgs<T>{partial, n_chunks, plan.tiles, plan.perm, n_rows, static_cast<const T*>(pool.b), pool.scale,
                       pool.n_out, pool.max_rank, pool.total_rank(), sgmv_segment_end(pool, 0),
                       sgmv_segment_end(pool, 1), static_cast<T*>(y), ld_y, c0, accumulate};
}

}  // namespace

void lora_sgmv_expand(ScalarType t, const float* partial, const LoraPlan& plan, int n_rows, const LoraPool& pool,
                      void* y, int ld_y, int c0, cudaStream_t stream, bool accumulate, bool pdl) {
  check_sgmv_pool(pool, "lora_sgmv_expand");
  if (n_rows == 0 || pool.n_out == 0) return;
  const LoraSgmvConfig& cf = plan.config;
  const int n_chunks = lora_n_chunks(pool.n_in, n_rows, cf.shrink_target_blocks);
  const int col_blocks = (pool.n_out + kSgmvColumns - 1) / kSgmvColumns;
  const dim3 rows_grid((n_rows + kLoraTileRows - 1) / kLoraTileRows, col_blocks);
  const int tiles_grid =
      cf.expand_by_rows ? 0 : sgmv_grid(int64_t(lora_max_tiles(n_rows, pool.n_slots)) * col_blocks, cf.grid_blocks_per_sm);
  const int e0 = sgmv_segment_end(pool, 0), e1 = sgmv_segment_end(pool, 1);
  auto launch_cap = [&](auto tag, auto vec, auto min_blocks) {
    using T = decltype(tag);
    constexpr bool kV = decltype(vec)::value;
    constexpr int kM = decltype(min_blocks)::value;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t lc{};
    lc.blockDim = kSgmvColumns;
    lc.stream = stream;
    lc.attrs = attr;
    lc.numAttrs = pdl ? 1 : 0;
    const ExpandArgs<T> args = expand_args<T>(partial, n_chunks, plan, n_rows, pool, y, ld_y, c0, accumulate);
    const int32_t* counts = plan.n_tiles;
    const int32_t* perm_slot = plan.perm_slot;
    if (cf.expand_by_rows) {
      lc.gridDim = rows_grid;
      CUDA_CHECK(cudaLaunchKernelEx(&lc, lora_sgmv_expand_rows_kernel<T, kV, kM>, args, counts, perm_slot));
    } else if (cf.expand_auto) {
      lc.gridDim = dim3(tiles_grid);
      CUDA_CHECK(cudaLaunchKernelEx(&lc, lora_sgmv_expand_auto_kernel<T, kV>, args, counts, perm_slot, col_blocks));
    } else {
      lc.gridDim = dim3(tiles_grid);
      CUDA_CHECK(cudaLaunchKernelEx(&lc, lora_sgmv_expand_kernel<T, kV, kM>, args, counts, col_blocks));
    }
  };
  auto launch = [&](auto tag, auto vec) {
    if (cf.expand_register_cap)
      launch_cap(tag, vec, std::integral_constant<int, 3>{});
    else
      launch_cap(tag, vec, std::integral_constant<int, 1>{});
  };
  const bool vec = pool.max_rank % 8 == 0;
  SERVELAB_DISPATCH_16(t,
                       (vec ? launch(__nv_bfloat16{}, std::true_type{}) : launch(__nv_bfloat16{}, std::false_type{})),
                       (vec ? launch(__half{}, std::true_type{}) : launch(__half{}, std::false_type{})));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
