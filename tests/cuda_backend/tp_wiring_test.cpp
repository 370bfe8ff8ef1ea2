// `backend.tensor_parallel` in scenarios and make_backend with tensor_parallel > 1 on the cuda
// backend: the knob parses and is checked against the model's shards; the KV slot is one GPU's
// share; on a machine without the GPUs (CI), without NCCL or without CUDA, asking for it fails
// with a clear message and `servelab run` exits 2.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/profiler.h"
#include "loadgen/backend_spec.h"
#include "loadgen/scenario.h"
#include "tests/cli/cli_test_util.h"

namespace servelab {
namespace tp_wiring_test {  // named, not anonymous: a unity batch shares one translation unit

const std::string kRest =
    "strategies: [{batching: continuous}]\n"
    "workload: {arrival: {process: poisson}, rates: [2], n_requests: 4}\n";

std::string errors_of(const std::string& yaml) {
  try {
    load_scenario_text(yaml, "t.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(TpWiring, TensorParallelParsesIntoTheSpec) {
  const Scenario a = load_scenario_text("backend: {kind: cuda, tensor_parallel: 2}\nmodel: {preset: llama2-13b}\n" + kRest,
                                        "t.yaml");
  EXPECT_EQ(a.backend.tensor_parallel, 2);
  EXPECT_EQ(backend_spec(a).tensor_parallel, 2);
  const Scenario b = load_scenario_text("backend: cuda\nmodel: {preset: tiny}\n" + kRest, "t.yaml");
  EXPECT_EQ(b.backend.tensor_parallel, 1);
  EXPECT_EQ(backend_spec(b).tensor_parallel, 1);
  const Scenario c = load_scenario_text("backend: {kind: sim, tensor_parallel: 2}\nmodel: {preset: tiny}\n" + kRest,
                                        "t.yaml");
  EXPECT_EQ(backend_spec(c).tensor_parallel, 2);
}

TEST(TpWiring, BadTensorParallelNamesTheKey) {
  EXPECT_TRUE(has(errors_of("backend: {kind: cpu, tensor_parallel: 2}\nmodel: {preset: tiny}\n" + kRest),
                  "backend.tensor_parallel applies to kind: cuda or sim, not cpu"));
  EXPECT_TRUE(has(errors_of("backend: {kind: cuda, tensor_parallel: 0}\nmodel: {preset: tiny}\n" + kRest),
                  "backend.tensor_parallel must be in [1, 64]"));
  const std::string e = errors_of("backend: {kind: cuda, tensor_parallel: 4}\nmodel: {preset: tiny}\n" + kRest);
  EXPECT_TRUE(has(e, "backend.tensor_parallel")) << e;
  EXPECT_TRUE(has(e, "does not divide the model's 2 KV heads")) << e;
  EXPECT_TRUE(has(errors_of("backend: {kind: cuda, tensor_parallel: 3}\nmodel: {preset: llama2-13b}\n" + kRest),
                  "does not divide the model's 40 attention heads"));
  EXPECT_TRUE(has(errors_of("backend: {kind: sim, tensor_parallel: 2}\nmodel: {preset: llama2-13b}\n"
                            "capacity: {rate_lo: 1, tensor_parallel: 4}\n" + kRest),
                  "backend.tensor_parallel conflicts with capacity.tensor_parallel (4)"));
  EXPECT_EQ(errors_of("backend: {kind: sim, tensor_parallel: 4}\nmodel: {preset: llama2-13b}\n"
                      "capacity: {rate_lo: 1, tensor_parallel: 4}\n" + kRest), "");
}

TEST(TpWiring, AllReduceParsesIntoTheSpecAndIsCudaOnly) {
  const Scenario a = load_scenario_text(
      "backend: {kind: cuda, tensor_parallel: 2, all_reduce: nccl, all_reduce_max_bytes: 65536}\n"
      "model: {preset: llama2-13b}\n" + kRest, "t.yaml");
  EXPECT_EQ(backend_spec(a).all_reduce, TpAllReduce::nccl);
  EXPECT_EQ(backend_spec(a).all_reduce_max_bytes, 65536);
  EXPECT_TRUE(has(errors_of("backend: {kind: sim, all_reduce: custom}\nmodel: {preset: tiny}\n" + kRest),
                  "backend.all_reduce applies to kind: cuda, not sim"));
  EXPECT_TRUE(has(errors_of("backend: {kind: cuda, all_reduce: ours}\nmodel: {preset: tiny}\n" + kRest),
                  "backend.all_reduce"));
  EXPECT_TRUE(has(errors_of("backend: {kind: cuda, all_reduce_max_bytes: 1000}\nmodel: {preset: tiny}\n" + kRest),
                  "backend.all_reduce_max_bytes must be a multiple of 16"));
  EXPECT_EQ(parse_tp_all_reduce("auto"), TpAllReduce::auto_select);
  EXPECT_STREQ(to_string(TpAllReduce::custom), "custom");
  EXPECT_THROW(parse_tp_all_reduce("fast"), std::invalid_argument);
}

#ifdef SERVELAB_HAVE_CUDA_BACKEND
TEST(TpWiring, CudaOptionsCheckTheAllReduce) {
  CudaBackendOptions o;
  EXPECT_EQ(o.tp_all_reduce, TpAllReduce::auto_select);
  EXPECT_EQ(o.tp_all_reduce_max_bytes, kTpCustomAllReduceDefaultMaxBytes);
  EXPECT_NO_THROW(o.validate());
  o.tp_all_reduce_max_bytes = 24;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.tp_all_reduce_max_bytes = kTpCustomAllReduceDefaultMaxBytes;
  o.tp_spin_us = -1;
  try {
    o.validate();
    FAIL() << "a negative tp_spin_us accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "tp_spin_us must be >= 0")) << e.what();
  }
  o.tp_spin_us = 0;
  EXPECT_NO_THROW(o.validate()) << "0: blocking hand-offs";
  o.tp_all_reduce_max_bytes = 1 << 20;
  o.tp_all_reduce = TpAllReduce::custom;
  o.dtype = DType::f16;
  try {
    o.validate();
    FAIL() << "custom with f16 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "all_reduce: custom sums bf16 only")) << e.what();
  }
}
#endif

#ifdef SERVELAB_HAVE_CUDA_BACKEND
// The diagnostic overrides (SERVELAB_TP_*, read when the backend is made): a value that is not a
// whole number in range is refused before any GPU is touched, the error naming the variable.
TEST(TpWiring, BadTpEnvironmentOverrideNamesTheVariable) {
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "llama3-8b";
  spec.tensor_parallel = 2;
  for (const char* bad : {"2", "yes", "1x"}) {
    ::setenv("SERVELAB_TP_FUSE", bad, 1);
    try {
      make_backend(spec);
      ADD_FAILURE() << "SERVELAB_TP_FUSE=" << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_TRUE(has(e.what(), std::string("SERVELAB_TP_FUSE=") + bad)) << e.what();
      EXPECT_TRUE(has(e.what(), "[0, 1]")) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not the override's error: " << e.what();
    }
  }
  ::unsetenv("SERVELAB_TP_FUSE");
}
#endif

TEST(TpWiring, KvSlotIsOneGpusShare) {
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "llama2-13b";
  const int64_t one = kv_bytes_per_slot(spec);
  EXPECT_EQ(one, 2ll * 40 * 5120 * 2);
  spec.tensor_parallel = 2;
  EXPECT_EQ(kv_bytes_per_slot(spec), one / 2);
  spec.tensor_parallel = 3;
  EXPECT_THROW(kv_bytes_per_slot(spec), std::invalid_argument);
}

TEST(TpWiring, WithoutTheGpusIsAClearError) {
  if (cuda_devices() >= 2) GTEST_SKIP() << "this machine has 2 GPUs";
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = "llama3-8b";
  spec.tensor_parallel = 2;
  try {
    make_backend(spec);
    FAIL() << "make_backend(cuda, tensor_parallel 2) succeeded without 2 GPUs";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(has(m, "backend cuda:")) << m;
    EXPECT_TRUE(has(m, "needs 2 CUDA devices") || has(m, "needs NCCL") || has(m, "built without CUDA")) << m;
  }
}

TEST(TpWiring, RunWithoutTheGpusExitsTwo) {
  SERVELAB_REQUIRE_BINARY();
  if (cuda_devices() >= 2) GTEST_SKIP() << "this machine has 2 GPUs";
  cli_test::TempDir dir;
  const std::string yaml = dir.file("tp.yaml");
  cli_test::write_text(yaml, "backend: {kind: cuda, tensor_parallel: 2}\nmodel: {preset: tiny}\n" + kRest);
  const cli_test::CliResult r = cli_test::run_servelab({"run", yaml, "--out", dir.file("out"), "--no-plots"}, dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "backend cuda:")) << r.output;
}

TEST(TpWiring, ProfileJsonCarriesTheMeasuredAllReduce) {
  ProfileReport r;
  r.backend = "cuda";
  r.model = preset("tiny");
  r.tensor_parallel = 2;
  nlohmann::json none = nlohmann::json::parse(profile_json(r));
  EXPECT_EQ(none["tensor_parallel"], 2);
  EXPECT_FALSE(none.contains("all_reduce"));
  r.all_reduce_s = {{512, 8e-6}, {1 << 20, 3e-5}};
  const nlohmann::json j = nlohmann::json::parse(profile_json(r));
  ASSERT_EQ(j["all_reduce"].size(), 2u);
  EXPECT_EQ(j["all_reduce"][1]["bytes"], 1 << 20);
  EXPECT_DOUBLE_EQ(j["all_reduce"][1]["seconds"].get<double>(), 3e-5);
}

TEST(TpWiring, MeasureAllReduceIsEmptyOffTensorParallel) {
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "tiny";
  spec.tensor_parallel = 2;
  auto sim = make_backend(spec);
  EXPECT_TRUE(sim->time_all_reduce({1024, 2048}).empty());
  EXPECT_EQ(sim->caps().tensor_parallel, 2);  // the sim prices TP; it has no ranks to time
}

TEST(TpWiring, ProfileTensorParallelOnCpuExitsTwo) {
  SERVELAB_REQUIRE_BINARY();
  cli_test::TempDir dir;
  const cli_test::CliResult r = cli_test::run_servelab({"profile", "--backend", "cpu", "--tensor-parallel", "2"}, dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--tensor-parallel applies to --backend cuda or sim")) << r.output;
}

}  // namespace tp_wiring_test
}  // namespace servelab
