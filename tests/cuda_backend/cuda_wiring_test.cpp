// `backend: cuda` in scenarios and make_backend: the knobs parse and are checked; on a machine
// without a GPU (CI) or a build without CUDA, asking for the cuda backend fails with a clear
// message, and `servelab run` exits 2.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "engine/backend/make_backend.h"
#include "loadgen/scenario.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cuda_backend/wiring_test_util.h"

namespace servelab {
namespace {

using wiringtest::errors_of;
using wiringtest::kRest;

TEST(CudaWiring, BackendKnobsParse) {
  const Scenario a = load_scenario_text("backend: cuda\n" + kRest, "t.yaml");
  EXPECT_EQ(a.backend.kind, BackendKind::cuda);
  EXPECT_TRUE(a.backend.fusion);
  EXPECT_TRUE(a.backend.cuda_graphs);
  const Scenario b = load_scenario_text(
      "backend: {kind: cuda, device: 1, fusion: false, batch_invariant: true, cuda_graphs: false}\n"
      "engine: {gpu_memory_utilization: 0.85}\n" + kRest, "t.yaml");
  EXPECT_EQ(b.backend.device, 1);
  EXPECT_FALSE(b.backend.fusion);
  EXPECT_TRUE(b.backend.batch_invariant);
  EXPECT_FALSE(b.backend.cuda_graphs);
  EXPECT_DOUBLE_EQ(b.engine.gpu_memory_utilization, 0.85);
}

TEST(CudaWiring, MisplacedOrBadKnobsNameTheKey) {
  EXPECT_NE(errors_of("backend: {kind: cpu, fusion: false}\n" + kRest).find("backend.fusion applies to kind: cuda, not cpu"),
            std::string::npos);
  EXPECT_NE(errors_of("backend: {kind: cuda, device: -1}\n" + kRest).find("backend.device must be >= 0"),
            std::string::npos);
  EXPECT_NE(errors_of("backend: cuda\nengine: {gpu_memory_utilization: 1.5}\n" + kRest).find("(0, 1]"),
            std::string::npos);
  EXPECT_NE(errors_of("backend: cuda\nengine: {gpu_memory_utilization: 0.9, kv_cache_mb: 64}\n" + kRest).find("not both"),
            std::string::npos);
  EXPECT_NE(errors_of("engine: {gpu_memory_utilization: 0.9}\n" + kRest).find("applies to backend cuda, not cpu"),
            std::string::npos);
  EXPECT_NE(errors_of("backend: gpu\n" + kRest).find("cuda"), std::string::npos);
}

TEST(CudaWiring, KvSlotIsBf16WithoutTouchingAGpu) {
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "llama2-7b";
  EXPECT_EQ(kv_bytes_per_slot(spec), 2ll * 32 * 4096 * 2);  // validation works on a machine without a GPU
  EXPECT_EQ(parse_backend_kind("cuda"), BackendKind::cuda);
  EXPECT_STREQ(to_string(BackendKind::cuda), "cuda");
}

TEST(CudaWiring, Fp8KvSlotIsCodesAndScalesPaddedTo16BytesWithoutTouchingAGpu) {
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "llama2-7b";
  spec.kv_cache_dtype = KvCacheDType::fp8;
  // 32 KV heads x (128 codes + a 4-byte scale): 4,224 bytes a layer's K or V, no padding.
  EXPECT_EQ(kv_bytes_per_slot(spec), 2ll * 32 * 32 * (128 + 4));
  spec.model = "tiny";  // 2 KV heads of 32: 64 codes + 8 bytes of scales, padded to 80
  EXPECT_EQ(kv_bytes_per_slot(spec), 2ll * 4 * 80);
  const KvCacheSpec s = cuda_kv_cache_spec(preset("tiny"), DType::bf16, KvCacheDType::fp8);
  EXPECT_EQ(s.arena_slot_bytes(), 80);
  EXPECT_EQ(s.bytes_per_slot(), 2ll * 4 * 80);
  EXPECT_EQ(KvCacheSpec::of(preset("tiny"), DType::bf16, 1, KvCacheDType::fp8).bytes_per_slot(), 2ll * 4 * 72)
      << "slot_align 1 (cpu, sim): no rounding";
  spec.tensor_parallel = 2;
  try {
    kv_bytes_per_slot(spec);
    FAIL() << "an FP8 KV cache with tensor_parallel 2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_parallel 1"), std::string::npos) << e.what();
  }
}

TEST(CudaWiring, WithoutADeviceMakeBackendIsAClearError) {
  if (cuda_devices() > 0) GTEST_SKIP() << "this machine has a GPU";
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "tiny";
  try {
    make_backend(spec);
    FAIL() << "make_backend(cuda) succeeded without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("backend cuda:"), std::string::npos) << e.what();
  }
}

TEST(CudaWiring, RunWithoutADeviceExitsTwo) {
  SERVELAB_REQUIRE_BINARY();
  if (cuda_devices() > 0) GTEST_SKIP() << "this machine has a GPU";
  cli_test::TempDir dir;
  const std::string yaml = dir.file("gpu.yaml");
  cli_test::write_text(yaml, "backend: cuda\n" + kRest);
  const cli_test::CliResult r = cli_test::run_servelab({"run", yaml, "--out", dir.file("out"), "--no-plots"}, dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("backend cuda:"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace servelab
