// The verification step of speculative decoding on llama2-7b (random bf16 weights) at 1, 32 and 64
// users (contexts ~384, k = 4 drafts: 5 rows a sequence), side by side in one process: eager
// (cuda_graphs off: verification through the prefill attention path), the decode graphs with each
// row a one-row decode sequence (verify_rows_kernel off, the limit lifted), and the decode graphs
// with the multi-row decode attention (kernels/attention_decode_rows.h; 8 or 4 pairs a block); beside each,
// the plain decode step of the same sequences. Medians of host wall time per step (the step
// synchronizes), 30 steps after 6 warm-up steps (graph capture). Prints; asserts only that every
// step drew its tokens. SERVELAB_GPU_BENCH=1 only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "tests/backend/backend_test_util.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace spec_verify_bench_gpu_test {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

TEST(SpecGpuBench, VerificationStepLlama2At1_32_64Users) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const char* on = std::getenv("SERVELAB_GPU_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set SERVELAB_GPU_BENCH=1";
  constexpr int kUsers[] = {1, 32, 64};
  constexpr int kPrompt = 384, kDrafts = 4, kWarm = 6, kSteps = 30, kBs = 16;
  const ModelConfig m = preset("llama2-7b");
  struct Mode {
    const char* name;
    bool graphs, rows_kernel;
    int queries;
  };
  const Mode modes[] = {{"eager", false, true, 0},
                        {"graphs, one-row transform", true, false, 0},
                        {"graphs, rows kernel 8/blk", true, true, 8},
                        {"graphs, rows kernel 4/blk", true, true, 4}};
  std::printf("llama2-7b verification step (%s; prompt %d, k = %d, block %d; median of %d steps):\n",
              cuda_device_description(0).c_str(), kPrompt, kDrafts, kBs, kSteps);
  std::printf("%-28s %6s %16s %16s %10s\n", "mode", "users", "decode step ms", "verify step ms", "ver/dec");
  const int64_t n_slots = int64_t(64) * (kPrompt + kDrafts + 2 * kBs);
  for (const Mode& mode : modes) {
    CudaBackendOptions o;
    o.cuda_graphs = mode.graphs;
    o.verify_rows_kernel = mode.rows_kernel;
    o.verify_graph_max_rows = 512;
    o.verify_rows_queries = mode.queries;
    std::unique_ptr<CudaBackend> gpu = CudaBackend::random(m, 1, o);
    gpu->init_kv(n_slots);
    for (const int users : kUsers) {
      KvConfig kc;
      kc.kind = KvKind::paged;
      kc.block_size = kBs;
      kc.prefix_caching = false;
      kc.max_model_len = kPrompt + kDrafts + kBs;
      auto kv = make_kv_manager(kc, n_slots);
      std::vector<Sequence> seqs(static_cast<size_t>(users));
      for (int i = 0; i < users; ++i) {
        seqs[size_t(i)] = testing::make_sequence(uint64_t(i + 1), testing::random_tokens(kPrompt + i % kBs, m.vocab_size, 90 + i));
        Sequence& s = seqs[size_t(i)];
        s.n_computed = s.n_tokens() - 1;  // the K/V before the last token: timing does not read its values
        s.spec_tokens = testing::random_tokens(kDrafts, m.vocab_size, 900 + i);
        kv->allocate(s, s.n_with_spec());
      }
      std::vector<double> t_verify, t_decode;
      for (int step = 0; step < kWarm + kSteps; ++step) {
        for (int which = 0; which < 2; ++which) {
          if (which == 1)
            for (Sequence& s : seqs) s.spec_tokens.clear();  // plain decode: one row a sequence
          Batch b;
          for (Sequence& s : seqs) b.entries.push_back({&s, which == 0 ? kDrafts + 1 : 1, true});
          const auto t0 = std::chrono::steady_clock::now();
          const StepOutput r = run_batch(*gpu, b, *kv);
          const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          ASSERT_EQ(r.tokens.size(), size_t(users) * (which == 0 ? kDrafts + 1 : 1));
          if (which == 1) {
            int i = 0;
            for (Sequence& s : seqs) s.spec_tokens = testing::random_tokens(kDrafts, m.vocab_size, uint64_t(900 + i++));
          }
          if (step >= kWarm) (which == 0 ? t_verify : t_decode).push_back(dt);
        }
      }
      const double v = median(t_verify), d = median(t_decode);
      std::printf("%-28s %6d %16.3f %16.3f %9.3fx\n", mode.name, users, d, v, v / d);
      std::fflush(stdout);
    }
    std::printf("  (%s: %lld verification steps graphed)\n", mode.name, (long long)gpu->verification_steps_graphed());
  }
}

}  // namespace spec_verify_bench_gpu_test
}  // namespace servelab
