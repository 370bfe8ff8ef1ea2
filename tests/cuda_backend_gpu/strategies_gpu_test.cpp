// Batch-invariant mode end to end: the same requests through static, dynamic, continuous+naive
// and continuous+paged (chunked prefill) batching on the cuda backend give byte-identical greedy
// tokens, as on the CPU, in bf16 and in fp16. Skipped without a device.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cuda_backend_gpu/gpu_test_model.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

ModelConfig gpu_model() { return testing::gpu_test_model("gpu-strategies", 512); }

std::map<uint64_t, std::vector<std::vector<TokenId>>> run(const EngineConfig& config, DType dt) {
  CudaBackendOptions o;
  o.batch_invariant = true;
  o.dtype = dt;
  Engine engine(config, CudaBackend::random(gpu_model(), 5, o));
  std::vector<Request> reqs;
  for (int i = 0; i < 7; ++i) reqs.push_back(make_request(i, 17 + 11 * i, 12));
  const RunResult r = run_virtual(engine, at_zero(reqs));
  std::map<uint64_t, std::vector<std::vector<TokenId>>> out;
  for (const auto& [id, f] : r.finished) {
    EXPECT_EQ(f.reason, FinishReason::length) << "request " << id << ": " << f.error;
    out[id] = f.outputs;
  }
  return out;
}

class CudaBackendGpuStrategies : public ::testing::TestWithParam<DType> {};

TEST_P(CudaBackendGpuStrategies, BatchInvariantGivesIdenticalTokensAcrossStrategies) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const DType dt = GetParam();
  constexpr int64_t kBytes = 8192ll * 2 * 2 * 128 * 2;  // 8192 slots of 16-bit K and V, 2 layers
  EngineConfig paged = paged_config(continuous_sched(4, 48, /*chunked=*/true), kBytes);
  paged.kv.max_model_len = 256;
  EngineConfig naive = paged_config(continuous_sched(8, 512, false), kBytes);
  naive.kv.kind = KvKind::naive;
  naive.kv.max_model_len = 256;
  EngineConfig stat = naive;
  stat.sched = static_sched(3, 0.0);
  EngineConfig dyn = naive;
  dyn.sched = dynamic_sched(5, 0.0);
  const auto want = run(paged, dt);
  ASSERT_EQ(want.size(), 7u);
  // A digest of every token, printed so two trees' runs can be compared (scripts/gpu-compare.sh).
  uint64_t digest = 1469598103934665603ull;
  for (const auto& [id, outputs] : want)
    for (const auto& sample : outputs)
      for (TokenId t : sample) digest = (digest ^ uint64_t(uint32_t(t))) * 1099511628211ull;
  std::printf("TOKENS %s %016llx\n", to_string(dt), static_cast<unsigned long long>(digest));
  for (const auto* c : {&naive, &stat, &dyn}) {
    const auto got = run(*c, dt);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, outputs] : want) EXPECT_EQ(got.at(id), outputs) << "request " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBackendGpuStrategies, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(to_string(i.param)); });

}  // namespace
}  // namespace servelab
