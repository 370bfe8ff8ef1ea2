// backend_spec(): every backend setting of a scenario reaches the BackendSpec (one place for
// `servelab run`, capacity/validate-sim and `servelab serve --scenario`).
#include "loadgen/backend_spec.h"

#include <gtest/gtest.h>

#include "engine/backend/cpu_backend.h"
#include "engine/model/weights.h"

namespace servelab {
namespace {

const char* kCuda = R"(
name: t
seed: 11
model: {preset: tiny, dtype: bf16}
backend: {kind: cuda, device: 3, fusion: off, batch_invariant: true, mixed_decodes: prefill, cuda_graphs: off,
          all_reduce: custom, all_reduce_max_bytes: 1048576}
engine: {gpu_memory_utilization: 0.8, max_model_len: 256}
strategies:
  - {batching: continuous, max_num_seqs: 12, max_num_batched_tokens: 640, kv: {kind: paged, block_size: 16}}
  - {batching: static, batch_size: 4, kv: {kind: naive, reserve: max}}
workload: {arrival: {process: poisson}, rates: [1], n_requests: 4, prompt_tokens: {dist: fixed, value: 8}, output_tokens: {dist: fixed, value: 4}}
)";

TEST(BackendSpec, CarriesEveryCudaSetting) {
  const Scenario sc = load_scenario_text(kCuda, "t.yaml");
  const BackendSpec spec = backend_spec(sc);
  EXPECT_EQ(spec.kind, BackendKind::cuda);
  EXPECT_EQ(spec.model, "tiny");
  EXPECT_EQ(spec.seed, 11u);
  EXPECT_EQ(spec.device, 3);
  EXPECT_FALSE(spec.fusion);
  EXPECT_TRUE(spec.batch_invariant);
  EXPECT_FALSE(spec.cuda_graphs);
  EXPECT_EQ(spec.mixed_decodes, cuda::MixedDecodes::prefill_kernel);
  EXPECT_EQ(spec.all_reduce, TpAllReduce::custom);
  EXPECT_EQ(spec.all_reduce_max_bytes, 1048576);
  ASSERT_TRUE(spec.dtype.has_value());
  EXPECT_EQ(*spec.dtype, DType::bf16);
}

TEST(BackendSpec, AllReduceDefaultsAndBadValuesNamed) {
  std::string text = kCuda;
  const std::string line = ",\n          all_reduce: custom, all_reduce_max_bytes: 1048576}";
  const size_t at = text.find(line);
  ASSERT_NE(at, std::string::npos);
  const BackendSpec plain = backend_spec(load_scenario_text(std::string(text).replace(at, line.size(), "}"), "t.yaml"));
  EXPECT_EQ(plain.all_reduce, TpAllReduce::auto_select);
  EXPECT_EQ(plain.all_reduce_max_bytes, kTpCustomAllReduceDefaultMaxBytes);
  for (const char* bad : {", all_reduce: fast}", ", all_reduce_max_bytes: 100}", ", all_reduce_max_bytes: 0}"}) {
    try {
      (void)load_scenario_text(std::string(text).replace(at, line.size(), bad), "t.yaml");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("backend.all_reduce"), std::string::npos) << bad << ": " << e.what();
    }
  }
}

TEST(BackendSpec, MixedDecodesDefaultAutoAndBadValuesNamed) {
  std::string text = kCuda;
  const std::string key = " mixed_decodes: prefill,";  // line 5
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(backend_spec(load_scenario_text(std::string(text).replace(at, key.size(), ""), "t.yaml")).mixed_decodes,
            cuda::MixedDecodes::auto_select);
  EXPECT_EQ(backend_spec(load_scenario_text(std::string(text).replace(at, key.size(), " mixed_decodes: decode,"), "t.yaml"))
                .mixed_decodes,
            cuda::MixedDecodes::decode_kernel);
  try {
    (void)load_scenario_text(std::string(text).replace(at, key.size(), " mixed_decodes: fast,"), "t.yaml");
    ADD_FAILURE() << "accepted mixed_decodes: fast";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backend.mixed_decodes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.yaml:5"), std::string::npos) << e.what();
  }
}

TEST(BackendSpec, StepSizesPerBatchingKind) {
  const Scenario sc = load_scenario_text(kCuda, "t.yaml");
  EXPECT_EQ(max_step_rows(sc, sc.strategies[0]), 640);
  EXPECT_EQ(max_step_seqs(sc.strategies[0]), 12);
  EXPECT_EQ(max_step_rows(sc, sc.strategies[1]), 4 * 256);  // a full batch of max_model_len prompts
  EXPECT_EQ(max_step_seqs(sc.strategies[1]), 4);
}

TEST(BackendSpec, KvBytesFixedOrFromGpuMemory) {
  Scenario sc = load_scenario_text(kCuda, "t.yaml");
  CpuBackend cpu(std::make_shared<const ModelWeights>(ModelWeights::random(preset("tiny"), 1)), {});
  // gpu_memory_utilization needs a cuda backend: a cpu one is refused by name, not sized silently.
  try {
    (void)kv_cache_bytes_for(sc, sc.strategies[0], cpu);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpu_memory_utilization"), std::string::npos) << e.what();
  }
  sc.engine.gpu_memory_utilization = 0.0;
  sc.engine.kv_cache_bytes = 12345678;
  EXPECT_EQ(kv_cache_bytes_for(sc, sc.strategies[0], cpu), 12345678);
}

}  // namespace
}  // namespace servelab
