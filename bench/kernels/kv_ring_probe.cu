// kv_ring_probe: how fast a warp's ring of bulk copies can read the FP8 KV pages, by how the work
// is dealt (issue 26: the FP8 KV decode's mma_bulk reads 0.77-0.89 of the copy at GQA 1 from batch
// 32 where a read-only kernel with plain loads reads 0.99-1.02, kv_read_probe.cu).
// Read-only kernels over the head-major FP8 pages (kernels/kv_fp8.h: a page's K run of one head is
// 16 rows of 128 codes then 16 fp32 scales, 2,112 bytes; V the same), folding what they read into
// one word:
//   blocks     : mma_bulk's structure: a block per (KV head, sequence), 4 warps, warp w takes the
//                sequence's pages w, w + 4, ...; a ring of 3 stages a warp (4 blocks an SM), each
//                stage filled by two bulk copies from lane 0, the warp reading it from shared memory;
//   persistent : the same ring, 4 blocks an SM for the whole grid: each warp takes the items
//                (sequence, KV head, run of C pages) gw, gw + W, ... and streams their pages through
//                one ring, so no warp starts or drains more than once;
//   plain      : kv_read_probe's full-occupancy kernel (plain 16-byte loads, 4 pages a warp in
//                flight, a block per (KV head, sequence)): the ceiling.
// Two tables: `deal` times those three; `layout` times the blocks' ring with the decode's
// arithmetic stood in by dependent FMAs over four ways a page's runs could lie and be copied
// (results/gpu/quant/h200-2026-12-03-fp8kv-regs/, calls 1 and 6).
// Standalone: nvcc -O3 -arch=sm_90a -std=c++17 bench/kernels/kv_ring_probe.cu -o kv_ring_probe
//             ./kv_ring_probe [all|deal|layout]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "probe_util.cuh"

constexpr int kRun = 16 * 128 + 64;  // one head's K (or V) run of a page
constexpr int kStageBytes = 2 * 2176;   // room for two runs padded to 128 bytes

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(uint32_t bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void bar_expect(uint32_t bar, uint32_t tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(tx) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t bar, int parity) {
  asm volatile("{\n.reg .pred P1;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@!P1 bra WAIT;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ uint4 ldg16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

struct Shape {
  int batch, pps, n_kv;  // sequences, pages a sequence, KV heads
  int64_t page_bytes;    // n_kv * hstride
  int run = kRun;        // bytes a copy
  int hstride = kRun;    // a head's bytes in a page (run, or run padded)
  int copies = 2;        // a step's copies: K's run and V's (2), or K and V of a head side by side (1, 2 runs long)
  int spin = 0;          // dependent FMAs a step after the stage is read (the decode's arithmetic, roughly)
};

// The byte offset of a warp's step k's K run (the V run lies at the same offset in the V arena).
// kPersistent: item gw + j*W, j = k / C, is (s, h, c) with h fastest; else block (h, s), page w + 4k.
template <bool kPersistent, int C>
__device__ __forceinline__ int64_t step_at(const Shape& sh, const int* pages, int gw, int W, int k) {
  int s, h, pi;
  if constexpr (kPersistent) {
    const int item = gw + (k / C) * W, runs = sh.pps / C;
    h = item % sh.n_kv;
    const int rest = item / sh.n_kv;
    s = rest / runs;
    pi = (rest % runs) * C + k % C;
  } else {
    h = blockIdx.x;
    s = blockIdx.y;
    pi = threadIdx.x / 32 + 4 * k;
  }
  return int64_t(__ldg(pages + int64_t(s) * sh.pps + pi)) * sh.page_bytes + int64_t(h) * sh.hstride;
}

template <bool kPersistent, int C, int kStages, int kBps>
__global__ void __launch_bounds__(128, kBps) ring(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v, const int* pages,
                                                  Shape sh, uint32_t* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[4][kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gw = blockIdx.x * 4 + warp, W = gridDim.x * 4;
  int n_steps;
  if constexpr (kPersistent) {
    const int items = sh.batch * sh.n_kv * (sh.pps / C);
    n_steps = gw < items ? ((items - gw + W - 1) / W) * C : 0;
  } else {
    n_steps = sh.pps > warp ? (sh.pps - warp + 3) / 4 : 0;
  }
  unsigned char* wb = smem + warp * kStages * kStageBytes;
  const uint32_t wsm = smem_u32(wb), wbar = smem_u32(&bars[warp][0]);
  if (lane == 0) {
    for (int st = 0; st < kStages; ++st) bar_init(wbar + 8 * st);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncwarp();
  // Lane l holds the offset of step w0 + l; the next window is loaded 32 steps ahead.
  auto off_of = [&](int kk) { return kk < n_steps ? step_at<kPersistent, C>(sh, pages, gw, W, kk) : int64_t(0); };
  int w0 = 0;
  int64_t win_a = off_of(lane), win_b = off_of(32 + lane);
  auto offset = [&](int kk) {
    if (kk >= w0 + 32) {
      win_a = win_b;
      win_b = off_of(w0 + 64 + lane);
      w0 += 32;
    }
    return __shfl_sync(0xffffffffu, win_a, kk - w0);
  };
  auto issue = [&](int kk) {
    const int64_t at = offset(kk);
    if (kk < n_steps && lane == 0) {
      const uint32_t bar = wbar + 8 * (kk % kStages), dst = wsm + (kk % kStages) * kStageBytes;
      if (sh.copies == 2) {
        bar_expect(bar, 2 * sh.run);
        bulk_g2s(dst, k + at, sh.run, bar);
        bulk_g2s(dst + sh.hstride, v + at, sh.run, bar);
      } else {
        bar_expect(bar, 2 * sh.run);
        bulk_g2s(dst, k + at, 2 * sh.run, bar);
      }
    }
  };
  uint32_t acc = 0;
  for (int kk = 0; kk < kStages - 1; ++kk) issue(kk);
  for (int kk = 0; kk < n_steps; ++kk) {
    issue(kk + kStages - 1);
    bar_wait(wbar + 8 * (kk % kStages), (kk / kStages) & 1);
    const unsigned char* sb = wb + (kk % kStages) * kStageBytes;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint4 x = *reinterpret_cast<const uint4*>(sb + (j * 32 + lane) * 16);
      acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    if (lane < 8) acc ^= *reinterpret_cast<const uint32_t*>(sb + 4096 + lane * 16);
    float x = __uint_as_float(acc & 0x3fffffffu);
    for (int j = 0; j < sh.spin; ++j) x = fmaf(x, 0.999f, 0.5f);
    acc ^= __float_as_uint(x);
    __syncwarp();
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// kv_read_probe's full-occupancy read: block (h, s), warp w takes pages w, w + 4, ... 4 at a time.
__global__ void __launch_bounds__(128) plain(const uint8_t* __restrict__ k, const uint8_t* __restrict__ v, const int* pages, Shape sh,
                                             uint32_t* out) {
  const int h = blockIdx.x, s = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t acc = 0;
  for (int p0 = warp * 4; p0 < sh.pps; p0 += 16) {
    uint4 buf[4][2][4];
    uint32_t sc[4][2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int pg = p0 + j < sh.pps ? pages[int64_t(s) * sh.pps + p0 + j] : -1;
      const int64_t pb = int64_t(pg) * sh.page_bytes + int64_t(h) * kRun;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const bool ok = pg >= 0;
        buf[j][0][q] = ok ? ldg16(k + pb + (q * 32 + lane) * 16) : make_uint4(0, 0, 0, 0);
        buf[j][1][q] = ok ? ldg16(v + pb + (q * 32 + lane) * 16) : make_uint4(0, 0, 0, 0);
      }
      sc[j][0] = sc[j][1] = 0;
      if (pg >= 0 && lane < 16) {
        sc[j][0] = __ldg(reinterpret_cast<const uint32_t*>(k + pb + 2048) + lane);
        sc[j][1] = __ldg(reinterpret_cast<const uint32_t*>(v + pb + 2048) + lane);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc ^= buf[j][t][q].x ^ buf[j][t][q].y ^ buf[j][t][q].z ^ buf[j][t][q].w;
      acc ^= sc[j][0] ^ sc[j][1];
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <bool kP, int C, int kS, int kB>
void set_smem() {
  CK(cudaFuncSetAttribute(ring<kP, C, kS, kB>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * kS * kStageBytes));
}

/// One shape's pages: each sequence's pps pages shuffled over an arena of batch * pps + 64 pages
/// of n_kv heads, a head's share hstride_max bytes at most (K and V arenas alike).
struct Pages {
  int* table = nullptr;
  uint8_t *k = nullptr, *v = nullptr;
  Pages(int batch, int pps, int n_kv, int hstride_max, std::mt19937_64& rng) {
    const int n_pages = batch * pps + 64;
    std::vector<int> perm(n_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    CK(cudaMalloc(&table, size_t(batch) * pps * 4));
    CK(cudaMemcpy(table, perm.data(), size_t(batch) * pps * 4, cudaMemcpyHostToDevice));
    const size_t bytes = size_t(n_pages) * n_kv * hstride_max;
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
    CK(cudaMemset(k, 1, bytes));
    CK(cudaMemset(v, 2, bytes));
  }
  ~Pages() {
    cudaFree(table);
    cudaFree(k);
    cudaFree(v);
  }
};

struct Case { int group, batch, ctx; };
constexpr int kHeads = 32;

void row(const Case& c, const char* kernel, float ms, double copy_gbs) {
  const double useful = double(c.batch) * c.ctx * (kHeads / c.group) * 2 * 132;
  char name[48];
  std::snprintf(name, sizeof name, "b%d ctx%d gqa%d", c.batch, c.ctx, c.group);
  std::printf("%-22s %-34s %9.1f %8.2f\n", name, kernel, ms * 1e3, useful / (ms * 1e-3) / 1e9 / copy_gbs);
}

/// Table 1 ("deal"): the pages dealt by block as mma_bulk deals them, by persistent warps over
/// runs of C pages, and kv_read_probe's plain loads.
void deal(double copy_gbs, int sms, uint32_t* out, std::mt19937_64& rng) {
  const Case cases[] = {{1, 32, 1024}, {1, 32, 4096}, {1, 128, 1024}, {1, 128, 4096}, {4, 128, 4096}, {8, 128, 4096}, {4, 32, 4096}};
  for (const Case& c : cases) {
    const int n_kv = kHeads / c.group;
    const Shape sh{c.batch, c.ctx / 16, n_kv, int64_t(n_kv) * kRun};
    const Pages pg(c.batch, sh.pps, n_kv, kRun, rng);
    const dim3 grid(n_kv, c.batch);
    const uint8_t *k = pg.k, *v = pg.v;
    const int* t = pg.table;
    row(c, "plain (ceiling)", probe_best_ms([&] { plain<<<grid, 128>>>(k, v, t, sh, out); }), copy_gbs);
    row(c, "blocks 3st 4bps", probe_best_ms([&] { ring<false, 1, 3, 4><<<grid, 128, 4 * 3 * kStageBytes>>>(k, v, t, sh, out); }), copy_gbs);
    row(c, "persist C16 3st 4bps", probe_best_ms([&] { ring<true, 16, 3, 4><<<4 * sms, 128, 4 * 3 * kStageBytes>>>(k, v, t, sh, out); }), copy_gbs);
    row(c, "persist C64 3st 4bps", probe_best_ms([&] { ring<true, 64, 3, 4><<<4 * sms, 128, 4 * 3 * kStageBytes>>>(k, v, t, sh, out); }), copy_gbs);
    row(c, "persist C16 2st 6bps", probe_best_ms([&] { ring<true, 16, 2, 6><<<6 * sms, 128, 4 * 2 * kStageBytes>>>(k, v, t, sh, out); }), copy_gbs);
    row(c, "persist C16 4st 3bps", probe_best_ms([&] { ring<true, 16, 4, 3><<<3 * sms, 128, 4 * 4 * kStageBytes>>>(k, v, t, sh, out); }), copy_gbs);
  }
}

/// Table 2 ("layout"): mma_bulk's dealing with the arithmetic stood in by `spin` dependent FMAs a
/// step, over four ways a page's runs could lie and be copied: today's (2 copies of 2,112 bytes at
/// 64-byte alignment), runs padded to 2,176 (128-byte aligned starts and sizes), aligned starts
/// with 2,112-byte copies, and one copy a step of a head's K and V side by side (4,224 bytes).
void layout(double copy_gbs, uint32_t* out, std::mt19937_64& rng) {
  const Case cases[] = {{1, 32, 1024}, {1, 32, 4096}, {1, 128, 1024}, {4, 128, 4096}};
  struct Lay { const char* name; int run, hstride, copies; };
  const Lay lays[] = {{"2x2112 @64", kRun, kRun, 2}, {"2x2176 @128", 2176, 2176, 2}, {"2x2112 @128", kRun, 2176, 2},
                      {"1x4224 @128", kRun, 2 * kRun, 1}};
  for (const Case& c : cases) {
    const int n_kv = kHeads / c.group, pps = c.ctx / 16;
    const Pages pg(c.batch, pps, n_kv, 2 * 2176, rng);
    for (int spin : {0, 200, 400})
      for (const Lay& L : lays) {
        const Shape sh{c.batch, pps, n_kv, int64_t(n_kv) * L.hstride, L.run, L.hstride, L.copies, spin};
        const dim3 grid(n_kv, c.batch);
        char kname[64];
        std::snprintf(kname, sizeof kname, "blocks %s spin %d", L.name, spin);
        row(c, kname, probe_best_ms([&] { ring<false, 1, 3, 4><<<grid, 128, 4 * 3 * kStageBytes>>>(pg.k, pg.v, pg.table, sh, out); }),
            copy_gbs);
      }
  }
}

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  if (which != "all" && which != "deal" && which != "layout") {
    std::fprintf(stderr, "usage: kv_ring_probe [all|deal|layout]\n");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbs = probe_copy_gbs();
  std::mt19937_64 rng(7);
  uint32_t* out;
  CK(cudaMalloc(&out, 4));
  set_smem<false, 1, 3, 4>();
  set_smem<true, 16, 3, 4>();
  set_smem<true, 64, 3, 4>();
  set_smem<true, 16, 2, 6>();
  set_smem<true, 16, 4, 3>();
  std::printf("%-22s %-34s %9s %8s\n", "shape", "kernel", "us", "of copy");
  if (which != "layout") deal(copy_gbs, prop.multiProcessorCount, out, rng);
  if (which != "deal") layout(copy_gbs, out, rng);
  return 0;
}
