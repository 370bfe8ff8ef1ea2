// lora_parts_bench: the pieces of a prefill step's multi-LoRA work on llama2-7b's four adapted
// products (q|k|v, o, gate|up, down), each timed alone and in the order the cuda backend runs
// them, so a step's LoRA cost (engine_bench --lora's lora_prefill_step rows) can be split into
// its parts (issue 31):
//   lora_parts_bench [--rows 128,256,512] [--json FILE] [--tile-zeros]
// (--tile-zeros: the fused kernel's x map ends at the call's rows, so a partial tile's other rows
// are the tensor copy's out-of-bounds zeros; by default the buffer's rows, as the backend passes)
// Per (rows, product), microseconds a call, replayed from CUDA graphs of 16 calls:
//   product            the base product (kernels::Gemm, cuBLASLt at these rows)
//   product acc        the same with beta = 1 (y += x · Wᵀ): what reading C in the epilogue costs
//   shrink / expand    LoraGemm's two GEMMs for one run of every row (one adapter)
//   expand beta0       the expand writing the delta alone
//   sgmv shrink / expand   the grouped CUDA-core kernels for the same rows (one adapter)
//   product+expand     the expand after the product, one stream
//   as the step        the shrink on a side stream beside the product, joined, then the expand:
//                      what the cuda backend's eager prefill runs for q|k|v and gate|up
//   beside             shrink and expand (beta 0) both on the side stream beside the product
//   fused / f nosplit  kernels/lora_fused_gemm.h's product alone (its choice of columns and K
//                      splits, printed as `shape`; then the same columns without a split): against
//                      `product`, what our own GEMM costs before any LoRA
//   fused lora         the same product with the run's shrink and expand inside: against `as
//                      the step`
// Random bf16 data; the results are not checked (the GPU tests check these kernels).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "kernels/gemm.h"
#include "kernels/lora_fused_gemm.h"
#include "kernels/lora_gemm.h"
#include "kernels/lora_sgmv.h"

using namespace servelab::kernels;
using namespace servelab::kernels::bench;

namespace {

struct Product {
  const char* name;
  int in, out, n_seg;
};

double time_us(const std::function<void(int, cudaStream_t)>& fn) { return time_graph_ms(fn, 16, 15) * 1e3; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> rows_list = {64, 128, 256, 512};
  std::string json_path;
  bool tile_zeros = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows_list.clear();
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) rows_list.push_back(std::atoi(t.c_str()));
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--tile-zeros")) tile_zeros = true;
    else {
      std::fprintf(stderr, "usage: lora_parts_bench [--rows 128,256,512] [--json FILE] [--tile-zeros]\n");
      return 2;
    }
  }
  const int rank = 16, n_slots = 4;
  const std::vector<Product> products = {{"qkv", 4096, 12288, 3}, {"o", 4096, 4096, 1}, {"gate_up", 4096, 22016, 2},
                                         {"down", 11008, 4096, 1}};
  int max_rows = 0;
  for (int r : rows_list) max_rows = std::max(max_rows, r);
  Gemm gemm;
  LoraGemm lgemm;
  LoraFusedGemm fgemm;
  cudaStream_t side;
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  nlohmann::json out = nlohmann::json::array();
  std::printf("lora_parts_bench: rank %d, one adapter for every row; us a call (graphs of 16)\n", rank);
  std::printf("%-8s %5s %9s %9s %8s %8s %8s %8s %8s %8s %10s %8s %8s %9s %10s %8s\n", "product", "rows", "product",
              "prod acc", "shrink", "expand", "exp b0", "sgmv sh", "sgmv ex", "prod+ex", "as step", "beside", "fused",
              "f nosplit", "fused lora", "shape");
  for (const Product& p : products) {
    Buf x(size_t(max_rows) * p.in * 2), w(size_t(p.out) * p.in * 2), y(size_t(max_rows) * p.out * 2),
        delta(size_t(max_rows) * p.out * 2);
    const int total = p.n_seg * rank;
    Buf a(size_t(n_slots) * total * p.in * 2), b(size_t(n_slots) * p.out * rank * 2), xa(size_t(max_rows) * total * 2);
    Buf scale(sizeof(float) * n_slots);
    fill_random(x.p, int64_t(max_rows) * p.in, 1, 1.0f);
    fill_random(w.p, int64_t(p.out) * p.in, 2, 0.02f);
    fill_random(y.p, int64_t(max_rows) * p.out, 3, 1.0f);
    fill_random(a.p, int64_t(n_slots) * total * p.in, 4, 0.02f);
    fill_random(b.p, int64_t(n_slots) * p.out * rank, 5, 0.02f);
    const std::vector<float> scales(n_slots, 2.0f);
    CUDA_CHECK(cudaMemcpy(scale.p, scales.data(), sizeof(float) * n_slots, cudaMemcpyHostToDevice));
    LoraPool pool;
    pool.a = a.p;
    pool.b = b.p;
    pool.scale = scale.get<float>();
    pool.n_slots = n_slots;
    pool.n_in = p.in;
    pool.n_out = p.out;
    pool.max_rank = rank;
    pool.n_seg = p.n_seg;
    for (int m = 0; m < p.n_seg; ++m) pool.seg_end[m] = p.out / p.n_seg * (m + 1);
    for (int rows : rows_list) {
      const LoraRun run{0, 0, rows};
      // The grouped kernels' plan: every row on slot 0.
      const int max_tiles = lora_max_tiles(rows, n_slots);
      Buf n_tiles(8), tiles(size_t(max_tiles) * 12), perm(size_t(rows) * 4), perm_slot(size_t(rows) * 4),
          row_slot(size_t(rows) * 4), tile_done(size_t(max_tiles) * 4);
      CUDA_CHECK(cudaMemset(row_slot.p, 0, size_t(rows) * 4));
      CUDA_CHECK(cudaMemset(tile_done.p, 0, size_t(max_tiles) * 4));
      LoraPlan plan{n_tiles.get<int32_t>(), tiles.get<int32_t>(), perm.get<int32_t>(), perm_slot.get<int32_t>(), {},
                    tile_done.get<int32_t>()};
      lora_plan(row_slot.get<int32_t>(), rows, n_slots, plan, nullptr);
      Buf partial(sizeof(float) * lora_partial_floats(pool, rows));
      CUDA_CHECK(cudaDeviceSynchronize());
      const ScalarType t = ScalarType::bf16;
      auto product = [&](cudaStream_t s, bool acc) { gemm.run(t, x.p, w.p, y.p, rows, p.out, p.in, false, s, acc); };
      auto shrink = [&](cudaStream_t s) { lgemm.shrink(t, x.p, pool, run, 2.0f, xa.p, s); };
      auto expand = [&](cudaStream_t s, void* into, bool acc) { lgemm.expand(t, xa.p, pool, run, into, p.out, 0, s, acc); };
      const double t_prod = time_us([&](int, cudaStream_t s) { product(s, false); });
      const double t_acc = time_us([&](int, cudaStream_t s) { product(s, true); });
      const double t_shrink = time_us([&](int, cudaStream_t s) { shrink(s); });
      const double t_expand = time_us([&](int, cudaStream_t s) { expand(s, y.p, true); });
      const double t_exp0 = time_us([&](int, cudaStream_t s) { expand(s, delta.p, false); });
      const double t_gsh = time_us([&](int, cudaStream_t s) {
        lora_sgmv_shrink(t, x.p, plan, rows, pool, partial.get<float>(), s);
      });
      const double t_gex = time_us([&](int, cudaStream_t s) {
        lora_sgmv_expand(t, partial.get<float>(), plan, rows, pool, y.p, p.out, 0, s, true, false);
      });
      const double t_pe = time_us([&](int, cudaStream_t s) {
        product(s, false);
        expand(s, y.p, true);
      });
      const double t_step = time_us([&](int, cudaStream_t s) {
        CUDA_CHECK(cudaEventRecord(fork, s));
        CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
        shrink(side);
        CUDA_CHECK(cudaEventRecord(join, side));
        product(s, false);
        CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
        expand(s, y.p, true);
      });
      const double t_beside = time_us([&](int, cudaStream_t s) {
        CUDA_CHECK(cudaEventRecord(fork, s));
        CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
        shrink(side);
        expand(side, delta.p, false);
        CUDA_CHECK(cudaEventRecord(join, side));
        product(s, false);
        CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
      });
      // Our fused kernel: the product alone (no pool), then with the run inside.
      LoraFusedTiles tiles_plain, tiles_lora;
      const std::vector<float> host_scale(n_slots, 2.0f);
      lora_fused_tiles({}, rows, host_scale.data(), tiles_plain);
      lora_fused_tiles({run}, rows, host_scale.data(), tiles_lora);
      const LoraPool none;
      double t_f = -1, t_f128 = -1, t_fl = -1;
      LoraFusedShape chosen;
      if (lora_fused_fits(t, pool, p.out, p.in)) {
        // x's buffer holds max_rows rows (--tile-zeros: only the call's, the copy's zeros past them).
        const int x_rows = tile_zeros ? rows : max_rows;
        auto fused = [&](cudaStream_t s, const LoraPool& pl, const LoraFusedTiles& tl, LoraFusedShape sh) {
          fgemm.run(t, x.p, w.p, y.p, rows, p.out, p.in, pl, tl, s, sh, x_rows);
        };
        chosen = fgemm.pick(pool, p.out, p.in, tiles_lora.n);
        t_f = time_us([&](int, cudaStream_t s) { fused(s, none, tiles_plain, {}); });
        t_f128 = time_us([&](int, cudaStream_t s) { fused(s, none, tiles_plain, {chosen.block_n, 1}); });
        t_fl = time_us([&](int, cudaStream_t s) { fused(s, pool, tiles_lora, {}); });
      }
      std::printf("%-8s %5d %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %10.2f %8.2f %8.2f %9.2f %10.2f %4dx%d\n", p.name,
                  rows, t_prod, t_acc, t_shrink, t_expand, t_exp0, t_gsh, t_gex, t_pe, t_step, t_beside, t_f, t_f128,
                  t_fl, chosen.block_n, chosen.splits);
      std::fflush(stdout);
      out.push_back({{"product", p.name}, {"rows", rows}, {"product_us", t_prod}, {"product_acc_us", t_acc},
                     {"shrink_us", t_shrink}, {"expand_us", t_expand}, {"expand_beta0_us", t_exp0},
                     {"sgmv_shrink_us", t_gsh}, {"sgmv_expand_us", t_gex}, {"product_expand_us", t_pe},
                     {"as_step_us", t_step}, {"beside_us", t_beside}, {"fused_us", t_f}, {"fused_nosplit_us", t_f128},
                     {"fused_lora_us", t_fl}, {"block_n", chosen.block_n}, {"splits", chosen.splits}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  return 0;
}
