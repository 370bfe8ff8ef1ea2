// Prefill attention on wgmma, v5: the warp-specialized kernel (see the comment below and
// kernels/notes-prefill.md); shares Params, Layout and the helpers with attention_prefill_wgmma.cu
// through attention_prefill_wgmma.cuh. Selectable by name (prefill_attention_wgmma_ws, _pingpong,
// _tma, _lean, _fa5, _fa6, _fa7, _fa8, _fa9, _fa5_part); prefill_attention runs fa8 (kSched 6, kCons 2 below) on
// Hopper at hd 128.
#include <cuda.h>  // CUtensorMap (the encoder comes through the runtime: no libcuda link)
#include <cudaTypedefs.h>

#include <stdexcept>

#include "kernels/attention.h"
#include "kernels/attention_prefill_wgmma.cuh"
#include "kernels/common.cuh"

namespace servelab::kernels::prefill_wgmma {

// mbar_init, mbar_wait, mbar_arrive and cp_async_arrive_noinc come from attention_prefill_wgmma.cuh.
/// The same without .noinc: the pending count goes up now and down when the copies land, so the
/// phase still needs its counted arrivals (v6's partial tile: thread 0 arrives after a barrier).
__device__ __forceinline__ void cp_async_arrive_inc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// Arrives on bar and adds tx bytes the phase waits for (the TMA copies complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(tx) : "memory");
}
/// TMA: the box of map at (c0, c1, c2) into shared dst, completing tx bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

/// v6: K and V arenas as 3-D tensor maps (head_dim, kv heads, slots; box 64 x 1 x rows,
/// 128-byte swizzle: the layout the wgmma descriptors read), rows = 128 (naive layout, or paged
/// blocks of >= 128 slots) or the block size (16, 32, 64).
struct TmaMaps {
  CUtensorMap k, v;
  int rows;
};

namespace {
// ---- v5: warp-specialized (a producer warpgroup, two consumers), per-stage mbarriers ----------
// Warpgroup 0 gathers Q and the K/V tiles by cp.async (each thread's copies complete on the
// stage's "full" mbarrier: cp.async.mbarrier.arrive.noinc) and waits on the stage's "empty"
// mbarrier before refilling it; warpgroups 1 and 2 run the same MMA/softmax schedule as
// prefill_wgmma_kernel, waiting on "full" and releasing a stage (one arrive per warp) once the
// wgmma that read it has completed. No block-wide barrier per key tile; setmaxnreg gives the
// producer 56 registers and the consumers 224 (v5.1: 16 slots kept per tile; 40 and 48 spilled).
constexpr int kThreadsWs = 384;
struct LayoutWs {
  static constexpr uint32_t kBars = Layout::kBytes;  // 8-aligned (kRows + 1544)
  // full_q, full_k[3], full_v[3], empty_k[3], empty_v[3]
  static constexpr uint32_t kFullQ = kBars, kFullK = kFullQ + 8, kFullV = kFullK + 8 * kStages,
                            kEmptyK = kFullV + 8 * kStages, kEmptyV = kEmptyK + 8 * kStages;
  static constexpr uint32_t kBytes = kEmptyV + 8 * kStages;
  static constexpr size_t kAlloc = kBytes + 1024;
  /// fa9: a 16 x 8 ones matrix (two no-swizzle core matrices, 256 bytes), P·1 = the row sums.
  static constexpr uint32_t kOnes = (kBytes + 15) & ~15u, kOnesBytes = 256;
  static constexpr size_t kAllocOnes = kOnes + kOnesBytes + 1024;
};
static_assert(LayoutWs::kAllocOnes <= 227 * 1024, "fa9's shared memory exceeds the sm_90 block limit");
static_assert(Layout::kBytes % 8 == 0, "mbarriers need 8-byte alignment");

/// kPingPong: the two consumer warpgroups take turns issuing their GEMMs (named barriers 1 and 2,
/// FA3's schedule), so one's softmax runs while the other's GEMMs hold the tensor cores.
/// kProd picks the producer. 0 (v5.1): cp.async, 16 slots a thread per tile. 1 (v6, kTma):
/// thread 0 loads every whole key tile (all 128 keys <= max_pos) by TMA, one box per KV block (or
/// per 128 keys) and head_dim half, completing on the stage's "full" mbarrier (count 1,
/// expect_tx); the tile max_pos cuts (zeros past it) goes the cp.async way. 2 (v6.1, kLean):
/// cp.async with fewer instructions on whole tiles (8 table reads a thread for blocks of 2^k >= 16
/// slots, a 32x32->64-bit multiply per row, no validity tests), and the consumers skip the O
/// rescale where no row of the warp changed its maximum (a multiply by exactly 1). Every producer
/// writes the same smem bytes, so all give the same bits.
/// kSched picks the consumers' schedule (the same arithmetic, so the same bits). 0: v5.1's. fa5
/// (notes-prefill.md, fifth pass): ptxas placed v5.1's P·V wait (WARPGROUP.DEPBAR) above the
/// softmax, to interleave the O rescale and the P packing with the exponentials, so the softmax
/// never ran under P·V; and the Q descriptor (warpgroup-dependent) was rebuilt in vector registers
/// and moved to uniform ones (R2UR) before every S wgmma. 1 (fa5): the warpgroup index made
/// warp-uniform (__shfl_sync: the descriptors stay on the uniform datapath), the O rescale issued
/// after the next S GEMM and before its P·V (FlashAttention-3's order: nothing that needs P·V's
/// registers is left to interleave with the softmax), P packed into fresh registers before the
/// P·V wait and copied after it. 2: as 1, P packed after the wait (FlashAttention-3's). 3: the
/// uniform warpgroup index alone, v5.1's order. In call 2, ptxas hoisted the P·V wait above the
/// softmax again in 1 and 2 (it coalesced 1's copy into the packs). 4 (fa5 since): as 2, and between
/// the softmax and the P·V wait the wait for tile t+1's V stage ("full", needed by the next P·V
/// anyway): its try_wait loop is a control-flow boundary, which ptxas's scheduler does not move the
/// WARPGROUP.DEPBAR across. 5: that boundary in v5.1's order.
/// kPoly (fa7, seventh pass): that many of each thread's 64 exponentials a tile on the FMA pipe
/// (RowPairSoftmax::tile's kPoly), with kSched 6: fa6 otherwise. kCons (seventh pass): -1 skips
/// the O rescale where a warp's maxima held iff kProd is 2 (v6.1 as before), 0 never, 1 always;
/// 2 (fa8) FlashAttention-4's conditional rescaling (tile's kLazy) with that skip.
/// kSumMma (fa9, eighth pass): the row sums l on the tensor core: after each P·V's 8 m64n128k16,
/// 8 m64n8k16 of the same P fragments against a 16 x 8 ones matrix in shared memory (LayoutWs::kOnes)
/// into 4 more accumulators (every column = the row's sum over the tile's 128 keys of the bf16 /
/// f16 P that P·V uses), rescaled with O; the softmax drops its 64 FADDs a thread and the l update,
/// the end its 4 shuffles. Other bits than fa8 (the sum of rounded P, in the tensor core's order),
/// still a function of the row alone. fa5's order (kSched 4 or 6) only.
template <typename T, bool kPingPong, int kProd, int kSched = 0, int kPoly = 0, int kCons = -1, bool kSumMma = false>
__global__ void __launch_bounds__(kThreadsWs, 1) prefill_wgmma_ws_kernel(const Params p, const __grid_constant__ TmaMaps maps) {
  constexpr bool kTma = kProd == 1, kLean = kProd == 2;
  constexpr bool kLazy = kCons == 2, kSkipHeld = kCons < 0 ? kLean : kCons > 0;
  // 6 (fa6) and 7: 4 with the softmax's row maxima as trees; 6 also ms / corr without branches.
  constexpr bool kFa3Order = kSched == 1 || kSched == 2 || kSched == 4 || kSched >= 6, kPackEarly = kSched == 1;
  constexpr bool kFenceBlock = kSched == 4 || kSched == 5 || kSched >= 6;  // the P·V wait behind a control-flow boundary
  constexpr bool kTreeMax = kSched >= 6, kFlatMs = kSched == 6;
  static_assert(!kSumMma || kFa3Order, "fa9's row sums: fa5's order only");
#if SERVELAB_WGMMA_DEVICE
  using L = Layout;
  using LW = LayoutWs;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = smem_u32(smem);
  int* row_pos = reinterpret_cast<int*>(smem + L::kRows);
  int* row_tok = row_pos + kBM;
  int* row_head = row_tok + kBM;
  int* sh = row_head + kBM;  // sequence, tile

  const int tid = threadIdx.x, kvh = blockIdx.x % p.n_kv;
  if (tid == 0) {  // tiles in reverse order across all heads: the longest tiles start first
    int tile = int(gridDim.x) / p.n_kv - 1 - int(blockIdx.x) / p.n_kv;
    const int seq = find_row_tile(p, tile);
    sh[0] = seq;
    sh[1] = tile;
    mbar_init(sbase + LW::kFullQ, 128);
    for (int i = 0; i < kStages; ++i) {
      mbar_init(sbase + LW::kFullK + 8 * i, kTma ? 1 : 128);  // v5.1: one noinc arrive per producer thread
      mbar_init(sbase + LW::kFullV + 8 * i, kTma ? 1 : 128);
      mbar_init(sbase + LW::kEmptyK + 8 * i, 8);  // one arrive per consumer warp
      mbar_init(sbase + LW::kEmptyV + 8 * i, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (kSumMma && tid >= 128 && tid < 128 + int(LW::kOnesBytes / 16)) {  // the ones matrix, read by wgmma (async proxy)
    const uint32_t one2 = std::is_same_v<T, __nv_bfloat16> ? 0x3F803F80u : 0x3C003C00u;
    *reinterpret_cast<uint4*>(smem + LW::kOnes + (tid - 128) * 16) = make_uint4(one2, one2, one2, one2);
    wgmma::fence_proxy_async();
  }
  __syncthreads();
  const int s = sh[0], tile = sh[1];
  if (s < 0) return;
  const int q0 = p.query_start[s], q_len = p.query_start[s + 1] - q0, ctx = p.context_lens[s];
  if (tid < kBM) {
    const int rr = tile * kBM + tid, i = rr / p.group;
    row_pos[tid] = i < q_len ? ctx - q_len + i : -1;
    row_tok[tid] = q0 + i;
    row_head[tid] = kvh * p.group + rr % p.group;
  }
  __syncthreads();
  const int n_rows = min(kBM, q_len * p.group - tile * kBM);
  const int max_pos = ctx - q_len + (tile * kBM + n_rows - 1) / p.group;
  const int n_key_tiles = max_pos / kBN + 1;

  if (tid < 128) {  // ---------------- producer warpgroup ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    // Thread tid moves 16-byte chunk lc of rows lr, lr + 8, ..., lr + 120 (r % 8 == lr: one swizzle).
    const int lc = tid % 16, lr = tid / 16;
    const uint32_t sw = (lc / 8) * L::kHalf + uint32_t(((lc % 8) ^ lr) * 16) + uint32_t(lr * 128);
    const char* kbase = static_cast<const char*>(p.k_cache);
    const char* vbase = static_cast<const char*>(p.v_cache);
    const bool paged = p.kv.kind == KvLayoutKind::paged;
    const int64_t table_row = paged ? p.kv.table_row(s) : int64_t(s);
    const int32_t* trow = paged ? p.kv.block_tables + table_row * p.kv.block_table_stride : nullptr;
    const int64_t base_slot = paged ? 0 : p.kv.base_slots[s];
    const int bs = p.kv.block_size, bs_shift = p.block_shift;
    const int64_t col = int64_t(kvh) * kHD + lc * 8;
    // Slots of this thread's 16 rows of key tile t (row lr + 8j), for its K and its V. The layout
    // test sits outside the unrolled loops, so the 16 table reads are independent and in flight
    // together (v5 branched per row: 32 serialized table reads per tile, the producer was the
    // bottleneck). Slots fit in int32 (2^31 slots of >= 256 bytes would be 512 GB).
    int32_t slot[kBN / 8];
    auto tile_slots = [&](int t) {
      const int k0 = t * kBN + lr;
      if (!paged) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) slot[j] = int32_t(base_slot + min(k0 + 8 * j, max_pos));
      } else if (bs_shift >= 0) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int kq = min(k0 + 8 * j, max_pos);  // never past the table
          slot[j] = (trow[kq >> bs_shift] << bs_shift) + (kq & (bs - 1));
        }
      } else {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int kq = min(k0 + 8 * j, max_pos);
          slot[j] = trow[kq / bs] * bs + kq % bs;
        }
      }
    };
    // v6.1: the slots of whole tile t (every key <= max_pos) for the naive layout or blocks of
    // 2^k >= 16 slots: rows lr + 16i and lr + 16i + 8 lie in one block (lr < 8), 8 table reads.
    const bool lean_layout = !paged || bs_shift >= 4;
    auto lean_slots = [&](int t) {
      const int k0 = t * kBN + lr;
      if (!paged) {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) slot[j] = int32_t(base_slot) + k0 + 8 * j;
      } else {
#pragma unroll
        for (int i = 0; i < kBN / 16; ++i) {
          const int kq = k0 + 16 * i;
          slot[2 * i] = (trow[kq >> bs_shift] << bs_shift) + (kq & (bs - 1));
          slot[2 * i + 1] = slot[2 * i] + 8;
        }
      }
    };
    const int row_bytes = int(p.kv_row * int64_t(sizeof(T)));  // < 2^31: n_kv * 256
    const char* kcol = kbase + col * int64_t(sizeof(T));
    const char* vcol = vbase + col * int64_t(sizeof(T));
    auto lean_issue = [&](const char* base_col, uint32_t ring, uint32_t soff) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) cp_async16(sbase + ring + soff + j * 1024, base_col + int64_t(slot[j]) * row_bytes, true);
    };
    // One K or V tile from the slots into stage st of ring; zeros past max_pos.
    auto issue_tile = [&](const char* base, uint32_t ring, int t, uint32_t soff) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const bool valid = t * kBN + lr + 8 * j <= max_pos;
        const char* src = base + (valid ? (int64_t(slot[j]) * p.kv_row + col) * int64_t(sizeof(T)) : 0);
        cp_async16(sbase + ring + soff + j * 1024, src, valid);
      }
    };
    const T* qsrc = static_cast<const T*>(p.q);
#pragma unroll 4
    for (int j = 0; j < kBM / 8; ++j) {  // Q tile (zeros in padding rows)
      const int r = lr + 8 * j;
      const bool valid = row_pos[r] >= 0;
      const T* src = valid ? qsrc + row_tok[r] * p.q_row_stride + int64_t(row_head[r]) * kHD + lc * 8 : qsrc;
      cp_async16(sbase + L::kQ + sw + j * 1024, src, valid);
    }
    cp_async_arrive_noinc(sbase + LW::kFullQ);
    int t_first = 0;  // the first tile loaded by cp.async
    if constexpr (kTma) {
      const int n_full = (max_pos + 1) / kBN, rows = maps.rows, nb = kBN / rows;
      if (tid == 0) {
        for (int t = 0; t < n_full; ++t) {
          const int st = t % kStages, n = t / kStages;
          int32_t start[8];  // first slot of each box (nb <= 8: rows >= 16)
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int kq = t * kBN + j * rows;
            start[j] = 0;
            if (j < nb) start[j] = !paged ? int32_t(base_slot + kq) : (trow[kq >> bs_shift] << bs_shift) + (kq & (bs - 1));
          }
          const uint32_t dk = sbase + L::kK + uint32_t(st) * L::kTile, dv = sbase + L::kV + uint32_t(st) * L::kTile;
          if (n > 0) mbar_wait(sbase + LW::kEmptyK + 8 * st, (n - 1) & 1);
          mbar_arrive_expect_tx(sbase + LW::kFullK + 8 * st, L::kTile);
#pragma unroll
          for (int j = 0; j < 8; ++j)
            if (j < nb)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                tma_load_3d(dk + h * L::kHalf + j * rows * 128, &maps.k, h * 64, kvh, start[j], sbase + LW::kFullK + 8 * st);
          if (n > 0) mbar_wait(sbase + LW::kEmptyV + 8 * st, (n - 1) & 1);
          mbar_arrive_expect_tx(sbase + LW::kFullV + 8 * st, L::kTile);
#pragma unroll
          for (int j = 0; j < 8; ++j)
            if (j < nb)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                tma_load_3d(dv + h * L::kHalf + j * rows * 128, &maps.v, h * 64, kvh, start[j], sbase + LW::kFullV + 8 * st);
        }
      }
      // The other producer threads wait here for thread 0 (a parity wait must not run more than
      // one phase ahead), then all 128 load the cut tile, if any.
      asm volatile("barrier.sync 3, 128;\n" ::: "memory");  // not .aligned: warp 0 may arrive diverged
      t_first = n_full;
    }
    for (int t = t_first; t < n_key_tiles; ++t) {
      const int st = t % kStages, n = t / kStages;
      const uint32_t soff = uint32_t(st) * L::kTile + sw;
      const bool lean = kLean && lean_layout && t * kBN + kBN - 1 <= max_pos;
      if (lean) lean_slots(t);
      else tile_slots(t);  // the table reads overlap the wait for the stage
      if (n > 0) mbar_wait(sbase + LW::kEmptyK + 8 * st, (n - 1) & 1);
      if (lean) lean_issue(kcol, L::kK, soff);
      else issue_tile(kbase, L::kK, t, soff);
      if constexpr (kTma) {  // count 1: every thread's copies counted, then one arrive
        cp_async_arrive_inc(sbase + LW::kFullK + 8 * st);
        asm volatile("barrier.sync 3, 128;\n" ::: "memory");  // not .aligned: warp 0 may arrive diverged
        if (tid == 0) mbar_arrive(sbase + LW::kFullK + 8 * st);
      } else {
        cp_async_arrive_noinc(sbase + LW::kFullK + 8 * st);
      }
      if (n > 0) mbar_wait(sbase + LW::kEmptyV + 8 * st, (n - 1) & 1);
      if (lean) lean_issue(vcol, L::kV, soff);
      else issue_tile(vbase, L::kV, t, soff);
      if constexpr (kTma) {
        cp_async_arrive_inc(sbase + LW::kFullV + 8 * st);
        asm volatile("barrier.sync 3, 128;\n" ::: "memory");  // not .aligned: warp 0 may arrive diverged
        if (tid == 0) mbar_arrive(sbase + LW::kFullV + 8 * st);
      } else {
        cp_async_arrive_noinc(sbase + LW::kFullV + 8 * st);
      }
    }
    cp_async_wait<0>();
  } else {  // ---------------- consumer warpgroups ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    // This thread's two rows (accumulator layout: warp w of the warpgroup owns rows 16w..16w+15).
    // fa5: the same value, known warp-uniform to the compiler (CUTLASS's canonical_warp_group_idx).
    const int wg = (kSched > 0 ? __shfl_sync(0xffffffffu, tid / 128, 0) : tid / 128) - 1;
    const int warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, c2 = (lane % 4) * 2;
    const int lr0 = wg * 64 + warp * 16 + g, lr1 = lr0 + 8;
    const int pos0 = row_pos[lr0], pos1 = row_pos[lr1];
    const int wg_min = row_pos[wg * 64];  // -1: no valid row in this warpgroup (masked everywhere)
    const float sl2 = p.scale_log2;
    RowPairSoftmax sm;
    float o[64], sc[64], ls[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // ls: fa9's row sums (m64n8 accumulators)
    uint32_t pf[kBN / 16][4], pk[kBN / 16][4];  // pk: fa5's P, packed before the P·V wait
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    const uint64_t desc_q = wgmma::desc_sw128(sbase + L::kQ + wg * 64 * 128, 16, 1024);
    const uint64_t desc_k = wgmma::desc_sw128(sbase + L::kK, 16, 1024);
    const uint64_t desc_v = wgmma::desc_sw128(sbase + L::kV, L::kHalf, 1024);
    const uint64_t desc_ones = wgmma::desc_none(sbase + LW::kOnes, 128, 128);  // every address it reads holds 1.0
    auto issue_s = [&](int t) { issue_qk<T>(sc, desc_q, desc_k, uint32_t(t % kStages) * L::kTile); };
    auto softmax = [&](int t) { sm.tile<kTreeMax, kFlatMs, kPoly, kLazy, kSumMma>(sc, t, wg_min, pos0, pos1, c2, sl2); };
    auto rescale_o = [&] {  // O (and fa9's row sums) by corr, under the same skip
      if constexpr (kSumMma) {
        wgmma::pin(ls);
        sm.rescale<kSkipHeld>(o, ls);
        wgmma::pin(ls);
      } else {
        sm.rescale<kSkipHeld>(o);
      }
    };
    auto rescale_and_pack = [&] { sm.rescale_and_pack<T, kSkipHeld>(o, sc, pf); };
    auto issue_pv = [&](int t) {
      const uint32_t st = uint32_t(t % kStages) * L::kTile;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) wgmma::mma_rs<T>(o, pf[kk], desc_v + ((st + kk * 2048) >> 4));
      if constexpr (kSumMma) {
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) wgmma::mma_rs_n8<T>(ls, pf[kk], desc_ones);
      }
    };
    auto release = [&](uint32_t bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    // Turns: warpgroup w waits on barrier 1 + w before issuing and then passes the turn (arrive
    // on 2 - w); warpgroup 1 gives warpgroup 0 the first turn and skips its last pass, so every
    // bar.sync meets exactly one set of arrivals.
    auto turn_wait = [&] {
      if constexpr (kPingPong) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory");
    };
    auto turn_pass = [&] {
      if constexpr (kPingPong) asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - wg) : "memory");
    };
    if (wg == 1) turn_pass();

    mbar_wait(sbase + LW::kFullQ, 0);
    mbar_wait(sbase + LW::kFullK, 0);
    wgmma::fence_proxy_async();
    turn_wait();
    wgmma::fence();
    issue_s(0);
    wgmma::commit();
    turn_pass();
    wgmma::wait<0>();
    wgmma::pin(sc);
    release(sbase + LW::kEmptyK);
    softmax(0);
    if constexpr (kFa3Order) sm.pack<T>(sc, pf);  // O (zeros) rescaled by corr(0) before P·V(0), in the loop
    else rescale_and_pack();
    for (int kt = 0; kFa3Order && kt + 1 < n_key_tiles; ++kt) {  // fa5: O rescale under the S GEMM
      const int t1 = kt + 1, s1 = t1 % kStages, s0 = kt % kStages;
      mbar_wait(sbase + LW::kFullK + 8 * s1, (t1 / kStages) & 1);
      mbar_wait(sbase + LW::kFullV + 8 * s0, (kt / kStages) & 1);
      wgmma::fence_proxy_async();
      turn_wait();
      wgmma::fence();
      issue_s(t1);
      wgmma::commit();
      wgmma::pin(o);  // the rescale after the S issue
      rescale_o();
      wgmma::pin(o);
      wgmma::fence();  // o written by the rescale, read by P·V
      issue_pv(kt);
      wgmma::commit();
      turn_pass();
      wgmma::wait<1>();  // S of tile kt + 1 (P · V of tile kt may still run)
      wgmma::pin(sc);
      release(sbase + LW::kEmptyK + 8 * s1);
      softmax(t1);
      if constexpr (kPackEarly) {
        sm.pack<T>(sc, pk);
        wgmma::pin_u32(pk);  // packed before the wait below
      }
      if constexpr (kFenceBlock) {  // the softmax done, then a loop (the mbarrier wait) before the P·V wait
        wgmma::pin(sc);
        mbar_wait(sbase + LW::kFullV + 8 * s1, (t1 / kStages) & 1);
      }
      wgmma::wait<0>();
      wgmma::pin(o);
      if constexpr (kSumMma) wgmma::pin(ls);
      wgmma::pin_u32(pf);
      release(sbase + LW::kEmptyV + 8 * s0);
      if constexpr (kPackEarly) {
#pragma unroll
        for (int i = 0; i < kBN / 16; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) pf[i][j] = pk[i][j];
      } else {
        sm.pack<T>(sc, pf);
      }
    }
    for (int kt = 0; !kFa3Order && kt + 1 < n_key_tiles; ++kt) {
      const int t1 = kt + 1, s1 = t1 % kStages, s0 = kt % kStages;
      mbar_wait(sbase + LW::kFullK + 8 * s1, (t1 / kStages) & 1);
      mbar_wait(sbase + LW::kFullV + 8 * s0, (kt / kStages) & 1);
      wgmma::fence_proxy_async();
      turn_wait();
      wgmma::fence();
      issue_s(t1);
      wgmma::commit();
      issue_pv(kt);
      wgmma::commit();
      turn_pass();
      wgmma::wait<1>();  // S of tile kt + 1 (P · V of tile kt may still run)
      wgmma::pin(sc);
      release(sbase + LW::kEmptyK + 8 * s1);
      softmax(t1);
      if constexpr (kFenceBlock) {
        wgmma::pin(sc);
        mbar_wait(sbase + LW::kFullV + 8 * s1, (t1 / kStages) & 1);
      }
      wgmma::wait<0>();
      wgmma::pin(o);
      wgmma::pin_u32(pf);
      release(sbase + LW::kEmptyV + 8 * s0);
      rescale_and_pack();
    }
    const int tl = n_key_tiles - 1;
    mbar_wait(sbase + LW::kFullV + 8 * (tl % kStages), (tl / kStages) & 1);
    wgmma::fence_proxy_async();
    turn_wait();
    if constexpr (kFa3Order) rescale_o();  // by corr(tl)
    wgmma::fence();
    issue_pv(tl);
    wgmma::commit();
    if (wg == 0) turn_pass();
    wgmma::wait<0>();
    wgmma::pin(o);
    if constexpr (kSumMma) {  // every column of a row holds its sum: no shuffles
      wgmma::pin(ls);
      sm.l0 = ls[0];
      sm.l1 = ls[2];
    } else {
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        sm.l0 += __shfl_xor_sync(0xffffffffu, sm.l0, x);
        sm.l1 += __shfl_xor_sync(0xffffffffu, sm.l1, x);
      }
    }
    const float inv0 = 1.0f / sm.l0, inv1 = 1.0f / sm.l1;
    T* out = static_cast<T*>(p.out);
    T* out0 = out + row_tok[lr0] * p.out_row_stride + int64_t(row_head[lr0]) * kHD + c2;
    T* out1 = out + row_tok[lr1] * p.out_row_stride + int64_t(row_head[lr1]) * kHD + c2;
#pragma unroll
    for (int j = 0; j < kHD / 8; ++j) {
      if (pos0 >= 0) *reinterpret_cast<uint32_t*>(out0 + j * 8) = pack2<T>(o[4 * j] * inv0, o[4 * j + 1] * inv0);
      if (pos1 >= 0) *reinterpret_cast<uint32_t*>(out1 + j * 8) = pack2<T>(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
  }
#endif
}

/// The encoder of tensor maps, from the driver through the runtime (once).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) throw std::runtime_error("prefill_attention_wgmma: no cuTensorMapEncodeTiled in the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// Box rows of v6's tensor maps for this layout, 0 where TMA does not apply (paged blocks of
/// fewer than 16 slots or not a power of two: those take the cp.async producer, v5.1).
int tma_rows(const Params& p) {
  if (p.kv.kind == KvLayoutKind::naive) return kBN;
  return p.block_shift >= 4 ? std::min(p.kv.block_size, kBN) : 0;
}

template <typename T>
CUtensorMap encode_kv_map(const void* arena, const Params& p, int rows) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {cuuint64_t(kHD), cuuint64_t(p.n_kv), cuuint64_t(p.n_slots)};
  const cuuint64_t strides[2] = {cuuint64_t(kHD) * sizeof(T), cuuint64_t(p.kv_row) * sizeof(T)};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, 1, cuuint32_t(rows)}, elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&m, std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                          3, const_cast<void*>(arena), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("prefill_attention_wgmma: cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
  return m;
}

template <typename T, bool kPingPong, int kProd, int kSched = 0, int kPoly = 0, int kCons = -1, bool kSumMma = false>
void launch_ws_t(const Params& p, int grid, cudaStream_t stream) {
  constexpr size_t kAlloc = kSumMma ? LayoutWs::kAllocOnes : LayoutWs::kAlloc;
  static const bool raised = [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_ws_kernel<T, kPingPong, kProd, kSched, kPoly, kCons, kSumMma>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(kAlloc)));
    return true;
  }();
  (void)raised;
  TmaMaps maps{};
  if constexpr (kProd == 1) {
    maps.rows = tma_rows(p);
    maps.k = encode_kv_map<T>(p.k_cache, p, maps.rows);
    maps.v = encode_kv_map<T>(p.v_cache, p, maps.rows);
  }
  prefill_wgmma_ws_kernel<T, kPingPong, kProd, kSched, kPoly, kCons, kSumMma><<<grid, kThreadsWs, kAlloc, stream>>>(p, maps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_ws(const Params& p, int grid, WsVariant v, ScalarType dtype, cudaStream_t stream) {
  if (v == WsVariant::tma && !(tma_rows(p) > 0 && p.n_slots > 0)) v = WsVariant::pingpong;  // other layouts: v5.1
  switch (v) {
    case WsVariant::ws:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, false, 0>(p, grid, stream)), (launch_ws_t<__half, false, 0>(p, grid, stream)));
      break;
    case WsVariant::pingpong:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0>(p, grid, stream)), (launch_ws_t<__half, true, 0>(p, grid, stream)));
      break;
    case WsVariant::tma:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 1>(p, grid, stream)), (launch_ws_t<__half, true, 1>(p, grid, stream)));
      break;
    case WsVariant::lean:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 2>(p, grid, stream)), (launch_ws_t<__half, true, 2>(p, grid, stream)));
      break;
    case WsVariant::persist:
      launch_persist(p, grid, 0, dtype, stream);
      break;
    case WsVariant::fa5:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 4>(p, grid, stream)), (launch_ws_t<__half, true, 0, 4>(p, grid, stream)));
      break;
    case WsVariant::fa5_pack_early:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 1>(p, grid, stream)), (launch_ws_t<__half, true, 0, 1>(p, grid, stream)));
      break;
    case WsVariant::fa5_no_turns:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, false, 0, 4>(p, grid, stream)), (launch_ws_t<__half, false, 0, 4>(p, grid, stream)));
      break;
    case WsVariant::fa5_v51_order:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 5>(p, grid, stream)), (launch_ws_t<__half, true, 0, 5>(p, grid, stream)));
      break;
    case WsVariant::fa5_pack_after:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 0, 2>(p, grid, stream)));
      break;
    case WsVariant::fa5_uniform:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 3>(p, grid, stream)), (launch_ws_t<__half, true, 0, 3>(p, grid, stream)));
      break;
    case WsVariant::fa6:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6>(p, grid, stream)));
      break;
    case WsVariant::fa6_tree:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 7>(p, grid, stream)), (launch_ws_t<__half, true, 0, 7>(p, grid, stream)));
      break;
    case WsVariant::fa7_p16:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 16>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 16>(p, grid, stream)));
      break;
    case WsVariant::fa7_p24:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 24>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 24>(p, grid, stream)));
      break;
    case WsVariant::fa7_p32:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 32>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 32>(p, grid, stream)));
      break;
    case WsVariant::fa8:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 0, 6, 0, 2>(p, grid, stream)));
      break;
    case WsVariant::fa8_lean:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 2, 6, 0, 2>(p, grid, stream)), (launch_ws_t<__half, true, 2, 6, 0, 2>(p, grid, stream)));
      break;
    case WsVariant::fa6_lean:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 2, 6, 0, 0>(p, grid, stream)), (launch_ws_t<__half, true, 2, 6, 0, 0>(p, grid, stream)));
      break;
    case WsVariant::fa9:
      SERVELAB_DISPATCH_16(dtype, (launch_ws_t<__nv_bfloat16, true, 0, 6, 0, 2, true>(p, grid, stream)),
                           (launch_ws_t<__half, true, 0, 6, 0, 2, true>(p, grid, stream)));
      break;

  }
}

}  // namespace servelab::kernels::prefill_wgmma
