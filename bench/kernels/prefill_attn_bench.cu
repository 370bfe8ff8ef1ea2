// kernel_bench's prefill attention part: 1k and 4k-token causal attention (32 heads, head_dim
// 128, GQA 1 and 4) on four KV layouts (paged blocks of 16 shuffled, the contiguous arena SDPA
// reads, blocks of 256, the engine's own tables), the dispatched kernel and each wgmma kernel by
// name in interleaved rounds, each row beside the cuBLASLt GEMM ceiling.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "bench/kernels/paged_batch.cuh"

namespace servelab::kernels::bench {

void bench_prefill_attention(bool quick, std::mt19937_64& rng, int n_sms, double gemm_tflops) {
  std::printf("prefill attention (causal, head_dim 128, 32 heads; prefill_attn runs %s):\n",
              prefill_wgmma_supported(128) ? "the wgmma kernel" : "the mma kernel");
  const auto shape_of = [](int seq, int group) { return "seq" + std::to_string(seq) + " gqa" + std::to_string(group); };
  for (int group : {1, 4})
    for (int seq : quick ? std::vector<int>{4096} : std::vector<int>{1024, 4096}) {
      // Four KV layouts: paged blocks of 16, shuffled (rows "seqN gqaG"), the contiguous arena SDPA
      // reads (" naive"), paged blocks of 256, shuffled (" block256"; ninth pass), and blocks of 16 as
      // the engine's PagedKvManager lays them after a seeded churn (" engine", tenth pass: physical
      // runs, most 128-key tiles on consecutive blocks).
      struct PrefillLayout { const char* suffix; ArenaOrder order; int block; };
      const PrefillLayout layouts[] = {{"", ArenaOrder::shuffled, 16}, {" naive", ArenaOrder::naive, 16}, {" block256", ArenaOrder::shuffled, 256},
                                       {" engine", ArenaOrder::engine, 16}};
      Buf pq(size_t(seq) * 32 * 128 * 2), pout(size_t(seq) * 32 * 128 * 2), dqs(8);
      fill_random(pq.p, int64_t(seq) * 32 * 128, rng());
      const int32_t qs[2] = {0, seq};
      CUDA_CHECK(cudaMemcpy(dqs.p, qs, 8, cudaMemcpyHostToDevice));
      std::vector<std::unique_ptr<PagedBatch>> batches;
      std::vector<PrefillAttentionArgs> args;
      for (const PrefillLayout& l : layouts) {
        PagedBatch& b = *batches.emplace_back(std::make_unique<PagedBatch>(1, seq, 32, 32 / group, 0, rng, l.order, l.block));
        const DecodeAttentionArgs d = b.decode_args(0, SplitPolicy{}, n_sms);
        PrefillAttentionArgs& p = args.emplace_back();
        p.q = pq.p;
        p.q_row_stride = p.out_row_stride = 32 * 128;
        p.k_cache = b.k->p, p.v_cache = b.v->p, p.shape = d.shape;
        p.n_heads = 32, p.n_seqs = 1, p.n_tokens = seq;
        p.query_start = dqs.get<int32_t>();
        p.context_lens = b.ctx_lens->get<int32_t>();
        p.kv = d.kv;
        p.scale = d.scale;
        p.out = pout.p;
        if (l.order == ArenaOrder::engine) {  // the tiles fa11 loads by TMA: whole, on consecutive blocks
          std::vector<int32_t> tbl(size_t(b.blocks_per_seq));
          CUDA_CHECK(cudaMemcpy(tbl.data(), p.kv.block_tables, tbl.size() * 4, cudaMemcpyDeviceToHost));
          const int per_tile = 128 / l.block;
          int whole = 0, runs = 0;
          for (int t = 0; (t + 1) * 128 <= seq; ++t, ++whole) {
            bool run = true;
            for (int i = 1; i < per_tile; ++i) run = run && tbl[size_t(t * per_tile + i)] == tbl[size_t(t * per_tile)] + i;
            runs += run;
          }
          std::printf("    engine table, seq %d: %d of %d whole key tiles on consecutive blocks (%.1f blocks per run)\n", seq, runs, whole,
                      b.mean_run_blocks);
        }
      }
      const double flops = 4.0 * 0.5 * double(seq) * seq * 128 * 32;  // QKᵀ and PV, causal half
      const std::string shape = shape_of(seq, group);
      // Timed as the peer script times SDPA: a CUDA graph of 20 calls, >= 25 ms of warm-up replays,
      // median of 15 replays; in kPrefillRounds interleaved rounds (every (kernel, layout) once a
      // round, odd rounds backwards), each row the median of its rounds (all printed), so that a
      // clock or thermal drift touches every kernel alike.
      using PrefillFn = void (*)(const PrefillAttentionArgs&, cudaStream_t);
      struct Timed { const char* name; PrefillFn fn; int layout; std::vector<double> ms; };
      const PrefillFn dispatched = [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention(a, st); };
      std::vector<Timed> timed = {{"prefill_attn", dispatched, 0, {}}};  // then by name, on each layout
      if (prefill_wgmma_supported(128)) {  // each wgmma kernel by name
        // fa8, fa10 (fa8's consumers on v6's TMA producer) and fa11 (TMA per tile where its slots
        // are consecutive, else fa8's gather) on the shuffled, naive and engine layouts;
        // prefill_attn on all four. The superseded kernels: kernels/scratch/, kernels/notes-prefill.md.
        const PrefillFn fa8 = prefill_attention_wgmma_fa8, fa10 = prefill_attention_wgmma_fa10, fa11 = prefill_attention_wgmma_fa11;
        const char *n8 = "prefill_attn_wgmma_fa8", *n10 = "prefill_attn_wgmma_fa10", *n11 = "prefill_attn_wgmma_fa11";
        timed.insert(timed.end(), {{n8, fa8, 0, {}}, {n11, fa11, 0, {}}, {n10, fa10, 0, {}},
                                   {"prefill_attn", dispatched, 3, {}}, {n8, fa8, 3, {}}, {n11, fa11, 3, {}},
                                   {n10, fa10, 3, {}}, {"prefill_attn", dispatched, 1, {}}, {n8, fa8, 1, {}}, {n11, fa11, 1, {}},
                                   {n10, fa10, 1, {}}, {"prefill_attn", dispatched, 2, {}}});
        // fa11 and fa8 fill the same shared memory: the same output bytes on every layout (checked here
        // on the engine's own tables too, which the tests do not build).
        for (size_t li = 0; li < args.size(); ++li) {
          const size_t bytes = size_t(seq) * 32 * 128 * 2;
          std::vector<uint16_t> o8(bytes / 2), o11(bytes / 2);
          fa8(args[li], nullptr);
          CUDA_CHECK(cudaMemcpy(o8.data(), pout.p, bytes, cudaMemcpyDeviceToHost));
          CUDA_CHECK(cudaMemset(pout.p, 0xff, bytes));
          fa11(args[li], nullptr);
          CUDA_CHECK(cudaMemcpy(o11.data(), pout.p, bytes, cudaMemcpyDeviceToHost));
          std::printf("    fa11 %s fa8 bit for bit on %s\n", o8 == o11 ? "==" : "!= (MISMATCH)", (shape_of(seq, group) + layouts[li].suffix).c_str());
        }
      } else {
        timed.push_back({"prefill_attn", dispatched, 1, {}});
      }
      constexpr int kPrefillRounds = 7;
      for (int round = 0; round < kPrefillRounds; ++round)
        for (size_t i = 0; i < timed.size(); ++i) {
          Timed& k = timed[round % 2 == 0 ? i : timed.size() - 1 - i];
          const PrefillAttentionArgs& p = args[size_t(k.layout)];
          k.ms.push_back(time_graph_ms([&](int, cudaStream_t st) { k.fn(p, st); }, 20, 15));
        }
      for (auto& k : timed) {
        std::vector<double> sorted = k.ms;
        std::sort(sorted.begin(), sorted.end());
        const std::string kshape = shape + layouts[k.layout].suffix;
        std::printf("    %-34s %-20s rounds:", k.name, kshape.c_str());
        for (double m : k.ms) std::printf(" %.1f", flops / (m * 1e-3) / 1e12);
        std::printf(" TFLOP/s\n");
        record(k.name, kshape, flops / (sorted[sorted.size() / 2] * 1e-3) / 1e12, "TFLOP/s", "cublaslt_gemm_bf16", gemm_tflops);
      }
      const PrefillAttentionArgs& p = args[0];
      const double ms = time_graph_ms([&](int, cudaStream_t st) { prefill_attention_mma(p, st); }, 20, 15);
      record("prefill_attn_mma", shape, flops / (ms * 1e-3) / 1e12, "TFLOP/s", "cublaslt_gemm_bf16", gemm_tflops);
    }
}

}  // namespace servelab::kernels::bench
