#pragma once
// The warp-specialized wgmma prefill kernel as one template (see the comment below and
// kernels/notes-prefill.md): producer (kProd), consumer schedule (kSched), exp2 on the FMA pipe
// (kPoly), conditional rescale (kCons), row sums on the tensor core (kSumMma). Shares Params,
// Layout and the helpers with attention_prefill_wgmma.cu through attention_prefill_wgmma.cuh.
// Instantiated by attention_prefill_wgmma_ws.cu for the kernels prefill_attention runs (fa10,
// fa11, and fa8: their fallback and the frozen baseline they are tested against) and by
// kernels/scratch/ for the superseded passes (built with -DSERVELAB_KERNEL_SCRATCH=ON).
#include <stdexcept>

#include "kernels/per_device.h"
#include "kernels/attention.h"
#include "kernels/attention_prefill_wgmma.cuh"
#include "kernels/attention_prefill_wgmma_tma.cuh"
#include "kernels/common.cuh"

namespace servelab::kernels::prefill_wgmma {

// mbar_init, mbar_wait, mbar_arrive, cp_async_arrive_noinc, kThreadsWs, LayoutWs and v5's design
// (below: kProd 0) come from attention_prefill_wgmma.cuh; the TMA helpers from attention_prefill_wgmma_tma.cuh.

namespace {
/// kPingPong: the two consumer warpgroups take turns issuing their GEMMs (named barriers 1 and 2,
/// FA3's schedule), so one's softmax runs while the other's GEMMs hold the tensor cores.
/// kProd picks the producer. 0 (v5.1): cp.async, 16 slots a thread per tile. 1 (v6, kTma):
/// thread 0 loads every whole key tile (all 128 keys <= max_pos) by TMA, one box per KV block (or
/// per 128 keys) and head_dim half, completing on the stage's "full" mbarrier (count 1,
/// expect_tx); the tile max_pos cuts (zeros past it) goes the cp.async way. 2 (v6.1, kLean):
/// cp.async with fewer instructions on whole tiles (8 table reads a thread for blocks of 2^k >= 16
/// slots, a 32x32->64-bit multiply per row, no validity tests), and the consumers skip the O
/// rescale where no row of the warp changed its maximum (a multiply by exactly 1). 3 (fa11): per
/// key tile, two 128-row TMA boxes by thread 0 where the tile's 128 slots are consecutive (naive,
/// blocks >= 128, blocks in one physical run), else 0's gather; "full" counts 128 arrivals either
/// way (thread 0's arrive.expect_tx and 127 plain ones, or each thread's noinc arrive). 4
/// (fa11_vote): the same, decided per tile by a vote. Every producer writes the same smem bytes.
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
  constexpr bool kTma = kProd == 1, kLean = kProd == 2, kRuns = kProd == 3 || kProd == 4;
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
      mbar_init(sbase + LW::kFullK + 8 * i, kTma ? 1 : 128);  // v5.1, fa11: one arrive per producer thread
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
    // fa11: bit t - run_base of run_mask: tile t is whole and its 128 slots are consecutive. Each
    // warp finds it 32 tiles at a time (lane i checks tile run_base + i's blocks, one ballot).
    const int lane = tid % 32;
    uint32_t run_mask = 0;
    int run_base = -64;
    auto tile_run = [&](int t) -> bool {
      if (t >= run_base + 32) {  // t is warp-uniform
        run_base = t;
        const int u = t + lane, k0 = u * kBN, k1 = k0 + kBN - 1;
        bool run = u < n_key_tiles && k1 <= max_pos;  // the cut tile: zeros past max_pos
        if (run && paged) {
          const int b0 = bs_shift >= 0 ? k0 >> bs_shift : k0 / bs, b1 = bs_shift >= 0 ? k1 >> bs_shift : k1 / bs;
          const int32_t first = trow[b0];
#pragma unroll 8
          for (int b = b0 + 1; b <= b1; ++b) run &= trow[b] == first + (b - b0);
        }
        run_mask = __ballot_sync(0xffffffffu, run);
      }
      return (run_mask >> (t - run_base)) & 1u;
    };
    auto tile_start = [&](int t) -> int32_t {
      const int k0 = t * kBN;
      if (!paged) return int32_t(base_slot) + k0;
      const int b0 = bs_shift >= 0 ? k0 >> bs_shift : k0 / bs;
      return trow[b0] * bs + (k0 - b0 * bs);
    };
    // fa11_vote: tile t's first slot where its slots are consecutive, else -1, per tile: lane i
    // reads the entry of the tile's block i (32 a round), a shuffle of lane 0's, one vote a round.
    auto tile_box = [&](int t) -> int32_t {
      const int k0 = t * kBN, k1 = k0 + kBN - 1;
      if (k1 > max_pos) return -1;  // the cut tile: zeros past max_pos
      if (!paged) return int32_t(base_slot) + k0;
      const int b0 = bs_shift >= 0 ? k0 >> bs_shift : k0 / bs, nbt = (bs_shift >= 0 ? k1 >> bs_shift : k1 / bs) - b0 + 1;
      int32_t first = 0;
      bool run = true;
      for (int c = 0; c < nbt; c += 32) {
        const int i = c + lane;
        const int32_t blk = i < nbt ? trow[b0 + i] : 0;
        if (c == 0) first = __shfl_sync(0xffffffffu, blk, 0);
        run = __all_sync(0xffffffffu, i >= nbt || blk == first + i) && run;
      }
      return run ? first * bs + (k0 - b0 * bs) : -1;
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
      if constexpr (kRuns) {
        int32_t box = -1;
        if (kProd == 3 ? tile_run(t) : (box = tile_box(t)) >= 0) {  // two 128-row boxes a K or V tile: thread 0 counts the bytes, the others arrive
          if (kProd == 3 && tid == 0) box = tile_start(t);
          const uint32_t dk = sbase + L::kK + uint32_t(st) * L::kTile, dv = sbase + L::kV + uint32_t(st) * L::kTile;
          const uint32_t fk = sbase + LW::kFullK + 8 * st, fv = sbase + LW::kFullV + 8 * st;
          if (n > 0) mbar_wait(sbase + LW::kEmptyK + 8 * st, (n - 1) & 1);  // all wait: no arrive runs a phase ahead
          if (tid == 0) {
            mbar_arrive_expect_tx(fk, L::kTile);
#pragma unroll
            for (int h = 0; h < 2; ++h) tma_load_3d(dk + h * L::kHalf, &maps.k, h * 64, kvh, box, fk);
          } else {
            mbar_arrive(fk);
          }
          if (n > 0) mbar_wait(sbase + LW::kEmptyV + 8 * st, (n - 1) & 1);
          if (tid == 0) {
            mbar_arrive_expect_tx(fv, L::kTile);
#pragma unroll
            for (int h = 0; h < 2; ++h) tma_load_3d(dv + h * L::kHalf, &maps.v, h * 64, kvh, box, fv);
          } else {
            mbar_arrive(fv);
          }
          continue;
        }
      }
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

template <typename T, bool kPingPong, int kProd, int kSched = 0, int kPoly = 0, int kCons = -1, bool kSumMma = false>
void launch_ws_t(const Params& p, int grid, cudaStream_t stream) {
  constexpr size_t kAlloc = kSumMma ? LayoutWs::kAllocOnes : LayoutWs::kAlloc;
  static std::atomic<uint64_t> raised{0};  // per device: kernels/per_device.h
  servelab::kernels::once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_ws_kernel<T, kPingPong, kProd, kSched, kPoly, kCons, kSumMma>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(kAlloc)));
  });
  TmaMaps maps{};
  if constexpr (kProd == 3 || kProd == 4) {  // fa11: 128-row boxes over the slots, any layout
    maps.rows = kBN;
    maps.k = encode_kv_map<T>(p.k_cache, p, kBN);
    maps.v = encode_kv_map<T>(p.v_cache, p, kBN);
  }
  if constexpr (kProd == 1) {
    maps.rows = tma_rows(p);
    maps.k = encode_kv_map<T>(p.k_cache, p, maps.rows);
    maps.v = encode_kv_map<T>(p.v_cache, p, maps.rows);
  }
  prefill_wgmma_ws_kernel<T, kPingPong, kProd, kSched, kPoly, kCons, kSumMma><<<grid, kThreadsWs, kAlloc, stream>>>(p, maps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

}  // namespace servelab::kernels::prefill_wgmma
