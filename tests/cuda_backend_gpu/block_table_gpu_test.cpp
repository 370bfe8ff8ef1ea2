// Persistent device block tables on the GPU: the update kernel against its reference (poisoned
// table, counts past one pass of the grid); the cuda backend with persistent tables against the
// full-table path, logits step by step (sequences joining, leaving, pausing, recomputed into new
// blocks, copy-on-write) and tokens of whole engine runs (continuous batching with chunked prefill,
// parallel samples, recompute and swap preemption), CUDA graphs on and off; and, with
// SERVELAB_GPU_BENCH=1, the H2D bytes and step times at 256 sequences x 4k context. Names contain
// Gpu; every test skips without a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/kv/kv_manager.h"
#include "kernels/cuda_check.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "tests/backend/backend_test_util.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace block_table_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

ModelConfig model() { return testing::gpu_test_model("gpu-blocktab", 8192); }

TEST(BlockTableGpu, UpdateKernelMatchesReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  constexpr int kEntries = 1 << 18;
  int32_t* table = nullptr;
  kernels::BlockTableUpdate* updates = nullptr;
  int32_t* count = nullptr;
  CUDA_CHECK(cudaMalloc(&table, kEntries * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&updates, kEntries * sizeof(kernels::BlockTableUpdate)));
  CUDA_CHECK(cudaMalloc(&count, sizeof(int32_t)));
  for (int n : {0, 1, 17, 5000, 70000}) {
    for (int grid : {1, n}) {  // a grid for 1 entry strides over all n
      std::vector<int32_t> want(kEntries, -1);  // poison: every entry not updated must stay -1
      CUDA_CHECK(cudaMemset(table, 0xFF, kEntries * sizeof(int32_t)));
      std::vector<int32_t> idx(kEntries);
      for (int i = 0; i < kEntries; ++i) idx[i] = i;
      std::shuffle(idx.begin(), idx.end(), rng);
      std::vector<int32_t> pairs;
      for (int i = 0; i < n; ++i) {
        pairs.push_back(idx[i]);
        pairs.push_back(static_cast<int32_t>(rng() % 100000));
      }
      kernels::block_table_update_ref(want.data(), pairs.data(), n);
      if (n) CUDA_CHECK(cudaMemcpy(updates, pairs.data(), pairs.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(count, &n, sizeof(int32_t), cudaMemcpyHostToDevice));
      kernels::apply_block_table_updates(table, updates, count, std::max(grid, 1), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<int32_t> got(kEntries);
      CUDA_CHECK(cudaMemcpy(got.data(), table, kEntries * sizeof(int32_t), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, want) << n << " updates, grid for " << grid;
    }
  }
  cudaFree(table);
  cudaFree(updates);
  cudaFree(count);
}

void hold(KvManager& kv, Sequence& s, int n) {
  if (!s.kv.allocated) kv.allocate(s, n);
  else kv.grow(s, n);
}

/// Step by step, the four backends (persistent or full tables, graphs on or off) over one KV
/// manager: logits identical between the two table paths in each graph mode; sequences join,
/// leave, pause for a step, are recomputed into new blocks, and fork (copy-on-write).
TEST(CudaBackendGpuBlockTables, LogitsIdenticalToFullTablePathStepByStep) {
  SKIP_WITHOUT_GPU();
  for (int block_size : {16, 3}) {
    std::unique_ptr<CudaBackend> b[2][2];  // [graphs][persistent]
    for (int gr = 0; gr < 2; ++gr)
      for (int pe = 0; pe < 2; ++pe) {
        CudaBackendOptions o;
        o.cuda_graphs = gr == 1;
        o.persistent_block_tables = pe == 1;
        b[gr][pe] = CudaBackend::random(model(), 21, o);
        b[gr][pe]->init_kv(8192);
      }
    KvConfig kc;
    kc.kind = KvKind::paged;
    kc.block_size = block_size;
    kc.prefix_caching = false;
    kc.max_model_len = 512;
    auto kv = make_kv_manager(kc, 8192);
    std::vector<Sequence> seqs(7);
    for (int i = 0; i < 7; ++i) {
      seqs[i] = testing::make_sequence(i + 1, testing::random_tokens(9 + 23 * i, 1000, 60 + i));
      seqs[i].sampling.max_tokens = 64;
    }
    std::vector<int> live = {0, 1, 2};
    size_t bytes[2][2] = {};
    for (int step = 0; step < 40; ++step) {
      std::string what = "block size " + std::to_string(block_size) + ", step " + std::to_string(step);
      if (step == 6) live.push_back(3);                                    // joins (mixed step)
      if (step == 12) { kv->release(seqs[1]); live.erase(live.begin() + 1); live.push_back(4); }  // leaves, joins
      if (step == 18) {                                                    // recomputed into new blocks
        kv->release(seqs[2]);
        seqs[2].n_computed = 0;
        seqs[2].kv = {};
      }
      if (step == 24) {  // fork: copy-on-write of the shared partial block on the next write
        seqs[5] = seqs[0];
        seqs[5].id = 6;
        seqs[5].sample_index = 1;
        seqs[5].kv = {};
        kv->fork(seqs[0], seqs[5]);
        live.push_back(5);
      }
      Batch batch;
      for (int i : live) {
        if (step % 7 == 3 && i == 0) continue;  // pauses for a step
        Sequence& s = seqs[i];
        hold(*kv, s, s.n_tokens());
        batch.entries.push_back({&s, s.n_tokens() - s.n_computed, true});
      }
      const std::vector<KvCopy> copies = kv->take_pending_copies();
      std::vector<float> logits[2][2];
      for (int gr = 0; gr < 2; ++gr)
        for (int pe = 0; pe < 2; ++pe) {
          if (!copies.empty()) b[gr][pe]->copy_slots(copies);
          logits[gr][pe] = b[gr][pe]->logits(make_step(*b[gr][pe], batch, *kv));
          bytes[gr][pe] += b[gr][pe]->last_step_input_bytes();
        }
      for (int gr = 0; gr < 2; ++gr) {
        ASSERT_EQ(logits[gr][1].size(), logits[gr][0].size()) << what;
        EXPECT_TRUE(logits[gr][1] == logits[gr][0]) << what << ", graphs " << gr << ": rel error "
                                                    << testing::rel_error(logits[gr][1], logits[gr][0]);
      }
      EXPECT_LT(testing::rel_error(logits[1][1], logits[0][1]), 1e-2) << what << ": graphs against eager";
      for (size_t e = 0; e < batch.entries.size(); ++e) {
        Sequence& s = *batch.entries[e].seq;
        s.n_computed = s.n_tokens();
        const auto row = std::span(logits[0][0]).subspan(e * 1000, 1000);
        s.tokens.push_back(static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin()));
      }
    }
    std::printf("block size %d: mean H2D bytes a step, eager full %zu / persistent %zu, graphs full %zu / persistent %zu\n",
                block_size, bytes[0][0] / 40, bytes[0][1] / 40, bytes[1][0] / 40, bytes[1][1] / 40);
    EXPECT_LT(bytes[1][1], bytes[1][0]);
  }
}

using namespace enginetest;

RunResult run_engine_with(const EngineConfig& config, CudaBackendOptions o) {
  Engine engine(config, CudaBackend::random(model(), 5, o));
  std::vector<Request> reqs;
  for (int i = 0; i < 14; ++i) {
    Request r = make_request(i, 15 + 13 * i, 20 + i % 5);
    if (i % 3 == 1) {  // parallel samples: forked sequences, copy-on-write
      r.sampling.n = 2;
      r.sampling.temperature = 0.8f;
    }
    reqs.push_back(r);
  }
  return run_virtual(engine, at_zero(reqs));
}

class CudaBackendGpuBlockTablesEngine : public ::testing::TestWithParam<std::tuple<bool, PreemptMode>> {};

/// Whole engine runs under KV pressure: the same tokens with persistent tables as with the full
/// table each step.
TEST_P(CudaBackendGpuBlockTablesEngine, TokensIdenticalToFullTablePath) {
  SKIP_WITHOUT_GPU();
  const auto [graphs, preempt] = GetParam();
  EngineConfig c = paged_config(continuous_sched(8, 64, /*chunked=*/true, preempt), 480ll * 1024, 16);  // 480 slots: 30 blocks
  c.kv.max_model_len = 256;
  CudaBackendOptions o;
  o.cuda_graphs = graphs;
  o.persistent_block_tables = false;
  const RunResult want = run_engine_with(c, o);
  o.persistent_block_tables = true;
  const RunResult got = run_engine_with(c, o);
  EXPECT_GT(want.n_preemptions(), 0) << "the KV budget should force preemption";
  ASSERT_EQ(want.finished.size(), 14u);
  ASSERT_EQ(got.finished.size(), want.finished.size());
  for (const auto& [id, f] : want.finished) {
    EXPECT_EQ(f.reason, FinishReason::length) << "request " << id << ": " << f.error;
    EXPECT_EQ(got.at(id).outputs, f.outputs) << "request " << id;
  }
  EXPECT_EQ(got.steps.size(), want.steps.size());
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaBackendGpuBlockTablesEngine,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(PreemptMode::recompute, PreemptMode::swap)));

/// 256 sequences x 4k context (blocks of 16 and of 1): H2D bytes and decode step times, persistent tables
/// against the full table, CUDA graphs on and off. The four backends share the sequences and the
/// KV manager and run every step in turn (the order rotating), so they time the same work; two
/// rounds of 40 steps give the spread. Prints; asserts only the bytes. SERVELAB_GPU_BENCH=1 only.
TEST(CudaBackendGpuBench, BlockTableBytesAt256SequencesOf4k) {
  SKIP_WITHOUT_GPU();
  const char* on = std::getenv("SERVELAB_GPU_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set SERVELAB_GPU_BENCH=1";
  constexpr int kSeqs = 256, kContext = 4096, kWarm = 4, kSteps = 40, kRounds = 2;
  constexpr int kAll = kWarm + kRounds * kSteps;
  for (const int kBs : {16, 1}) {
    const int64_t n_slots = int64_t(kSeqs) * (kContext + kAll + 2 * kBs);
    struct Config {
      const char* tables;
      bool graphs, persistent;
      std::unique_ptr<CudaBackend> gpu;
      std::vector<double> ms[kRounds];
      size_t bytes = 0;
    };
    Config cfg[4] = {{"full", true, false, {}, {}, 0}, {"persistent", true, true, {}, {}, 0},
                     {"full", false, false, {}, {}, 0}, {"persistent", false, true, {}, {}, 0}};
    for (Config& c : cfg) {
      CudaBackendOptions o;
      o.cuda_graphs = c.graphs;
      o.persistent_block_tables = c.persistent;
      c.gpu = CudaBackend::random(model(), 3, o);
      c.gpu->init_kv(n_slots);
    }
    KvConfig kc;
    kc.kind = KvKind::paged;
    kc.block_size = kBs;
    kc.prefix_caching = false;
    kc.max_model_len = kContext + kAll + kBs;
    auto kv = make_kv_manager(kc, n_slots);
    std::vector<Sequence> seqs(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
      const int n = kContext - kBs + i % kBs;  // block boundaries on different steps
      seqs[i] = testing::make_sequence(i + 1, testing::random_tokens(n, 1000, 500 + i));
      seqs[i].sampling.max_tokens = kAll + 8;
      kv->allocate(seqs[i], n);
    }
    for (int first = 0; first < kSeqs; first += 16) {  // prefill 16 at a time, on every backend
      Batch b;
      for (int i = first; i < first + 16; ++i) b.entries.push_back({&seqs[i], seqs[i].n_tokens(), true});
      std::vector<TokenId> sampled;
      for (Config& c : cfg) sampled = run_batch(*c.gpu, b, *kv).tokens;
      for (int i = first; i < first + 16; ++i) {
        seqs[i].n_computed = seqs[i].n_tokens();
        seqs[i].tokens.push_back(sampled[i - first]);
      }
    }
    for (int step = 0; step < kAll; ++step) {
      Batch b;
      for (Sequence& s : seqs) {
        kv->grow(s, s.n_tokens());
        b.entries.push_back({&s, 1, true});
      }
      std::vector<TokenId> sampled;
      for (int k = 0; k < 4; ++k) {
        Config& c = cfg[(step + k) % 4];
        const auto t0 = std::chrono::steady_clock::now();
        const StepOutput r = run_batch(*c.gpu, b, *kv);
        const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (step >= kWarm) {  // past the warm-up and graph capture
          c.ms[(step - kWarm) / kSteps].push_back(dt);
          c.bytes += c.gpu->last_step_input_bytes();
        }
        if (&c == &cfg[2]) sampled = r.tokens;
      }
      for (int i = 0; i < kSeqs; ++i) {
        seqs[i].n_computed += 1;
        seqs[i].tokens.push_back(sampled[i]);
      }
    }
    std::printf("256 x 4k decode (%s; model %s, block %d; %d rounds of %d steps, the 4 configs in turn):\n",
                cuda_device_description(0).c_str(), model().name.c_str(), kBs, kRounds, kSteps);
    std::printf("%-11s %-7s %10s %22s %22s\n", "tables", "graphs", "H2D_bytes", "step_ms p50 (r1, r2)",
                "step_ms p10 (r1, r2)");
    for (Config& c : cfg) {
      double p50[kRounds], p10[kRounds];
      for (int r = 0; r < kRounds; ++r) {
        std::sort(c.ms[r].begin(), c.ms[r].end());
        p50[r] = c.ms[r][c.ms[r].size() / 2];
        p10[r] = c.ms[r][c.ms[r].size() / 10];
      }
      std::printf("%-11s %-7s %10zu %10.3f %10.3f  %10.3f %10.3f\n", c.tables, c.graphs ? "on" : "off",
                  c.bytes / (kRounds * kSteps), p50[0], p50[1], p10[0], p10[1]);
    }
    EXPECT_LT(cfg[1].bytes * 10, cfg[0].bytes);
    EXPECT_LT(cfg[3].bytes * 10, cfg[2].bytes);
  }
}

}  // namespace block_table_gpu_test
}  // namespace servelab
