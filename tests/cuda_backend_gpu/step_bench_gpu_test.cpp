// Step times of the cuda backend on a real model shape (default llama2-7b, random weights drawn on
// the GPU): prefill and decode at batch 1, 16 and 64 with 512-token prompts, in the default mode
// (decode from CUDA graphs), eager (`cuda_graphs: off`), `fusion: off` (eager) and batch-invariant.
// Prints figures, asserts nothing about time (no timing assertions in tests). Runs only with
// SERVELAB_GPU_BENCH=1 (SERVELAB_GPU_BENCH_MODEL picks the preset) on a machine with a GPU.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/kv/kv_manager.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace step_bench_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CudaBackendGpuBench, PrefillAndDecodeStepTimes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const char* on = std::getenv("SERVELAB_GPU_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set SERVELAB_GPU_BENCH=1 to time steps";
  const char* name = std::getenv("SERVELAB_GPU_BENCH_MODEL");
  const ModelConfig config = preset(name ? name : "llama2-7b");
  constexpr int kPrompt = 512, kDecode = 20, kMaxBatch = 64;
  const int64_t n_slots = int64_t(kMaxBatch) * (kPrompt + kDecode + 16);
  std::printf("%s on %s\n", config.name.c_str(), cuda_device_description(0).c_str());
  std::printf("%-16s %6s %12s %14s %12s\n", "mode", "batch", "prefill_ms", "prefill_tok/s", "decode_ms");
  struct Mode {
    const char* label;
    CudaBackendOptions options;
  };
  const Mode modes[] = {{"default", {}},
                        {"cuda_graphs_off", {.cuda_graphs = false}},
                        {"fusion_off", {.fusion = false, .cuda_graphs = false}},
                        {"batch_invariant", {.batch_invariant = true}}};
  for (const Mode& mode : modes) {
    const auto t_load = std::chrono::steady_clock::now();
    auto gpu = CudaBackend::random(config, 1, mode.options);
    const double load_s = seconds_since(t_load);
    gpu->init_kv(n_slots);
    if (&mode == &modes[0]) std::printf("(weights drawn on the GPU in %.2f s, %.1f GB)\n", load_s, gpu->weight_bytes() / 1e9);
    for (int batch : {1, 16, 64}) {
      KvConfig kc;
      kc.prefix_caching = false;
      kc.max_model_len = kPrompt + kDecode + 8;
      auto kv = make_kv_manager(kc, n_slots);
      std::vector<Sequence> seqs(batch);
      Batch prefill;
      for (int i = 0; i < batch; ++i) {
        seqs[i] = testing::make_sequence(i + 1, testing::random_tokens(kPrompt, config.vocab_size, 100 + i));
        seqs[i].sampling.max_tokens = kDecode + 4;
        kv->allocate(seqs[i], kPrompt);
        prefill.entries.push_back({&seqs[i], kPrompt, true});
      }
      run_batch(*gpu, prefill, *kv);  // warm-up (GEMM algorithm choice), then timed
      const auto t0 = std::chrono::steady_clock::now();
      StepOutput r = run_batch(*gpu, prefill, *kv);
      const double prefill_s = seconds_since(t0);
      for (int i = 0; i < batch; ++i) {
        seqs[i].n_computed = kPrompt;
        seqs[i].tokens.push_back(r.tokens[i]);
      }
      double decode_s = 0.0;
      for (int step = 0; step < kDecode; ++step) {
        Batch b;
        for (Sequence& s : seqs) {
          kv->grow(s, s.n_tokens());
          b.entries.push_back({&s, 1, true});
        }
        const auto t1 = std::chrono::steady_clock::now();
        r = run_batch(*gpu, b, *kv);
        if (step >= 2) decode_s += seconds_since(t1);  // first steps warm the decode GEMM shapes
        for (int i = 0; i < batch; ++i) {
          seqs[i].n_computed += 1;
          seqs[i].tokens.push_back(r.tokens[i]);
        }
      }
      std::printf("%-16s %6d %12.2f %14.0f %12.3f\n", mode.label, batch, prefill_s * 1e3,
                  batch * kPrompt / prefill_s, decode_s / (kDecode - 2) * 1e3);
    }
  }
}

}  // namespace step_bench_gpu_test
}  // namespace servelab
