// `backend.dtype: bf16 | f16` (issue 7: "fp16 as an option") without a GPU: the key parses and is
// checked with file:line, it reaches the BackendSpec and CudaBackendOptions, K/V stay 2 bytes an
// element on cuda and sim for both, the cpu backend refuses it, and `servelab run --dtype` obeys
// the same rules.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "engine/backend/make_backend.h"
#include "loadgen/backend_spec.h"
#include "loadgen/scenario.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cuda_backend/wiring_test_util.h"
#ifdef SERVELAB_HAVE_CUDA_BACKEND
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace servelab {
namespace {

using wiringtest::errors_of;
using wiringtest::kRest;

// What refusing f16 on a machine without a GPU says: a cuda build with -DSERVELAB_KERNELS_FP16=OFF
// refuses the dtype itself, before looking for a device; otherwise the backend names the device.
#if defined(SERVELAB_HAVE_CUDA_BACKEND) && !defined(SERVELAB_KERNELS_FP16)
constexpr bool kFp16Kernels = false;
constexpr const char* kF16Refusal = "built without the fp16 kernels";
#else
constexpr bool kFp16Kernels = true;
constexpr const char* kF16Refusal = "backend cuda:";
#endif

TEST(DtypeWiring, BackendDtypeParsesAndDefaultsToBf16) {
  EXPECT_EQ(load_scenario_text("backend: cuda\n" + kRest, "t.yaml").backend.dtype, DType::bf16);
  EXPECT_EQ(load_scenario_text("backend: {kind: cuda, dtype: f16}\n" + kRest, "t.yaml").backend.dtype, DType::f16);
  EXPECT_EQ(load_scenario_text("backend: {kind: cuda, dtype: float16}\n" + kRest, "t.yaml").backend.dtype, DType::f16);
  EXPECT_EQ(load_scenario_text("backend: {kind: cuda, dtype: bf16}\n" + kRest, "t.yaml").backend.dtype, DType::bf16);
  // The sim accepts it, so a cuda scenario switched to the sim runs unchanged.
  EXPECT_EQ(load_scenario_text("backend: {kind: sim, dtype: f16}\n" + kRest, "t.yaml").backend.dtype, DType::f16);
}

TEST(DtypeWiring, BadOrMisplacedDtypeNamesTheKeyAndLine) {
  const std::string f32 = errors_of("name: t\nbackend: {kind: cuda, dtype: f32}\n" + kRest);
  EXPECT_NE(f32.find("t.yaml:2:"), std::string::npos) << f32;
  EXPECT_NE(f32.find("backend.dtype must be one of"), std::string::npos) << f32;
  EXPECT_NE(f32.find("(got 'f32')"), std::string::npos) << f32;
  const std::string fp8 = errors_of("backend:\n  kind: cuda\n  dtype: fp8\n" + kRest);
  EXPECT_NE(fp8.find("t.yaml:3:"), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("backend.dtype must be one of"), std::string::npos) << fp8;
  const std::string cpu = errors_of("backend: {kind: cpu, dtype: f16}\n" + kRest);
  EXPECT_NE(cpu.find("backend.dtype applies to kind: cuda or sim, not cpu"), std::string::npos) << cpu;
  const std::string list = errors_of("backend: {kind: cuda, dtype: [f16]}\n" + kRest);
  EXPECT_NE(list.find("backend.dtype"), std::string::npos) << list;
}

TEST(DtypeWiring, ScenarioReachesTheSpecApartFromModelDtype) {
  const Scenario sc =
      load_scenario_text("model: {preset: tiny, dtype: f32}\nbackend: {kind: cuda, dtype: f16}\n"
                         "strategies: [{batching: continuous}]\n"
                         "workload: {arrival: {process: poisson}, rates: [2], n_requests: 4}\n",
                         "t.yaml");
  const BackendSpec spec = backend_spec(sc);
  EXPECT_EQ(spec.storage_dtype, DType::f16);  // storage of weights, activations and KV
  ASSERT_TRUE(spec.dtype.has_value());
  EXPECT_EQ(*spec.dtype, DType::f32);  // rounding of the preset's random weights only
  EXPECT_EQ(backend_spec(load_scenario_text("backend: cuda\n" + kRest, "t.yaml")).storage_dtype, DType::bf16);
}

TEST(DtypeWiring, SpecValidateNamesTheField) {
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.storage_dtype = DType::f32;
  try {
    spec.validate();
    FAIL() << "f32 storage accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dtype must be bf16 or f16 (got f32)"), std::string::npos) << e.what();
  }
  spec.kind = BackendKind::cpu;
  spec.storage_dtype = DType::f16;
  try {
    spec.validate();
    FAIL() << "f16 accepted on the cpu backend";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu backend computes"), std::string::npos) << e.what();
  }
  spec.kind = BackendKind::sim;
  EXPECT_NO_THROW(spec.validate());
  spec.kind = BackendKind::cuda;
  EXPECT_NO_THROW(spec.validate());
}

TEST(DtypeWiring, KvSlotIsTwoBytesAnElementForBothOnCudaAndSim) {
  const ModelConfig c = preset("llama2-7b");
  const int64_t two_bytes = 2ll * c.n_layers * c.kv_dim() * 2;
  for (BackendKind kind : {BackendKind::cuda, BackendKind::sim})
    for (DType dt : {DType::bf16, DType::f16}) {
      BackendSpec spec;
      spec.kind = kind;
      spec.model = "llama2-7b";
      spec.storage_dtype = dt;
      EXPECT_EQ(kv_bytes_per_slot(spec), two_bytes) << to_string(kind) << " " << to_string(dt);
      spec.tensor_parallel = 2;  // a rank's half of the KV heads
      EXPECT_EQ(kv_bytes_per_slot(spec), two_bytes / 2) << to_string(kind) << " " << to_string(dt);
    }
  BackendSpec sim;
  sim.kind = BackendKind::sim;
  sim.model = "tiny";
  sim.storage_dtype = DType::f16;
  EXPECT_EQ(make_backend(sim)->kv_bytes_per_slot(), 2ll * preset("tiny").n_layers * preset("tiny").kv_dim() * 2);
}

#ifdef SERVELAB_HAVE_CUDA_BACKEND
TEST(DtypeWiring, CudaOptionsAcceptBf16AndF16Only) {
  CudaBackendOptions o;
  EXPECT_EQ(o.dtype, DType::bf16);
  o.dtype = DType::f16;
  if (kFp16Kernels) EXPECT_NO_THROW(o.validate());  // the fp16 kernels are built by default
  else EXPECT_THROW(o.validate(), std::invalid_argument);
  o.dtype = DType::f32;
  try {
    o.validate();
    FAIL() << "f32 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dtype must be bf16 or f16"), std::string::npos) << e.what();
  }
}
#endif

TEST(DtypeWiring, WithoutADeviceF16IsTheSameClearError) {
  if (cuda_devices() > 0) GTEST_SKIP() << "this machine has a GPU";
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "tiny";
  spec.storage_dtype = DType::f16;
  try {
    make_backend(spec);
    FAIL() << "make_backend(cuda, f16) succeeded without a GPU";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(kF16Refusal), std::string::npos) << e.what();
  }
}

TEST(DtypeWiring, RunDtypeFlagIsCheckedAndRefusedOnCpu) {
  SERVELAB_REQUIRE_BINARY();
  cli_test::TempDir dir;
  const std::string cpu = dir.file("cpu.yaml");
  cli_test::write_text(cpu, kRest);
  const cli_test::CliResult on_cpu = cli_test::run_servelab({"run", cpu, "--out", dir.file("a"), "--dtype", "f16"}, dir);
  EXPECT_EQ(on_cpu.code, 2) << on_cpu.output;
  EXPECT_NE(on_cpu.output.find("--dtype applies to backend cuda or sim"), std::string::npos) << on_cpu.output;
  const std::string gpu = dir.file("gpu.yaml");
  cli_test::write_text(gpu, "backend: cuda\n" + kRest);
  const cli_test::CliResult f32 = cli_test::run_servelab({"run", gpu, "--out", dir.file("b"), "--dtype", "f32"}, dir);
  EXPECT_EQ(f32.code, 2) << f32.output;
  EXPECT_NE(f32.output.find("--dtype"), std::string::npos) << f32.output;
  if (cuda_devices() > 0) return;  // the rest needs a machine without a GPU
  const cli_test::CliResult f16 =
      cli_test::run_servelab({"run", gpu, "--out", dir.file("c"), "--dtype", "f16", "--no-plots"}, dir);
  EXPECT_EQ(f16.code, 2) << f16.output;
  EXPECT_NE(f16.output.find(kF16Refusal), std::string::npos) << f16.output;
}

}  // namespace
}  // namespace servelab
