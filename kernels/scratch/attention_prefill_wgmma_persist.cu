// Prefill attention on wgmma, v7 "persist": v6.1 lean (attention_prefill_wgmma_variants.cu) on a
// persistent grid. At most one block per SM; block b takes work items (128-row tile, KV head)
// b, 2G - 1 - b, 2G + b, 4G - 1 - b, ... of the longest-first order (G blocks; "snake" rounds,
// so the long and short items of each round even out across the blocks). The producer warpgroup
// runs ahead across items: the next item's Q loads as soon as the consumers' last S GEMM of this
// item has read Q ("empty Q" mbarrier), and its K/V tiles continue the same 3-stage rings, so the
// per-block prologue (Q and the first K tile) and the output stores overlap the tensor cores
// instead of leaving the SM idle between blocks; the 8-wave tail of 1024 blocks becomes the
// snake's static balance. Each item's arithmetic is v6.1's, row by row, in the same order (the
// schedule decides only which block runs a tile and when): the same bits as v5.1 / v6.1.
// Selectable by name (prefill_attention_wgmma_persist) and as WsVariant::persist.
#include <algorithm>
#include <stdexcept>

#include "kernels/per_device.h"
#include "kernels/attention.h"
#include "kernels/scratch/attention_prefill_scratch.cuh"
#include "kernels/common.cuh"

namespace servelab::kernels::prefill_wgmma {

// mbar_init, mbar_wait, mbar_arrive and cp_async_arrive_noinc come from attention_prefill_wgmma.cuh.

namespace {
constexpr int kThreadsP = 384;
/// Q, the K ring and the V ring as Layout; then the mbarriers and the item count (no row tables:
/// every thread computes its own rows' positions from the item).
struct LayoutP {
  static constexpr uint32_t kFullQ = Layout::kRows, kEmptyQ = kFullQ + 8, kFullK = kEmptyQ + 8, kFullV = kFullK + 8 * kStages,
                            kEmptyK = kFullV + 8 * kStages, kEmptyV = kEmptyK + 8 * kStages, kTotal = kEmptyV + 8 * kStages;
  static constexpr uint32_t kBytes = kTotal + 16;
  static constexpr size_t kAlloc = kBytes + 1024;
};
static_assert(Layout::kRows % 8 == 0, "mbarriers need 8-byte alignment");
}  // namespace

/// One work item: sequence s, its row tile, KV head.
struct Item {
  int s, tile, kvh;
};
/// Item w of the longest-first order (0 <= w < total · n_kv; total = row tiles of all sequences):
/// global tile total - 1 - w / n_kv over the sequences' tiles in order, KV head w % n_kv (the
/// order of v5.1's grid).
__device__ __forceinline__ Item decode_item(const Params& p, int total, int w) {
  int j = total - 1 - w / p.n_kv, s = 0;
  for (; s + 1 < p.n_seqs; ++s) {
    const int n = ((p.query_start[s + 1] - p.query_start[s]) * p.group + kBM - 1) / kBM;
    if (j < n) break;
    j -= n;
  }
  return {s, j, w % p.n_kv};
}
/// Block b's item of round r (snake order), past n_work when the block is done.
__device__ __forceinline__ int item_of_round(int r) {
  const int g = int(gridDim.x), b = int(blockIdx.x);
  return r * g + ((r & 1) ? g - 1 - b : b);
}

namespace {
template <typename T>
__global__ void __launch_bounds__(kThreadsP, 1) prefill_wgmma_persist_kernel(const Params p) {
#if SERVELAB_WGMMA_DEVICE
  using L = Layout;
  using LP = LayoutP;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = smem_u32(smem);
  int* total_sh = reinterpret_cast<int*>(smem + LP::kTotal);
  const int tid = threadIdx.x;
  if (tid == 0) {
    int total = 0;
    for (int s = 0; s < p.n_seqs; ++s) total += seq_row_tiles(p, s);
    *total_sh = total;
    mbar_init(sbase + LP::kFullQ, 128);  // one noinc arrive per producer thread
    mbar_init(sbase + LP::kEmptyQ, 8);   // one arrive per consumer warp
    for (int i = 0; i < kStages; ++i) {
      mbar_init(sbase + LP::kFullK + 8 * i, 128);
      mbar_init(sbase + LP::kFullV + 8 * i, 128);
      mbar_init(sbase + LP::kEmptyK + 8 * i, 8);
      mbar_init(sbase + LP::kEmptyV + 8 * i, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int total = *total_sh, n_work = total * p.n_kv;
  if (item_of_round(0) >= n_work) return;  // no item for this block (every thread leaves)

  // Rows of an item: row r of tile `tile` is (token q0 + rr / group, head kvh · group + rr % group)
  // with rr = tile · 128 + r; position ctx - q_len + rr / group, -1 for padding rows.
  struct Rows {
    int q0, q_len, ctx, max_pos, n_key_tiles;
  };
  auto rows_of = [&](const Item& it) {
    Rows r;
    r.q0 = p.query_start[it.s];
    r.q_len = p.query_start[it.s + 1] - r.q0;
    r.ctx = p.context_lens[it.s];
    const int n_rows = min(kBM, r.q_len * p.group - it.tile * kBM);
    r.max_pos = r.ctx - r.q_len + (it.tile * kBM + n_rows - 1) / p.group;
    r.n_key_tiles = r.max_pos / kBN + 1;
    return r;
  };

  if (tid < 128) {  // ---------------- producer warpgroup ----------------
    asm volatile("setmaxnreg.dec.sync.aligned.u32 64;\n" ::: "memory");
    const int lc = tid % 16, lr = tid / 16;
    const uint32_t sw = (lc / 8) * L::kHalf + uint32_t(((lc % 8) ^ lr) * 16) + uint32_t(lr * 128);
    const char* kbase = static_cast<const char*>(p.k_cache);
    const char* vbase = static_cast<const char*>(p.v_cache);
    const bool paged = p.kv.kind == KvLayoutKind::paged;
    const int bs = p.kv.block_size, bs_shift = p.block_shift;
    const bool lean_layout = !paged || bs_shift >= 4;
    const int row_bytes = int(p.kv_row * int64_t(sizeof(T)));  // < 2^31: n_kv * 256
    const T* qsrc = static_cast<const T*>(p.q);
    int c = 0;  // key tiles loaded so far (all items): ring stage c % 3, use c / 3
    for (int round = 0;; ++round) {
      const int w = item_of_round(round);
      if (w >= n_work) break;
      const Item item = decode_item(p, total, w);
      const Rows rw = rows_of(item);
      const int max_pos = rw.max_pos;
      const int32_t* trow = paged ? p.kv.block_tables + p.kv.table_row(item.s) * p.kv.block_table_stride : nullptr;
      const int64_t base_slot = paged ? 0 : p.kv.base_slots[item.s];
      const int64_t col = int64_t(item.kvh) * kHD + lc * 8;
      const char* kcol = kbase + col * int64_t(sizeof(T));
      const char* vcol = vbase + col * int64_t(sizeof(T));
      // Q tile of this item (zeros in padding rows), once the consumers' last S GEMM of the
      // previous item has read Q.
      if (round > 0) mbar_wait(sbase + LP::kEmptyQ, (round - 1) & 1);
#pragma unroll 4
      for (int j = 0; j < kBM / 8; ++j) {
        const int rr = item.tile * kBM + lr + 8 * j, i = rr / p.group;
        const bool valid = i < rw.q_len;
        const T* src = valid ? qsrc + (rw.q0 + i) * p.q_row_stride + int64_t(item.kvh * p.group + rr % p.group) * kHD + lc * 8 : qsrc;
        cp_async16(sbase + L::kQ + sw + j * 1024, src, valid);
      }
      cp_async_arrive_noinc(sbase + LP::kFullQ);
      int32_t slot[kBN / 8];
      for (int t = 0; t < rw.n_key_tiles; ++t, ++c) {
        const int st = c % kStages, n = c / kStages;
        const uint32_t soff = uint32_t(st) * L::kTile + sw;
        const int k0 = t * kBN + lr;
        const bool lean = lean_layout && t * kBN + kBN - 1 <= max_pos;
        if (lean) {  // whole tile: v6.1's 8 table reads (rows lr + 16i and lr + 16i + 8 share a block)
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
        } else if (!paged) {
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
        // One K or V tile from the slots into stage st; zeros past max_pos.
        auto issue = [&](const char* base_col, uint32_t ring) {
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const bool valid = lean || k0 + 8 * j <= max_pos;
            cp_async16(sbase + ring + soff + j * 1024, valid ? base_col + int64_t(slot[j]) * row_bytes : base_col, valid);
          }
        };
        if (n > 0) mbar_wait(sbase + LP::kEmptyK + 8 * st, (n - 1) & 1);
        issue(kcol, L::kK);
        cp_async_arrive_noinc(sbase + LP::kFullK + 8 * st);
        if (n > 0) mbar_wait(sbase + LP::kEmptyV + 8 * st, (n - 1) & 1);
        issue(vcol, L::kV);
        cp_async_arrive_noinc(sbase + LP::kFullV + 8 * st);
      }
    }
    cp_async_wait<0>();
  } else {  // ---------------- consumer warpgroups ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n" ::: "memory");
    const int wg = tid / 128 - 1, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, c2 = (lane % 4) * 2;
    const int lr0 = wg * 64 + warp * 16 + g, lr1 = lr0 + 8;
    const float sl2 = p.scale_log2;
    float o[64], sc[64];
    uint32_t pf[kBN / 16][4];
    const uint64_t desc_q = wgmma::desc_sw128(sbase + L::kQ + wg * 64 * 128, 16, 1024);
    const uint64_t desc_k = wgmma::desc_sw128(sbase + L::kK, 16, 1024);
    const uint64_t desc_v = wgmma::desc_sw128(sbase + L::kV, L::kHalf, 1024);
    auto issue_s = [&](int c) { issue_qk<T>(sc, desc_q, desc_k, uint32_t(c % kStages) * L::kTile); };
    auto issue_pv = [&](int c) {
      const uint32_t st = uint32_t(c % kStages) * L::kTile;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) wgmma::mma_rs<T>(o, pf[kk], desc_v + ((st + kk * 2048) >> 4));
    };
    auto release = [&](uint32_t bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    // Turns as in v5.1's ping-pong, continued across items: warpgroup 1 gives the first turn and
    // skips only its very last pass, so every bar.sync meets exactly one set of arrivals.
    auto turn_wait = [&] { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory"); };
    auto turn_pass = [&] { asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - wg) : "memory"); };
    if (wg == 1) turn_pass();

    int c = 0;  // key tiles consumed so far (all items)
    for (int round = 0;; ++round) {
      const int w = item_of_round(round);
      if (w >= n_work) break;
      const bool last_item = item_of_round(round + 1) >= n_work;
      const Item item = decode_item(p, total, w);
      const Rows rw = rows_of(item);
      const int n_key_tiles = rw.n_key_tiles;
      auto row_pos = [&](int r) {
        const int i = (item.tile * kBM + r) / p.group;
        return i < rw.q_len ? rw.ctx - rw.q_len + i : -1;
      };
      const int pos0 = row_pos(lr0), pos1 = row_pos(lr1);
      const int wg_min = row_pos(wg * 64);  // -1: no valid row in this warpgroup (masked everywhere)
      RowPairSoftmax sm;
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] = 0.0f;
      auto softmax = [&](int t) { sm.tile(sc, t, wg_min, pos0, pos1, c2, sl2); };
      auto rescale_and_pack = [&] { sm.rescale_and_pack<T, true>(o, sc, pf); };

      mbar_wait(sbase + LP::kFullQ, round & 1);
      mbar_wait(sbase + LP::kFullK + 8 * (c % kStages), (c / kStages) & 1);
      wgmma::fence_proxy_async();
      turn_wait();
      wgmma::fence();
      issue_s(c);
      wgmma::commit();
      turn_pass();
      wgmma::wait<0>();
      wgmma::pin(sc);
      release(sbase + LP::kEmptyK + 8 * (c % kStages));
      if (n_key_tiles == 1) release(sbase + LP::kEmptyQ);  // Q read for the last time
      softmax(0);
      rescale_and_pack();
      for (int kt = 0; kt + 1 < n_key_tiles; ++kt) {
        const int c0 = c + kt, c1 = c0 + 1, s1 = c1 % kStages, s0 = c0 % kStages;
        mbar_wait(sbase + LP::kFullK + 8 * s1, (c1 / kStages) & 1);
        mbar_wait(sbase + LP::kFullV + 8 * s0, (c0 / kStages) & 1);
        wgmma::fence_proxy_async();
        turn_wait();
        wgmma::fence();
        issue_s(c1);
        wgmma::commit();
        issue_pv(c0);
        wgmma::commit();
        turn_pass();
        wgmma::wait<1>();  // S of tile kt + 1 (P · V of tile kt may still run)
        wgmma::pin(sc);
        release(sbase + LP::kEmptyK + 8 * s1);
        if (kt + 2 == n_key_tiles) release(sbase + LP::kEmptyQ);
        softmax(kt + 1);
        wgmma::wait<0>();
        wgmma::pin(o);
        wgmma::pin_u32(pf);
        release(sbase + LP::kEmptyV + 8 * s0);
        rescale_and_pack();
      }
      const int cl = c + n_key_tiles - 1;
      mbar_wait(sbase + LP::kFullV + 8 * (cl % kStages), (cl / kStages) & 1);
      wgmma::fence_proxy_async();
      turn_wait();
      wgmma::fence();
      issue_pv(cl);
      wgmma::commit();
      if (wg == 0 || !last_item) turn_pass();
      wgmma::wait<0>();
      wgmma::pin(o);
      release(sbase + LP::kEmptyV + 8 * (cl % kStages));
      c += n_key_tiles;

#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {
        sm.l0 += __shfl_xor_sync(0xffffffffu, sm.l0, x);
        sm.l1 += __shfl_xor_sync(0xffffffffu, sm.l1, x);
      }
      const float inv0 = 1.0f / sm.l0, inv1 = 1.0f / sm.l1;
      T* out = static_cast<T*>(p.out);
      const int rr0 = item.tile * kBM + lr0, rr1 = item.tile * kBM + lr1;
      T* out0 = out + (rw.q0 + rr0 / p.group) * p.out_row_stride + int64_t(item.kvh * p.group + rr0 % p.group) * kHD + c2;
      T* out1 = out + (rw.q0 + rr1 / p.group) * p.out_row_stride + int64_t(item.kvh * p.group + rr1 % p.group) * kHD + c2;
#pragma unroll
      for (int j = 0; j < kHD / 8; ++j) {
        if (pos0 >= 0) *reinterpret_cast<uint32_t*>(out0 + j * 8) = pack2<T>(o[4 * j] * inv0, o[4 * j + 1] * inv0);
        if (pos1 >= 0) *reinterpret_cast<uint32_t*>(out1 + j * 8) = pack2<T>(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
      }
    }
  }
#endif
}

template <typename T>
void launch_persist_t(const Params& p, int blocks, cudaStream_t stream) {
  static std::atomic<uint64_t> raised{0};  // per device: kernels/per_device.h
  servelab::kernels::once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_persist_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(LayoutP::kAlloc)));
  });
  prefill_wgmma_persist_kernel<T><<<blocks, kThreadsP, LayoutP::kAlloc, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_persist(const Params& p, int max_items, int max_blocks, ScalarType dtype, cudaStream_t stream) {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int blocks = std::min(max_items, sms);
  if (max_blocks > 0) blocks = std::min(blocks, max_blocks);
  if (blocks <= 0) return;
  SERVELAB_DISPATCH_16(dtype, (launch_persist_t<__nv_bfloat16>(p, blocks, stream)), (launch_persist_t<__half>(p, blocks, stream)));
}

}  // namespace servelab::kernels::prefill_wgmma
