// The product with its LoRA runs inside (lora_fused_gemm.h). One block: 128 rows (a tile of one
// run) x BN columns of one segment; warpgroup 0's first thread issues the TMA copies of x (128 x 64),
// W (BN x 64) and, for a tile with a slot, the slot's A rows of that segment (R x 64) into a ring of
// stages (128-byte swizzle, full/empty mbarriers); warpgroups 1 and 2 take 64 rows each: per k-step
// of 16, wgmma m64nBNk16 (the product) and m64nRk16 (the shrink) on the same x descriptor. The
// epilogue: xa = round16(scale · shrink) as A fragments (the accumulator layout is mma.sync's A
// layout per warp), += xa · B[slot] by mma.sync m16n8k16 onto the product's accumulators (their
// per-warp layout is mma.sync's C layout), one 16-bit store.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "kernels/attention_prefill_wgmma_tma.cuh"  // tensor_map_encoder, mbar_arrive_expect_tx
#include "kernels/attention.h"  // wgmma_device
#include "kernels/common.cuh"
#include "kernels/lora_fused_gemm.h"
#include "kernels/mma_util.cuh"
#include "kernels/per_device.h"
#include "kernels/wgmma_gemm.cuh"

namespace servelab::kernels {
namespace fused {

constexpr int kBM = kLoraFusedTileRows, kBK = 64, kThreads = 384;
constexpr uint32_t kSmemLimit = 232448;  // 227 KB a block on sm_90

struct Params {
  void* y;
  const void* b;  ///< the pool's B [n_slots, out, R]
  int out, in, n_seg;
  int seg_end[kLoraMaxSegments];
  int splits;        ///< K split across gridDim.z blocks; > 1: partial sums in ws, the last block adds them
  float* ws;         ///< [output tiles][splits][consumer thread's floats][256]
  int32_t* counters; ///< [output tiles]: blocks of a tile done (the last one resets it to 0)
  LoraFusedTiles tiles;
};

/// RS: the shrink's columns, R (one segment) or 2R (kTwo: a block whose columns cross a segment's
/// end takes both segments' ranks, their A rows adjacent in the pool).
template <int BN, int R, bool kLora, bool kTwo>
struct Shape {
  static constexpr int RS = kLora ? (kTwo ? 2 * R : R) : 0;
  static constexpr uint32_t kX = kBM * 128, kW = BN * 128, kA = RS * 128;
  static constexpr uint32_t kStage = kX + kW + kA;
  static constexpr int kStages = std::min<int>(6, int((kSmemLimit - 1024 - 128) / kStage));
  static constexpr uint32_t kBars = kStages * kStage;  // full[kStages], empty[kStages]
  static constexpr size_t kAlloc = kBars + 16 * kStages + 1024;
  /// Floats a consumer thread keeps: the product's and the shrink's accumulators.
  static constexpr int kFloats = BN / 2 + RS / 2;
  static_assert(kAlloc <= kSmemLimit && kStages >= 3, "stages do not fit");
  static_assert(kX % 1024 == 0 && kW % 1024 == 0 && kA % 1024 == 0, "128-byte swizzle atoms");
};

template <typename T, int BN, int R, bool kLora, bool kTwo>
__global__ void __launch_bounds__(kThreads, 1)
    lora_fused_gemm_kernel(const __grid_constant__ CUtensorMap mx, const __grid_constant__ CUtensorMap mw,
                           const __grid_constant__ CUtensorMap ma, const Params p) {
#if SERVELAB_WGMMA_DEVICE
  using S = Shape<BN, R, kLora, kTwo>;
  constexpr int kStages = S::kStages, RS = kLora ? S::RS : 16;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int last_block;
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = smem_u32(smem);
  auto full = [&](int s) { return sbase + S::kBars + 8 * s; };
  auto empty = [&](int s) { return sbase + S::kBars + 8 * (kStages + s); };
  auto stage = [&](int s) { return sbase + uint32_t(s) * S::kStage; };

  const LoraFusedTile tile = p.tiles.tile[blockIdx.x];
  const int n0 = int(blockIdx.y) * BN, tid = threadIdx.x;
  const bool has = kLora && tile.slot >= 0;
  int seg = 0;  // the segment of the block's first column
  if constexpr (kLora)
    while (seg + 1 < p.n_seg && n0 >= p.seg_end[seg]) ++seg;
  // This block's k-steps: split z of p.splits.
  const int n_k_all = (p.in + kBK - 1) / kBK, z = int(blockIdx.z);
  const int kb0 = int(int64_t(n_k_all) * z / p.splits), kb1 = int(int64_t(n_k_all) * (z + 1) / p.splits);
  const int n_k = kb1 - kb0;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      prefill_wgmma::mbar_init(full(s), 1);
      prefill_wgmma::mbar_init(empty(s), 8);  // one arrive per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid < 128) {  // ---------------- producer ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tid == 0) {
      const uint32_t bytes = S::kX + S::kW + (has ? S::kA : 0);
      const int a_row = has ? (tile.slot * p.n_seg + seg) * R : 0;
      for (int i = 0; i < n_k; ++i) {
        const int s = i % kStages, n = i / kStages, kb = kb0 + i;
        if (n > 0) prefill_wgmma::mbar_wait(empty(s), (n - 1) & 1);
        prefill_wgmma::mbar_arrive_expect_tx(full(s), bytes);
        wgmma::tma_load_2d(stage(s), &mx, kb * kBK, tile.row0, full(s));
        wgmma::tma_load_2d(stage(s) + S::kX, &mw, kb * kBK, n0, full(s));
        if (has) wgmma::tma_load_2d(stage(s) + S::kX + S::kW, &ma, kb * kBK, a_row, full(s));
      }
    }
    return;
  }
  // ---------------- consumers: warpgroup wg takes rows 64 wg .. 64 wg + 63 ----------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int ct = tid - 128, wg = ct / 128, warp = (ct / 32) % 4, lane = tid % 32, g = lane / 4, c = lane % 4;
  float acc[BN / 2];
  float xacc[RS / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < RS / 2; ++i) xacc[i] = 0.f;
  for (int i = 0; i < n_k; ++i) {
    const int s = i % kStages;
    prefill_wgmma::mbar_wait(full(s), (i / kStages) & 1);
    wgmma::pin(acc);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint64_t da = wgmma::desc_sw128(stage(s) + uint32_t(wg) * 64 * 128 + kk * 32, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(stage(s) + S::kX + kk * 32, 16, 1024);
      wgmma::mma_n<BN, T>(acc, da, db, 1);
      // The shrink runs in tiles without a slot too (on a stage's stale A rows, never read): a
      // branch between the wgmmas makes ptxas fence the accumulators (C7519).
      if constexpr (kLora) wgmma::mma_n<RS, T>(xacc, da, wgmma::desc_sw128(stage(s) + S::kX + S::kW + kk * 32, 16, 1024), 1);
    }
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::pin(acc);
    if (i > 0 && lane == 0) prefill_wgmma::mbar_arrive(empty((i - 1) % kStages));
  }
  wgmma::wait<0>();
  wgmma::pin(acc);
  wgmma::pin(xacc);

  if (p.splits > 1) {  // split K: every block stores its sums; the last of the tile adds them in split order
    const int64_t out_tile = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
    float* base = p.ws + out_tile * p.splits * S::kFloats * 256;
    float* mine = base + int64_t(z) * S::kFloats * 256 + ct;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) __stcg(mine + i * 256, acc[i]);
#pragma unroll
    for (int i = 0; i < RS / 2; ++i)
      if constexpr (kLora) __stcg(mine + (BN / 2 + i) * 256, xacc[i]);
    __threadfence();
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    if (ct == 0) last_block = atomicAdd(p.counters + out_tile, 1) == p.splits - 1;
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    if (!last_block) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
#pragma unroll
    for (int i = 0; i < RS / 2; ++i) xacc[i] = 0.f;
    for (int q = 0; q < p.splits; ++q) {
      const float* part = base + int64_t(q) * S::kFloats * 256 + ct;
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] += __ldcg(part + i * 256);
#pragma unroll
      for (int i = 0; i < RS / 2; ++i)
        if constexpr (kLora) xacc[i] += __ldcg(part + (BN / 2 + i) * 256);
    }
    if (ct == 0) p.counters[out_tile] = 0;  // for the next launch
  }

  if constexpr (kLora) {
    if (has) {  // y += round16(scale · xa) · B[slot]ᵀ, each column block with its segment's ranks
      uint32_t xa[RS / 16][4];
#pragma unroll
      for (int k = 0; k < RS / 16; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i) xa[k][i] = pack2<T>(tile.scale * xacc[8 * k + 2 * i], tile.scale * xacc[8 * k + 2 * i + 1]);
      const int seg_next = kTwo ? p.seg_end[seg] : 0;  // columns from here take the next segment's ranks
      const T* b = static_cast<const T*>(p.b) + int64_t(tile.slot) * p.out * R;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + 8 * j + g;
        const bool hi = kTwo && n0 + 8 * j >= seg_next;
        const T* bc = b + int64_t(col < p.out ? col : 0) * R + 2 * c;
#pragma unroll
        for (int k = 0; k < R / 16; ++k) {
          uint32_t b0 = 0, b1 = 0;
          if (col < p.out) {
            b0 = *reinterpret_cast<const uint32_t*>(bc + 16 * k);
            b1 = *reinterpret_cast<const uint32_t*>(bc + 16 * k + 8);
          }
          uint32_t a[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) a[e] = kTwo && hi ? xa[R / 16 + k][e] : xa[k][e];
          mma_16816<T>(*reinterpret_cast<float(*)[4]>(&acc[4 * j]), a, b0, b1);
        }
      }
    }
  }
  // The store: rows 16 warp + g and + 8 of this warpgroup's 64, two columns a pair.
  const int r0 = 64 * wg + 16 * warp + g;
  T* y = static_cast<T*>(p.y);
  const bool ok0 = r0 < tile.rows, ok1 = r0 + 8 < tile.rows;
  T* y0 = y + int64_t(tile.row0 + r0) * p.out;
  T* y1 = y0 + int64_t(8) * p.out;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * c;
    if (col >= p.out) continue;
    if (ok0) *reinterpret_cast<uint32_t*>(y0 + col) = pack2<T>(acc[4 * j], acc[4 * j + 1]);
    if (ok1) *reinterpret_cast<uint32_t*>(y1 + col) = pack2<T>(acc[4 * j + 2], acc[4 * j + 3]);
  }
#endif
}

/// A K-major 2-D tensor map: rows x cols (cols contiguous), box 64 x box_rows, 128-byte swizzle.
template <typename T>
CUtensorMap encode_2d(const void* base, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * sizeof(T)};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)}, elem_strides[2] = {1, 1};
  const CUresult r = prefill_wgmma::tensor_map_encoder()(
      &m, std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("lora_fused_gemm: cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
  return m;
}

}  // namespace fused

struct LoraFusedGemm::Maps {
  // (address, rows, cols, box rows, 16-bit type) -> map
  std::map<std::tuple<const void*, int64_t, int64_t, int, int>, CUtensorMap> cache;
  template <typename T>
  CUtensorMap get(const void* base, int64_t rows, int64_t cols, int box_rows) {
    const auto key = std::make_tuple(base, rows, cols, box_rows, int(std::is_same_v<T, __half>));
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    if (cache.size() >= 4096) cache.clear();  // a step's row count changes: bound it
    return cache.emplace(key, fused::encode_2d<T>(base, rows, cols, box_rows)).first->second;
  }
};

namespace {

/// How blocks of block_n columns meet the pool's segments: 0 none crosses a segment's end, 1 some
/// do and the kernel takes them (rank 16: the shrink's 32 columns cover two segments; every
/// segment at least block_n wide, so a block crosses one end at most), -1 it does not take them.
int crossing(const LoraPool& pool, int block_n) {
  bool any = false;
  for (int m = 0; m + 1 < pool.n_seg; ++m) any = any || pool.seg_end[m] % block_n != 0;
  if (!any) return 0;
  if (pool.max_rank != 16) return -1;
  for (int m = 0; m < pool.n_seg; ++m) {
    const int end = m + 1 < pool.n_seg ? pool.seg_end[m] : pool.n_out, begin = m > 0 ? pool.seg_end[m - 1] : 0;
    if (end - begin < block_n) return -1;
  }
  return 1;
}

}  // namespace

bool lora_fused_fits(ScalarType t, const LoraPool& pool, int out, int in) {
  if ((t != ScalarType::bf16 && t != ScalarType::f16) || in % 8 != 0 || out % 8 != 0 || in <= 0 || out <= 0)
    return false;
  if (pool.n_slots > 0) {
    if (pool.max_rank != 16 && pool.max_rank != 32) return false;
    if (pool.n_in != in || pool.n_out != out || pool.n_seg < 1 || pool.n_seg > kLoraMaxSegments) return false;
    for (int m = 0; m + 1 < pool.n_seg; ++m)
      if (pool.seg_end[m] % 8 != 0 || pool.seg_end[m] <= 0 || pool.seg_end[m] >= out) return false;
    if (crossing(pool, 128) < 0) return false;
  }
  return wgmma_device();
}

LoraFusedGemm::LoraFusedGemm() : maps_(std::make_unique<Maps>()) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev));
}
LoraFusedGemm::~LoraFusedGemm() {
  if (ws_) cudaFree(ws_);
  if (counters_) cudaFree(counters_);
}

LoraFusedShape LoraFusedGemm::pick(const LoraPool& pool, int out, int in, int n_tiles) const {
  // A block's time: its FLOPs at the tensor cores' rate a block reaches alone (5.7 TFLOP/s on an
  // H200), or less when the busy blocks together want more than ~8 TB/s of L2-to-SM traffic
  // ((128 + BN) x 64 x 2 bytes a k-step for 2 x 128 x BN x 64 FLOPs); the grid's time: its waves
  // of blocks; a split's fixup: the partial sums written and read again at ~3 TB/s. Fitted to
  // results/gpu/lora/2026-12-02-h200-fused-gemm/.
  constexpr double kRate = 5.7e12, kL2 = 8e12, kFixupBw = 3e12;
  LoraFusedShape best{128, 1};
  double best_t = 1e30;
  const int n_k = (in + 63) / 64;
  for (int bn : {128, 192, 256}) {
    if (pool.n_slots > 0 && crossing(pool, bn) < 0) continue;
    const double bytes_per_flop = (128.0 + bn) / (128.0 * bn);
    for (int splits = 1; splits <= 8 && n_k / splits >= 4; ++splits) {
      const int64_t blocks = int64_t(n_tiles) * ((out + bn - 1) / bn) * splits;
      const double busy = double(std::min<int64_t>(blocks, sms_));
      const double rate = std::min(kRate, kL2 / (busy * bytes_per_flop));
      const double t_block = 2.0 * 128 * bn * 64.0 * double(n_k) / splits / rate;
      const double fixup = splits > 1 ? double(blocks) * 128.0 * bn * 4 * 2 / kFixupBw : 0;
      const double t = double((blocks + sms_ - 1) / sms_) * t_block + fixup;
      if (t < best_t * 0.98) {  // ties to the earlier: fewer columns, fewer splits
        best_t = t;
        best = {bn, splits};
      }
    }
  }
  return best;
}

namespace {

template <typename T, int BN, int R, bool kLora, bool kTwo>
void launch(const CUtensorMap& mx, const CUtensorMap& mw, const CUtensorMap& ma, const fused::Params& p, int n_col,
            cudaStream_t stream) {
  using S = fused::Shape<BN, R, kLora, kTwo>;
  auto kernel = fused::lora_fused_gemm_kernel<T, BN, R, kLora, kTwo>;
  static std::atomic<uint64_t> raised{0};  // per device (per_device.h): a rank per GPU in one process
  once_per_device(raised, [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kAlloc)));
  });
  kernel<<<dim3(unsigned(p.tiles.n), unsigned(n_col), unsigned(p.splits)), fused::kThreads, S::kAlloc, stream>>>(mx, mw, ma, p);
  CUDA_CHECK(cudaGetLastError());
}

template <typename T, int BN>
void launch_bn(const CUtensorMap& mx, const CUtensorMap& mw, const CUtensorMap& ma, const fused::Params& p, int rank,
               bool lora, bool two, cudaStream_t stream) {
  const int n_col = (p.out + BN - 1) / BN;
  if (!lora) launch<T, BN, 16, false, false>(mx, mw, ma, p, n_col, stream);
  else if (rank == 16 && two) launch<T, BN, 16, true, true>(mx, mw, ma, p, n_col, stream);
  else if (rank == 16) launch<T, BN, 16, true, false>(mx, mw, ma, p, n_col, stream);
  else launch<T, BN, 32, true, false>(mx, mw, ma, p, n_col, stream);
}

/// Floats a consumer thread keeps (fused::Shape::kFloats) for the widest shrink at this width.
int floats_per_thread(int block_n, int rank, bool lora, bool two) { return block_n / 2 + (lora ? (two ? rank : rank / 2) : 0); }

}  // namespace

void LoraFusedGemm::run(ScalarType t, const void* x, const void* w, void* y, int n_rows, int out, int in,
                        const LoraPool& pool, const LoraFusedTiles& tiles, cudaStream_t stream, LoraFusedShape shape,
                        int x_rows) {
  if (!lora_fused_fits(t, pool, out, in))
    throw std::invalid_argument("lora_fused_gemm: this shape, pool or device is not the fused kernel's (" +
                                std::to_string(out) + " x " + std::to_string(in) + ", rank " +
                                std::to_string(pool.max_rank) + ")");
  if (tiles.n <= 0 || tiles.n > kLoraFusedMaxTiles || n_rows <= 0) return;
  const bool lora = pool.n_slots > 0;
  if (shape.block_n == 0) shape = pick(pool, out, in, tiles.n);
  const int bn = shape.block_n, splits = std::max(1, shape.splits);
  if (bn != 128 && bn != 192 && bn != 256)
    throw std::invalid_argument("lora_fused_gemm: " + std::to_string(bn) + " columns a block (128, 192 or 256)");
  const int cross = lora ? crossing(pool, bn) : 0;
  if (cross < 0) throw std::invalid_argument("lora_fused_gemm: blocks of " + std::to_string(bn) + " columns cross the segments' ends");
  if (splits > (in + 63) / 64) throw std::invalid_argument("lora_fused_gemm: more splits than k-steps");
  fused::Params p{};
  p.y = y;
  p.b = pool.b;
  p.out = out;
  p.in = in;
  p.n_seg = lora ? pool.n_seg : 1;
  for (int m = 0; m < kLoraMaxSegments; ++m) p.seg_end[m] = m + 1 < p.n_seg ? pool.seg_end[m] : out;
  p.splits = splits;
  p.tiles = tiles;
  if (splits > 1) {
    const int64_t out_tiles = int64_t(tiles.n) * ((out + bn - 1) / bn);
    const size_t need = size_t(out_tiles) * splits * floats_per_thread(bn, pool.max_rank, lora, cross > 0) * 256 * sizeof(float);
    if (need > ws_bytes_ || out_tiles > n_counters_) {  // eager launches only (never under graph capture)
      if (ws_) CUDA_CHECK(cudaFree(ws_));
      if (counters_) CUDA_CHECK(cudaFree(counters_));
      ws_bytes_ = std::max(need, ws_bytes_);
      n_counters_ = std::max<int64_t>(out_tiles, n_counters_);
      CUDA_CHECK(cudaMalloc(&ws_, ws_bytes_));
      CUDA_CHECK(cudaMalloc(&counters_, size_t(n_counters_) * sizeof(int32_t)));
      CUDA_CHECK(cudaMemset(counters_, 0, size_t(n_counters_) * sizeof(int32_t)));
    }
    p.ws = static_cast<float*>(ws_);
    p.counters = static_cast<int32_t*>(counters_);
  }
  auto go = [&]<typename T>() {
    const CUtensorMap mx = maps_->get<T>(x, std::max(n_rows, x_rows), in, fused::kBM);
    const CUtensorMap mw = maps_->get<T>(w, out, in, bn);
    const int a_box = cross > 0 ? 2 * pool.max_rank : pool.max_rank;
    const CUtensorMap ma = lora ? maps_->get<T>(pool.a, int64_t(pool.n_slots) * pool.total_rank(), in, a_box) : mw;
    if (bn == 256) launch_bn<T, 256>(mx, mw, ma, p, pool.max_rank, lora, cross > 0, stream);
    else if (bn == 192) launch_bn<T, 192>(mx, mw, ma, p, pool.max_rank, lora, cross > 0, stream);
    else launch_bn<T, 128>(mx, mw, ma, p, pool.max_rank, lora, cross > 0, stream);
  };
  if (t == ScalarType::bf16) go.template operator()<__nv_bfloat16>();
#if defined(SERVELAB_KERNELS_FP16)
  else go.template operator()<__half>();
#else
  else throw std::invalid_argument("lora_fused_gemm: fp16 is not in this build (SERVELAB_KERNELS_FP16=OFF)");
#endif
}

}  // namespace servelab::kernels
