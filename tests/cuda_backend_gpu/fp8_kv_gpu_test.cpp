// The cuda backend with `kv_cache_dtype: fp8` (kernels/kv_fp8.h) against the cpu backend's FP8 KV
// cache on the same weights: logits of prefill, chunked prefill and decode steps (graphs and
// eager) closer to the CPU's FP8-KV run than the bf16-KV GPU run is; greedy tokens agreeing except
// at near ties; the arena's bytes per slot and caps; a swap round trip keeping every code and
// scale. Skipped without a device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/model/weights.h"
#include "tests/backend/backend_test_util.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"

namespace servelab {
namespace fp8_kv_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::make_sequence;
using testing::random_tokens;
using testing::rel_error;

constexpr int64_t kSlots = 2048;
constexpr uint64_t kSeed = 29;

ModelConfig model() { return testing::gpu_test_model("gpu-fp8kv", 512); }

std::unique_ptr<CpuBackend> cpu_backend(KvCacheDType kv) {
  auto cpu = std::make_unique<CpuBackend>(ModelWeights::random(model(), kSeed),
                                          CpuBackendOptions{.n_threads = 4, .kv_cache_dtype = kv});
  cpu->init_kv(kSlots);
  return cpu;
}

std::unique_ptr<CudaBackend> gpu_backend(KvCacheDType kv, bool graphs = true, bool fusion = true) {
  CudaBackendOptions o;
  o.kv_cache_dtype = kv;
  o.cuda_graphs = graphs;
  o.fusion = fusion;
  auto gpu = CudaBackend::random(model(), kSeed, o);
  gpu->init_kv(kSlots);
  return gpu;
}

std::vector<float> logits_of(Backend& b, const Batch& batch, const KvManager& kv) {
  if (auto* cpu = dynamic_cast<CpuBackend*>(&b)) {
    const auto l = cpu->logits(make_step(*cpu, batch, kv));
    return std::vector<float>(l.begin(), l.end());
  }
  auto* gpu = dynamic_cast<CudaBackend*>(&b);
  return gpu->logits(make_step(*gpu, batch, kv));
}

TEST(Fp8KvGpu, ArenaSlotsAndCapsReportFp8) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto bf16 = gpu_backend(KvCacheDType::auto_dtype), fp8 = gpu_backend(KvCacheDType::fp8);
  const ModelConfig c = model();
  const KvCacheSpec s = fp8->kv_cache_spec();
  EXPECT_EQ(s.cache_dtype, KvCacheDType::fp8);
  EXPECT_EQ(s.scales, KvScaleLayout::per_token_head);
  // 2 KV heads x (64 codes + 4 bytes of scale), rounded to 16 bytes: 144 a (layer, K|V).
  EXPECT_EQ(fp8->kv_bytes_per_slot(), 2ll * c.n_layers * 144);
  EXPECT_EQ(bf16->kv_bytes_per_slot(), 2ll * c.n_layers * c.n_kv_heads * c.head_dim() * 2);
  EXPECT_GT(double(bf16->kv_bytes_per_slot()) / fp8->kv_bytes_per_slot(), 1.7) << "about twice the slots a byte";
  const BackendCaps caps = fp8->caps();
  EXPECT_NE(std::find(caps.kv_cache_dtypes.begin(), caps.kv_cache_dtypes.end(), KvCacheDType::fp8), caps.kv_cache_dtypes.end());
  CudaBackendOptions o;
  o.kv_cache_dtype = KvCacheDType::fp8;
  o.verify_rows_kernel = true;
  EXPECT_THROW(CudaBackend::random(model(), kSeed, o), std::invalid_argument);
}

/// A prefill of two prompts, a chunk over a cached prefix with a decode beside it, then decode
/// steps (graphs, then eagerly, and with fusion off): the FP8-KV GPU logits sit closer to the
/// CPU's FP8-KV run than the bf16-KV GPU logits do, and within a bound of it.
TEST(Fp8KvGpu, LogitsFollowTheCpuFp8KvReference) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (int mode = 0; mode < 3; ++mode) {
    const bool graphs = mode == 0, fusion = mode != 2;
    SCOPED_TRACE(mode == 0 ? "graphs" : mode == 1 ? "eager" : "fusion off");
    auto cpu8 = cpu_backend(KvCacheDType::fp8);
    auto gpu8 = gpu_backend(KvCacheDType::fp8, graphs, fusion), gpu16 = gpu_backend(KvCacheDType::auto_dtype, graphs, fusion);
    auto kv = testing::paged_test_kv(kSlots);
    Sequence a = make_sequence(1, random_tokens(97, 1000, 1));
    Sequence b = make_sequence(2, random_tokens(41, 1000, 2));
    for (Sequence* s : {&a, &b}) s->sampling.max_tokens = 32;
    double worst8 = 0, worst16 = 0;
    auto check = [&](const Batch& batch, const std::string& what) {
      const std::vector<float> ref = logits_of(*cpu8, batch, *kv);
      const std::vector<float> got8 = logits_of(*gpu8, batch, *kv), got16 = logits_of(*gpu16, batch, *kv);
      const double e8 = rel_error(got8, ref), e16 = rel_error(got16, ref);
      worst8 = std::max(worst8, e8);
      worst16 = std::max(worst16, e16);
      EXPECT_LT(e8, 5e-2) << what;
      EXPECT_LT(e8, e16) << what << ": the FP8-KV GPU run should follow the CPU's FP8 KV, not bf16 KV";
      return ref;
    };
    testing::hold_kv(*kv, a, 50);
    testing::hold_kv(*kv, b, 41);
    Batch first;
    first.entries = {{&a, 50, false}, {&b, 41, true}};
    check(first, "prefill of 91 rows");
    a.n_computed = 50;
    b.n_computed = 41;
    b.tokens.push_back(5);
    testing::hold_kv(*kv, a, 97);
    testing::hold_kv(*kv, b, 42);
    Batch second;
    second.entries = {{&a, 47, true}, {&b, 1, true}};
    std::vector<float> ref = check(second, "chunk over a cached prefix + a decode");
    for (int step = 0; step < 10; ++step) {
      Batch d;
      int e = 0;
      for (Sequence* s : {&a, &b}) {
        const auto row = std::span(ref).subspan(size_t(e++) * 1000, 1000);
        s->n_computed = s->n_tokens();
        s->tokens.push_back(static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin()));
        testing::hold_kv(*kv, *s, s->n_tokens());
        d.entries.push_back({s, 1, true});
      }
      ref = check(d, "decode step " + std::to_string(step));
    }
    std::printf("  %s: worst relative logit error against the cpu's fp8-KV run: fp8 KV %.4f, bf16 KV %.4f\n",
                mode == 0 ? "graphs" : mode == 1 ? "eager" : "fusion off", worst8, worst16);
  }
}

/// Greedy tokens (the backend's own draws, decode steps from graphs) equal the CPU FP8-KV run's
/// argmax except where its top-2 gap is within bf16 noise, teacher-forced with the CPU's token.
TEST(Fp8KvGpu, GreedyTokensAgreeWithTheCpuFp8KvRunExceptAtNearTies) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto cpu = cpu_backend(KvCacheDType::fp8);
  auto gpu = gpu_backend(KvCacheDType::fp8);
  auto kv = testing::paged_test_kv(kSlots);
  Sequence a = make_sequence(1, random_tokens(12, 1000, 9));
  a.sampling.max_tokens = 40;
  int agreed = 0;
  for (int step = 0; step < 24; ++step) {
    const int n_new = a.n_tokens() - a.n_computed;
    testing::hold_kv(*kv, a, a.n_tokens());
    Batch b;
    b.entries = {{&a, n_new, true}};
    const std::vector<float> ref = logits_of(*cpu, b, *kv);
    const StepOutput r = run_batch(*gpu, b, *kv);
    ASSERT_EQ(r.tokens.size(), 1u);
    std::vector<float> sorted = ref;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const TokenId cpu_token = static_cast<TokenId>(std::max_element(ref.begin(), ref.end()) - ref.begin());
    if (r.tokens[0] != cpu_token)
      EXPECT_LT(sorted[0] - sorted[1], 0.05f * std::max(1.0f, std::fabs(sorted[0]))) << "step " << step;
    else
      ++agreed;
    a.n_computed += n_new;
    a.tokens.push_back(cpu_token);
  }
  EXPECT_GE(agreed, 16) << "of 24";
  std::printf("  fp8 KV: %d of 24 greedy tokens agreed with the cpu's fp8-KV run\n", agreed);
}

/// The whole arena swapped out to the host pool, the arena cleared (init_kv), swapped back in: the
/// next step's logits are bit-identical (codes and scales made the round trip).
TEST(Fp8KvGpu, SwapRoundTripKeepsCodesAndScales) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = gpu_backend(KvCacheDType::fp8, false);
  auto kv = testing::paged_test_kv(kSlots);
  Sequence a = make_sequence(1, random_tokens(70, 1000, 4));
  a.sampling.max_tokens = 8;
  testing::hold_kv(*kv, a, 70);
  Batch p;
  p.entries = {{&a, 70, true}};
  (void)logits_of(*gpu, p, *kv);
  a.n_computed = 70;
  a.tokens.push_back(7);
  testing::hold_kv(*kv, a, 71);
  Batch d;
  d.entries = {{&a, 1, true}};
  const std::vector<float> before = logits_of(*gpu, d, *kv);
  std::unique_ptr<HostKvPool> pool = gpu->make_host_pool(kSlots);
  const KvSwap all{0, 0, kSlots};
  gpu->swap_out(std::span(&all, 1), *pool);
  gpu->init_kv(kSlots);  // a fresh, zeroed arena
  gpu->swap_in(std::span(&all, 1), *pool);
  EXPECT_EQ(logits_of(*gpu, d, *kv), before);
}

/// copy_slots on an FP8 arena (pages of 16 slots split by head, kernels/kv_fp8.h): a run of whole
/// pages (bytes) and runs that are not (slot by slot) both land every row and scale of each slot.
TEST(Fp8KvGpu, SlotCopiesLandWholeSlotsAlignedOrNot) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = gpu_backend(KvCacheDType::fp8, false);
  auto kv = testing::paged_test_kv(kSlots);
  Sequence a = make_sequence(1, random_tokens(70, 1000, 5));
  testing::hold_kv(*kv, a, 70);
  Batch p;
  p.entries = {{&a, 70, true}};
  (void)logits_of(*gpu, p, *kv);  // writes the 70 slots the sequence holds
  // Positions 0-15 fill the sequence's first block of 16: a page; 3-7 are 5 slots inside it.
  for (const auto& [pos, to, n] : {std::tuple{0, int64_t(1024), int64_t(16)}, std::tuple{3, int64_t(1501), int64_t(5)}}) {
    std::vector<int64_t> from_slots, to_slots;
    for (int64_t i = 0; i < n; ++i) {
      from_slots.push_back(kv->slot(a, pos + int(i)));
      to_slots.push_back(to + i);
    }
    SCOPED_TRACE("run " + std::to_string(from_slots.front()) + " -> " + std::to_string(to) + " x " + std::to_string(n));
    ASSERT_EQ(from_slots.back() - from_slots.front(), n - 1) << "a block's slots are one run";
    const KvCopy c{from_slots.front(), to, n};
    gpu->copy_slots(std::span(&c, 1));
    EXPECT_EQ(testing::read_slots(*gpu, to_slots), testing::read_slots(*gpu, from_slots));
  }
}

}  // namespace fp8_kv_gpu_test
}  // namespace servelab
