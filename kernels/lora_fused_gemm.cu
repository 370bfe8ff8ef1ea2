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
#include "kernels/common.cuh"
#include "kernels/lora_fused_gemm.h"
#include "kernels/mma_util.cuh"
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
  LoraFusedTiles tiles;
};

template <int BN, int R, bool kLora>
struct Shape {
  static constexpr uint32_t kX = kBM * 128, kW = BN * 128, kA = kLora ? R * 128 : 0;
  static constexpr uint32_t kStage = kX + kW + kA;
  static constexpr int kStages = std::min<int>(6, int((kSmemLimit - 1024 - 128) / kStage));
  static constexpr uint32_t kBars = kStages * kStage;  // full[kStages], empty[kStages]
  static constexpr size_t kAlloc = kBars + 16 * kStages + 1024;
  static_assert(kAlloc <= kSmemLimit && kStages >= 3, "stages do not fit");
};

template <typename T, int BN, int R, bool kLora>
__global__ void __launch_bounds__(kThreads, 1)
    lora_fused_gemm_kernel(const __grid_constant__ CUtensorMap mx, const __grid_constant__ CUtensorMap mw,
                           const __grid_constant__ CUtensorMap ma, const Params p) {
#if SERVELAB_WGMMA_DEVICE
  using S = Shape<BN, R, kLora>;
  constexpr int kStages = S::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = smem_u32(smem);
  auto full = [&](int s) { return sbase + S::kBars + 8 * s; };
  auto empty = [&](int s) { return sbase + S::kBars + 8 * (kStages + s); };
  auto stage = [&](int s) { return sbase + uint32_t(s) * S::kStage; };

  const LoraFusedTile tile = p.tiles.tile[blockIdx.x];
  const int n0 = int(blockIdx.y) * BN, tid = threadIdx.x;
  const bool has = kLora && tile.slot >= 0;
  int seg = 0;
  if constexpr (kLora)
    while (seg + 1 < p.n_seg && n0 >= p.seg_end[seg]) ++seg;
  const int n_k = (p.in + kBK - 1) / kBK;

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
      for (int kb = 0; kb < n_k; ++kb) {
        const int s = kb % kStages, n = kb / kStages;
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
  const int wg = tid / 128 - 1, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, c = lane % 4;
  float acc[BN / 2];
  float xacc[kLora ? R / 2 : 1];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < (kLora ? R / 2 : 1); ++i) xacc[i] = 0.f;
  for (int kb = 0; kb < n_k; ++kb) {
    const int s = kb % kStages;
    prefill_wgmma::mbar_wait(full(s), (kb / kStages) & 1);
    wgmma::pin(acc);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const uint64_t da = wgmma::desc_sw128(stage(s) + uint32_t(wg) * 64 * 128 + kk * 32, 16, 1024);
      const uint64_t db = wgmma::desc_sw128(stage(s) + S::kX + kk * 32, 16, 1024);
      wgmma::mma_n<BN, T>(acc, da, db, 1);
      // The shrink runs in tiles without a slot too (on a stage's stale A rows, never read): a
      // branch between the wgmmas makes ptxas fence the accumulators (C7519).
      if constexpr (kLora) wgmma::mma_n<R, T>(xacc, da, wgmma::desc_sw128(stage(s) + S::kX + S::kW + kk * 32, 16, 1024), 1);
    }
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::pin(acc);
    if (kb > 0 && lane == 0) prefill_wgmma::mbar_arrive(empty((kb - 1) % kStages));
  }
  wgmma::wait<0>();
  wgmma::pin(acc);
  if constexpr (kLora) wgmma::pin(xacc);

  if constexpr (kLora) {
    if (has) {  // y += round16(scale · xa) · B[slot]ᵀ for this segment's columns
      uint32_t xa[R / 16][4];
#pragma unroll
      for (int k = 0; k < R / 16; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i) xa[k][i] = pack2<T>(tile.scale * xacc[8 * k + 2 * i], tile.scale * xacc[8 * k + 2 * i + 1]);
      const T* b = static_cast<const T*>(p.b) + int64_t(tile.slot) * p.out * R;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + 8 * j + g;
        const T* bc = b + int64_t(col < p.out ? col : 0) * R + 2 * c;
#pragma unroll
        for (int k = 0; k < R / 16; ++k) {
          uint32_t b0 = 0, b1 = 0;
          if (col < p.out) {
            b0 = *reinterpret_cast<const uint32_t*>(bc + 16 * k);
            b1 = *reinterpret_cast<const uint32_t*>(bc + 16 * k + 8);
          }
          mma_16816<T>(*reinterpret_cast<float(*)[4]>(&acc[4 * j]), xa[k], b0, b1);
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

bool device_takes() {
#if defined(SERVELAB_HAS_SM90A)
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return ok;
#else
  return false;
#endif
}

bool segments_take(const LoraPool& pool, int block_n) {
  for (int m = 0; m + 1 < pool.n_seg; ++m)
    if (pool.seg_end[m] % block_n != 0) return false;
  return true;
}

}  // namespace

bool lora_fused_fits(ScalarType t, const LoraPool& pool, int out, int in) {
  if ((t != ScalarType::bf16 && t != ScalarType::f16) || in % 8 != 0 || out % 8 != 0 || in <= 0 || out <= 0)
    return false;
  if (pool.n_slots > 0) {
    if (pool.max_rank != 16 && pool.max_rank != 32) return false;
    if (pool.n_in != in || pool.n_out != out || pool.n_seg < 1 || pool.n_seg > kLoraMaxSegments) return false;
    if (!segments_take(pool, 128)) return false;
  }
  return device_takes();
}

LoraFusedGemm::LoraFusedGemm() : maps_(std::make_unique<Maps>()) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev));
}
LoraFusedGemm::~LoraFusedGemm() = default;

int LoraFusedGemm::pick_block_n(const LoraPool& pool, int out, int n_tiles) const {
  if (pool.n_slots > 0 && !segments_take(pool, 256)) return 128;
  // A block's time goes with its columns; the grid's with its waves of blocks.
  auto cost = [&](int bn) {
    const int64_t blocks = int64_t(n_tiles) * ((out + bn - 1) / bn);
    return ((blocks + sms_ - 1) / sms_) * bn;
  };
  return cost(256) < cost(128) ? 256 : 128;
}

namespace {

template <typename T, int BN, int R, bool kLora>
void launch(const CUtensorMap& mx, const CUtensorMap& mw, const CUtensorMap& ma, const fused::Params& p, int n_col,
            cudaStream_t stream) {
  using S = fused::Shape<BN, R, kLora>;
  auto kernel = fused::lora_fused_gemm_kernel<T, BN, R, kLora>;
  static const bool attr = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kAlloc)));
    return true;
  }();
  (void)attr;
  kernel<<<dim3(unsigned(p.tiles.n), unsigned(n_col)), fused::kThreads, S::kAlloc, stream>>>(mx, mw, ma, p);
  CUDA_CHECK(cudaGetLastError());
}

template <typename T, int BN>
void launch_bn(const CUtensorMap& mx, const CUtensorMap& mw, const CUtensorMap& ma, const fused::Params& p, int rank,
               bool lora, cudaStream_t stream) {
  const int n_col = (p.out + BN - 1) / BN;
  if (!lora) launch<T, BN, 16, false>(mx, mw, ma, p, n_col, stream);
  else if (rank == 16) launch<T, BN, 16, true>(mx, mw, ma, p, n_col, stream);
  else launch<T, BN, 32, true>(mx, mw, ma, p, n_col, stream);
}

}  // namespace

void LoraFusedGemm::run(ScalarType t, const void* x, const void* w, void* y, int n_rows, int out, int in,
                        const LoraPool& pool, const LoraFusedTiles& tiles, cudaStream_t stream, int block_n) {
  if (!lora_fused_fits(t, pool, out, in))
    throw std::invalid_argument("lora_fused_gemm: this shape, pool or device is not the fused kernel's (" +
                                std::to_string(out) + " x " + std::to_string(in) + ", rank " +
                                std::to_string(pool.max_rank) + ")");
  if (tiles.n <= 0 || tiles.n > kLoraFusedMaxTiles || n_rows <= 0) return;
  const bool lora = pool.n_slots > 0;
  if (block_n == 0) block_n = pick_block_n(pool, out, tiles.n);
  if ((block_n != 128 && block_n != 256) || (lora && !segments_take(pool, block_n)))
    throw std::invalid_argument("lora_fused_gemm: " + std::to_string(block_n) + " columns a block do not divide the segments");
  fused::Params p{};
  p.y = y;
  p.b = pool.b;
  p.out = out;
  p.in = in;
  p.n_seg = lora ? pool.n_seg : 1;
  for (int m = 0; m < kLoraMaxSegments; ++m) p.seg_end[m] = m + 1 < p.n_seg ? pool.seg_end[m] : out;
  p.tiles = tiles;
  auto go = [&]<typename T>() {
    const CUtensorMap mx = maps_->get<T>(x, n_rows, in, fused::kBM);
    const CUtensorMap mw = maps_->get<T>(w, out, in, block_n);
    const CUtensorMap ma = lora ? maps_->get<T>(pool.a, int64_t(pool.n_slots) * pool.total_rank(), in, pool.max_rank) : mw;
    if (block_n == 256) launch_bn<T, 256>(mx, mw, ma, p, pool.max_rank, lora, stream);
    else launch_bn<T, 128>(mx, mw, ma, p, pool.max_rank, lora, stream);
  };
  if (t == ScalarType::bf16) go.template operator()<__nv_bfloat16>();
#if defined(SERVELAB_KERNELS_FP16)
  else go.template operator()<__half>();
#else
  else throw std::invalid_argument("lora_fused_gemm: fp16 is not in this build (SERVELAB_KERNELS_FP16=OFF)");
#endif
}

}  // namespace servelab::kernels
