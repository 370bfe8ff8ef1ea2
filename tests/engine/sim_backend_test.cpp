// The sim backend: K/V sizing, roofline figures against hand-computed ones, the fitted linear
// model, profile files, and its deterministic tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <cmath>

#include <nlohmann/json.hpp>

#include "tests/engine/step_shapes.h"
#include "engine/backend/step_input.h"
#include "engine/backend/hardware.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/kv/kv_manager.h"
#include "tests/engine/engine_test_support.h"
#include "tests/engine/profile_fixture.h"

namespace servelab {
namespace {

using test_shapes::decode_shape;
using test_shapes::prefill_shape;

using namespace enginetest;
using namespace profile_fixture;

TEST(SimBackend, KvBytesPerSlotFollowTheModel) {
  SimBackend b(preset("llama2-7b"), SimCostModel::roofline(SimDevice::preset("h100")));
  EXPECT_EQ(b.kv_bytes_per_slot(), 512 * 1024);  // 2 × 32 layers × 4096 × bf16
  SimBackend g(preset("llama3-8b"), SimCostModel::roofline(SimDevice::preset("h100")));
  EXPECT_EQ(g.kv_bytes_per_slot(), 128 * 1024);  // GQA: 8 KV heads
  SimBackend c(preset("llama3-8b"), SimCostModel::roofline(SimDevice::preset("cpu-2core")));
  EXPECT_EQ(c.kv_bytes_per_slot(), 256 * 1024);  // fp32 K/V
}

// The engine sizes its arena as kv_cache_bytes / the backend's slot, so the sim holds as many
// slots as the backend it stands in for (and fills, and preempts, at the same load) only if its
// slot is that backend's: a GPU device's is the cuda backend's (an FP8 cache's codes and scales
// padded to 16 bytes a layer's K or V), an fp32 device's the cpu backend's.
TEST(SimBackend, KvSlotIsTheRealBackendsSlot) {
  for (const char* model : {"tiny", "qwen2.5-0.5b", "llama2-7b", "llama3-8b"}) {
    for (const KvCacheDType kv : {KvCacheDType::auto_dtype, KvCacheDType::fp8}) {
      for (const bool gpu : {true, false}) {
        SimCostModel cost = SimCostModel::roofline(SimDevice::preset(gpu ? "h200" : "cpu-2core"));
        cost.formats.kv_cache_dtype = kv;
        const SimBackend sim(preset(model), cost);
        BackendSpec real;
        real.kind = gpu ? BackendKind::cuda : BackendKind::cpu;
        real.model = model;
        real.kv_cache_dtype = kv;
        EXPECT_EQ(sim.kv_bytes_per_slot(), kv_bytes_per_slot(real))
            << model << (gpu ? " cuda " : " cpu ") << to_string(kv);
      }
    }
  }
  // tiny's 2 KV heads of 32 in FP8: 2 × 36 bytes a layer's K or V, padded to 80 on a GPU.
  SimCostModel fp8 = SimCostModel::roofline(SimDevice::preset("h100"));
  fp8.formats.kv_cache_dtype = KvCacheDType::fp8;
  EXPECT_EQ(SimBackend(preset("tiny"), fp8).kv_bytes_per_slot(), 2 * 4 * 80);
  // With tensor parallelism the arena is one GPU's: its share of the KV heads.
  BackendSpec tp2;
  tp2.kind = BackendKind::cuda;
  tp2.model = "llama2-13b";
  tp2.tensor_parallel = 2;
  EXPECT_EQ(SimBackend(preset("llama2-13b"), SimCostModel::roofline(SimDevice::preset("h200"), 2)).kv_bytes_per_slot(),
            kv_bytes_per_slot(tp2));
}

TEST(SimCostModel, DecodeIsMemoryBoundAndLongPrefillComputeBound) {
  const ModelConfig m = preset("llama2-7b");
  const SimDevice h100 = SimDevice::preset("h100");
  const SimCostModel cost = SimCostModel::roofline(h100);
  // Batch-1 decode at context 512: ~13.5 GB of bf16 weights over 3.35 TB/s, plus a little KV.
  StepShape decode;
  decode.n_tokens = 1;
  decode.n_sampled = 1;
  decode.sum_context = 512;
  decode.attention_pairs = 512;
  const double weights_s = 2.0 * m.n_params() / h100.mem_bw_bytes_s;
  const double t = cost.step_seconds(m, decode) - h100.step_overhead_s;
  EXPECT_GT(t, weights_s * 0.95);
  EXPECT_LT(t, weights_s * 1.1);
  // Prefill of 4096 tokens: ~2·P FLOPs a token dominate the same weight read.
  StepShape prefill;
  prefill.n_tokens = 4096;
  prefill.n_sampled = 1;
  prefill.sum_context = 4096;
  prefill.attention_pairs = 4096.0 * 4097.0 / 2.0;
  const double flops_s = 2.0 * 6.5e9 * 4096 / h100.peak_flops;
  const double tp = cost.step_seconds(m, prefill);
  EXPECT_GT(tp, flops_s);
  EXPECT_LT(tp, 2.0 * flops_s);
  // H200 has more bandwidth: decode gets faster, the compute-bound prefill barely moves.
  const SimCostModel h200 = SimCostModel::roofline(SimDevice::preset("h200"));
  EXPECT_LT(h200.step_seconds(m, decode), 0.8 * cost.step_seconds(m, decode));
  EXPECT_NEAR(h200.step_seconds(m, prefill), tp, 0.02 * tp);
}

TEST(SimCostModel, PaddingCostsCompute) {
  const ModelConfig m = preset("llama2-7b");
  const SimCostModel cost = SimCostModel::roofline(SimDevice::preset("h100"));
  StepShape s;
  s.n_tokens = 2048;
  s.n_sampled = 8;
  s.sum_context = 2048;
  s.attention_pairs = 2048 * 256;
  StepShape padded = s;
  padded.n_padding_tokens = 2048;
  EXPECT_GT(cost.step_seconds(m, padded), 1.8 * cost.step_seconds(m, s) - 1e-3);
}

TEST(ProfiledStepModel, ReproducesASyntheticProfileExactlyAtItsGridPoints) {
  const std::vector<TimedStep> steps = synthetic_profile();
  const ProfiledStepModel m = ProfiledStepModel::fit(steps);
  for (const TimedStep& t : steps) {
    EXPECT_TRUE(m.inside(t.shape));
    EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-9 * t.step_s) << t.shape.n_rows() << " rows";
  }
  EXPECT_NEAR(m.s_per_sampled(), 5e-4, 1e-9);
  EXPECT_NEAR(m.s_per_prefill_pair(), 2e-8, 1e-13);
  EXPECT_NEAR(m.s_per_decode_context(), 7e-7, 1e-12);
  // Between grid rows the matrix term is interpolated linearly.
  StepShape mid = decode_shape(12, 128);
  const double lo = 0.004 + 2e-4 * 8 + 3e-3 * std::sqrt(8.0), hi = 0.004 + 2e-4 * 16 + 3e-3 * std::sqrt(16.0);
  EXPECT_NEAR(m.predict_clamped(mid), 0.5 * (lo + hi) + 5e-4 * 12 + 7e-7 * 12 * 128, 1e-9);
}

/// `real` sequences decoding at `context` plus `padding` rows (static batching's finished slots).
StepShape padded_decode_shape(int real, int padding, int context) {
  StepShape s = decode_shape(real, context);
  s.n_padding_tokens = padding;
  s.attention_pairs += double(padding) * context;
  return s;
}

TEST(ProfiledStepModel, PaddedDecodesArePricedByTheirOwnRowFunction) {
  // Padded decodes cost 1.5x the matrix term of unpadded steps of the same rows, plus 1 ms (a
  // backend that runs them another way: eagerly, outside its graphs); the scalar terms are shared.
  auto matrix = [](double rows) { return 0.004 + 2e-4 * rows + 3e-3 * std::sqrt(rows); };
  auto padded_matrix = [&](double rows) { return 1.5 * matrix(rows) + 0.001; };
  auto scalars = [](const StepShape& s) { return 5e-4 * s.n_sampled + 2e-8 * s.prefill_pairs + 7e-7 * s.decode_context; };
  std::vector<TimedStep> steps = synthetic_profile();
  for (int b : {2, 4, 8, 16}) {
    const StepShape s = padded_decode_shape((b + 1) / 2, b - (b + 1) / 2, 128);
    ASSERT_TRUE(s.padded_decode());
    steps.push_back({s, padded_matrix(b) + scalars(s)});
  }
  const ProfiledStepModel m = ProfiledStepModel::fit(steps);
  EXPECT_EQ(m.padded_knots(), (std::vector<double>{2, 4, 8, 16}));
  for (const TimedStep& t : steps)
    EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-9 * t.step_s)
        << t.shape.n_rows() << " rows, " << t.shape.n_padding_tokens << " padding";
  EXPECT_NEAR(m.s_per_sampled(), 5e-4, 1e-9);
  EXPECT_NEAR(m.s_per_decode_context(), 7e-7, 1e-12);
  // Between padded knots: P interpolated, the sampled rows and context priced by the shared terms.
  const StepShape mid = padded_decode_shape(3, 9, 200);
  EXPECT_NEAR(m.predict_clamped(mid), 0.5 * (padded_matrix(8) + padded_matrix(16)) + scalars(mid), 1e-9);
  // An unpadded decode of the same rows is still priced by M.
  const StepShape plain = decode_shape(12, 200);
  EXPECT_NEAR(m.predict_clamped(plain), 0.5 * (matrix(8) + matrix(16)) + scalars(plain), 1e-9);
  // A padded prefill (static's padded prompts) is not a padded decode: M prices it.
  StepShape prefill = prefill_shape(64, 0);
  prefill.n_padding_tokens = 64;
  EXPECT_FALSE(prefill.padded_decode());
  EXPECT_NEAR(m.predict_clamped(prefill), matrix(128) + scalars(prefill), 1e-9);
  // Padded rows beyond P's knots fall back to M.
  const StepShape wide = padded_decode_shape(2, 30, 128);
  EXPECT_NEAR(m.predict_clamped(wide), matrix(32) + scalars(wide), 1e-9);
}

TEST(ProfiledStepModel, WithoutPaddedSamplesPaddedDecodesUseTheRowFunction) {
  const ProfiledStepModel m = ProfiledStepModel::fit(synthetic_profile());
  EXPECT_TRUE(m.padded_knots().empty());
  const StepShape padded = padded_decode_shape(3, 5, 128), plain = decode_shape(8, 128);
  // 8 rows either way; the padded step samples 3 rows and reads 3 contexts, not 8.
  EXPECT_NEAR(m.predict_clamped(plain) - m.predict_clamped(padded), 5 * (5e-4 + 7e-7 * 128), 1e-9);
  std::vector<TimedStep> only_padded = {{padded, 0.01}};
  EXPECT_THROW(ProfiledStepModel::fit(only_padded), std::invalid_argument);
}

TEST(ProfiledStepModel, GraphedDecodesArePricedByTheBucketTheyRunAs) {
  // A backend that replays a decode of B sequences as the graph of the smallest bucket >= B: its
  // decodes cost a staircase in B plus their attention; its prefills run eagerly.
  const std::vector<int> buckets = {1, 2, 4, 8, 16, 24, 32};
  auto bucket = [&](int b) { return *std::lower_bound(buckets.begin(), buckets.end(), b); };
  auto graph = [](double rows) { return 0.003 + 1.5e-4 * rows; };
  auto matrix = [](double rows) { return 0.004 + 2e-4 * rows + 3e-3 * std::sqrt(rows); };
  std::vector<TimedStep> steps;
  for (int t : {64, 128, 256})
    for (int c : {0, 32, 128}) steps.push_back({prefill_shape(t, c), 0});
  for (TimedStep& t : steps) t.step_s = matrix(double(t.shape.n_rows())) + 5e-4 + 2e-8 * t.shape.prefill_pairs;
  for (int b : {1, 2, 4, 8, 16, 17, 32})  // 17 runs as 24
    for (int c : {32, 128, 256}) {
      const StepShape s = decode_shape(b, c);
      steps.push_back({s, graph(bucket(b)) + 7e-7 * s.decode_context});
    }
  const ProfiledStepModel m = ProfiledStepModel::fit(steps, buckets);
  const ProfiledStepModel eager = ProfiledStepModel::fit(steps);  // no buckets: M over rows for all
  EXPECT_EQ(m.graph_knots(), (std::vector<double>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_TRUE(eager.graph_knots().empty());
  for (size_t i = 0; i < m.graph_knots().size(); ++i)
    EXPECT_NEAR(m.graph_knot_seconds()[i], graph(m.graph_knots()[i]), 1e-9) << m.graph_knots()[i];
  for (const TimedStep& t : steps) {
    EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-9 * t.step_s) << t.shape.n_rows() << " rows";
    // The rest is fitted as without buckets: eager steps cost the same either way.
    if (t.shape.prefill_pairs > 0) {
      EXPECT_NEAR(m.predict_clamped(t.shape), eager.predict_clamped(t.shape), 1e-12);
    }
  }
  // Every B of a bucket costs its graph, whatever B; only the attention differs. Without the
  // buckets, 20 sequences are priced between 17 and 32 rows.
  for (int b : {17, 20, 24}) {
    ASSERT_TRUE(m.graphed(decode_shape(b, 100)));
    EXPECT_NEAR(m.predict_clamped(decode_shape(b, 100)), graph(24) + 7e-7 * b * 100, 1e-9) << b;
  }
  EXPECT_GT(std::abs(eager.predict_clamped(decode_shape(20, 100)) - (graph(24) + 7e-7 * 2000)), 1e-5);
  // Past the largest bucket, padded, prefill and verifying steps are not graphed decodes.
  EXPECT_FALSE(m.graphed(decode_shape(33, 100)));
  EXPECT_FALSE(m.graphed(padded_decode_shape(3, 5, 128)));
  EXPECT_FALSE(m.graphed(prefill_shape(16, 0)));
  StepShape verify = decode_shape(4, 100);
  verify.n_tokens = verify.n_sampled = verify.verify_rows = 8;
  EXPECT_FALSE(m.graphed(verify));
  EXPECT_FALSE(eager.graphed(decode_shape(20, 100)));
}

TEST(SimCostModel, ProfileInsideTheGridAndRooflineBeyondIt) {
  const ModelConfig m = preset("qwen2.5-0.5b");
  TempFile f(profile_text(m, synthetic_profile()));
  const SimCostModel cost = SimCostModel::from_profile_json(f.path(), m);
  EXPECT_EQ(cost.kind, SimCostModel::Kind::profile);
  EXPECT_EQ(cost.device.name, "cpu-2core");  // the profile's hardware prices beyond the grid
  CostSource used = CostSource::roofline;
  const StepShape inside = decode_shape(4, 128);
  EXPECT_NEAR(cost.step_seconds(m, inside, &used), cost.profiled->predict_clamped(inside), 1e-12);
  EXPECT_EQ(used, CostSource::profile);
  // 64 decodes: 64 rows are profiled (prefills) but not 64 sampled rows nor that much decode
  // context: the grid's edge point, scaled by the roofline's ratio.
  const StepShape big = decode_shape(64, 128);
  const double t = cost.step_seconds(m, big, &used);
  EXPECT_EQ(used, CostSource::profile_roofline);
  const StepShape edge = cost.profiled->clamp(big);
  EXPECT_EQ(edge.n_rows(), 64);
  EXPECT_EQ(edge.n_sampled, 16);
  EXPECT_DOUBLE_EQ(edge.decode_context, 16.0 * 256);
  EXPECT_NEAR(t, cost.profiled->predict_clamped(big) * roofline_seconds(m, cost.device, 1, big) /
                     roofline_seconds(m, cost.device, 1, edge), 1e-12);
  EXPECT_GT(t, cost.profiled->predict_clamped(big));
}

TEST(SimCostModel, ScaleMultipliesEveryStepInsideAndBeyondTheGrid) {
  const ModelConfig m = preset("qwen2.5-0.5b");
  TempFile f(profile_text(m, synthetic_profile()));
  SimCostModel cost = SimCostModel::from_profile_json(f.path(), m);
  const StepShape inside = decode_shape(4, 128), big = decode_shape(64, 128);
  const double t_in = cost.step_seconds(m, inside), t_big = cost.step_seconds(m, big);
  cost.scale = 1.25;
  EXPECT_NEAR(cost.step_seconds(m, inside), 1.25 * t_in, 1e-15);
  EXPECT_NEAR(cost.step_seconds(m, big), 1.25 * t_big, 1e-15);
  SimCostModel roof = SimCostModel::roofline(SimDevice::preset("h100"));
  const double r = roof.step_seconds(m, big);
  roof.scale = 0.5;
  EXPECT_NEAR(roof.step_seconds(m, big), 0.5 * r, 1e-15);
  // Through the backend spec: the sim backend prices with the scaled model; a bad scale is refused.
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "qwen2.5-0.5b";
  spec.sim_profile = f.path();
  spec.sim_cost_scale = 1.25;
  auto sim = make_backend(spec);
  EXPECT_DOUBLE_EQ(dynamic_cast<const SimBackend&>(*sim).cost().scale, 1.25);
  spec.sim_cost_scale = 0.0;
  EXPECT_THROW(make_backend(spec), std::invalid_argument);
}

TEST(SimCostModel, RefusesAProfileOfAnotherModelDeviceOrParallelism) {
  const ModelConfig qwen = preset("qwen2.5-0.5b");
  TempFile f(profile_text(qwen, synthetic_profile()));
  auto error_of = [&](const ModelConfig& m, std::optional<SimDevice> d, int tp) -> std::string {
    try {
      SimCostModel::from_profile_json(f.path(), m, d, tp);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  const std::string other_model = error_of(preset("llama2-7b"), std::nullopt, 1);
  EXPECT_NE(other_model.find(f.path()), std::string::npos) << other_model;
  EXPECT_NE(other_model.find("measured on model qwen2.5-0.5b"), std::string::npos) << other_model;
  EXPECT_NE(other_model.find("simulates llama2-7b"), std::string::npos) << other_model;
  const std::string other_device = error_of(qwen, SimDevice::preset("h100"), 1);
  EXPECT_NE(other_device.find("measured on cpu-2core"), std::string::npos) << other_device;
  EXPECT_NE(other_device.find("sim device is h100"), std::string::npos) << other_device;
  const std::string other_tp = error_of(qwen, std::nullopt, 2);
  EXPECT_NE(other_tp.find("tensor_parallel 1"), std::string::npos) << other_tp;
  EXPECT_EQ(error_of(qwen, SimDevice::preset("cpu-2core"), 1), "");
}

TEST(SimCostModel, AllReduceFittedFromMeasurementsDrivesTheTpTerm) {
  // Measured all-reduces on a line: 12 µs + bytes / 150 GB/s (a 2-way group).
  const double lat = 12e-6, per_byte = 1.0 / 150e9;
  std::vector<std::pair<double, double>> pts;
  for (double b : {1e4, 1e5, 1e6, 1e7, 1e8}) pts.push_back({b, lat + b * per_byte});
  const SimDevice h100 = SimDevice::preset("h100");
  const SimDevice fitted = fit_allreduce(h100, 2, pts);
  EXPECT_NEAR(fitted.allreduce_latency_s, lat, 1e-9);
  // roofline_seconds prices one all-reduce as latency + 2(tp-1)/tp × bytes / (interconnect / 2).
  const double bytes = 3e6;
  EXPECT_NEAR(fitted.allreduce_latency_s + 2.0 * 0.5 * bytes / (0.5 * fitted.interconnect_bytes_s), lat + bytes * per_byte,
              1e-12);
  EXPECT_NE(fitted.interconnect_bytes_s, h100.interconnect_bytes_s);
  EXPECT_THROW(fit_allreduce(h100, 1, pts), std::invalid_argument);
  EXPECT_THROW(fit_allreduce(h100, 2, {{1e6, 1e-5}}), std::invalid_argument);               // one size
  EXPECT_THROW(fit_allreduce(h100, 2, {{1e6, 1e-5}, {2e6, 5e-6}}), std::invalid_argument);  // shrinking

  // Read from a TP=2 profile: the device's all-reduce figures become the fitted ones.
  const ModelConfig llama = preset("llama2-7b");
  nlohmann::json j = nlohmann::json::parse(profile_text(llama, synthetic_profile(), "h100", 2));
  for (const auto& [b, t] : pts) j["all_reduce"].push_back({{"bytes", b}, {"seconds", t}});
  TempFile f(j.dump());
  const SimCostModel cost = SimCostModel::from_profile_json(f.path(), llama, std::nullopt, 2);
  EXPECT_TRUE(cost.allreduce_measured);
  EXPECT_NEAR(cost.device.allreduce_latency_s, lat, 1e-9);
  EXPECT_NE(cost.source.find("all-reduce measured"), std::string::npos) << cost.source;
  // Without the measurements the datasheet's figures stay.
  TempFile plain(profile_text(llama, synthetic_profile(), "h100", 2));
  const SimCostModel datasheet = SimCostModel::from_profile_json(plain.path(), llama, std::nullopt, 2);
  EXPECT_FALSE(datasheet.allreduce_measured);
  EXPECT_EQ(datasheet.device.interconnect_bytes_s, h100.interconnect_bytes_s);
  // A malformed measurement names the file and the field.
  j["all_reduce"] = nlohmann::json::array({{{"bytes", 1e6}, {"seconds", 1e-5}}});
  TempFile bad(j.dump());
  try {
    SimCostModel::from_profile_json(bad.path(), llama, std::nullopt, 2);
    FAIL() << "expected a runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("\"all_reduce\""), std::string::npos) << e.what();
  }
}

TEST(SimCostModel, ReadsTheCommittedVersion1CpuProfile) {
  // A servelab.profile/1 file (prefill and decode at two batch sizes), as 2026-11-22 builds wrote.
  const std::string path = std::string(SERVELAB_SOURCE_DIR) + "/tests/data/profiles/qwen2.5-0.5b-profile-v1.json";
  const SimCostModel cost = SimCostModel::from_profile_json(path, preset("qwen2.5-0.5b"));
  // Decode at batch 1, context 130: the measured ~97 ms steps, within their noise.
  EXPECT_NEAR(cost.step_seconds(preset("qwen2.5-0.5b"), decode_shape(1, 130)), 0.097, 0.01);
}

TEST(SimCostModel, BadProfilesNameTheFileAndSample) {
  const ModelConfig m = micro_model();
  auto error_of = [&](const std::string& path) -> std::string {
    try {
      SimCostModel::from_profile_json(path, m);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("/nonexistent/profile.json").find("/nonexistent/profile.json"), std::string::npos);
  TempFile not_json("{oops");
  EXPECT_NE(error_of(not_json.path()).find("not valid JSON"), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(profile_text(m, {{decode_shape(1, 8), 0.01}}));
  j["samples"].push_back({{"n_tokens", 2}});
  TempFile missing(j.dump());
  const std::string e = error_of(missing.path());
  EXPECT_NE(e.find("samples[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("step_s"), std::string::npos) << e;
}

TEST(SimCostModel, RooflineCheckedByHandForLlama2On1H100) {
  // llama2-7b: 32 layers × (4·4096² + 3·4096·11008 + 2·4096) + 4096 = 6,476,271,616 layer
  // parameters; the LM head adds 4096 × 32000. Batch-1 decode at context 512 (511 cached + 1):
  //   bytes = (6,476,271,616 + 131,072,000) × 2 (bf16 weights) + 524,288 × (512 + 1) (K/V read + written)
  //         = 13,214,687,232 + 268,959,744 = 13,483,646,976 → / 3.35e12 B/s = 4.02497 ms
  //   FLOPs = 2 × 6,476,271,616 + 2 × 131,072,000 + 4 × 32 × 32 × 128 × 512 = 13.48 GFLOP → 13.6 µs
  // memory-bound: 4.02497 ms + 0.2 ms step overhead = 4.22497 ms.
  const ModelConfig m = preset("llama2-7b");
  const SimCostModel cost = SimCostModel::roofline(SimDevice::preset("h100"));
  StepShape s = decode_shape(1, 512);
  CostSource used = CostSource::profile;
  EXPECT_NEAR(cost.step_seconds(m, s, &used), 4.22497e-3, 1e-8);
  EXPECT_EQ(used, CostSource::roofline);
  // Tensor parallel 2: half the bytes, plus 2 all-reduces per layer of one 4096-wide bf16 row:
  // 64 × (8 µs + 2·(1/2)·8192 B / 450 GB/s) = 64 × 8.0182 µs = 0.51316 ms.
  const SimCostModel tp2 = SimCostModel::roofline(SimDevice::preset("h100"), 2);
  EXPECT_NEAR(tp2.step_seconds(m, s), 4.02497e-3 / 2 + 2e-4 + 64 * (8e-6 + 8192.0 / 450e9), 1e-8);
}

TEST(KvBudget, LeavesWhatWeightsAndActivationsDoNotTake) {
  // llama2-7b on one H100 at 0.9: 72 GB usable − 13,476,831,232 B of bf16 weights −
  // (4096 rows × (4·4096 + 2·11008) × 2 B + 4 × 256 × 32000 B of logits + 1 GiB) = 57,102,086,144 B,
  // 108,913 token slots of 512 KiB.
  const KvBudget b = kv_budget(preset("llama2-7b"), SimDevice::preset("h100"), 1, 0.9, 4096, 256);
  EXPECT_EQ(b.kv_cache_bytes, 57102086144);
  EXPECT_EQ(b.kv_bytes_per_token, 524288);
  EXPECT_EQ(b.n_token_slots(), 108913);
  // Tensor parallel 2: half the weights and half the KV heads per GPU.
  const KvBudget b2 = kv_budget(preset("llama2-7b"), SimDevice::preset("h100"), 2, 0.9, 4096, 256);
  EXPECT_EQ(b2.kv_bytes_per_token, 262144);
  EXPECT_GT(b2.n_token_slots(), 2 * b.n_token_slots());
  EXPECT_THROW(kv_budget(preset("llama2-7b"), SimDevice::preset("h100"), 1, 1.5, 4096, 256), std::invalid_argument);
  EXPECT_THROW(kv_budget(preset("llama3-8b"), SimDevice::preset("h100"), 3, 0.9, 4096, 256), std::invalid_argument);
  // 70B in bf16 does not fit one 80 GB GPU.
  EXPECT_LT(kv_budget(preset("llama3-70b"), SimDevice::preset("h100"), 1, 0.9, 4096, 256).kv_cache_bytes, 0);
}

TEST(SimBackend, TokensArePureFunctionsOfSeedSampleAndPosition) {
  const ModelConfig m = micro_model();
  Engine a(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  Engine b(paged_config(static_sched(3, 0.0), 1 << 20), sim_backend());
  std::vector<Request> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(make_request(i, 5 + 3 * i, 20));
  RunResult ra = run_virtual(a, at_zero(reqs)), rb = run_virtual(b, at_zero(reqs));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ra.at(i).outputs, rb.at(i).outputs);
    for (TokenId t : ra.at(i).outputs[0]) {
      EXPECT_GE(t, 2);
      EXPECT_LT(t, m.vocab_size);
    }
  }
  EXPECT_NE(ra.at(0).outputs, ra.at(1).outputs);  // different seeds
}

TEST(SimBackend, RejectsAnEntryWithoutSlotsAndAStepOutsideItsArena) {
  SimBackend b(micro_model(), SimCostModel::roofline(SimDevice::preset("h100")));
  b.init_kv(64);
  KvConfig kc;
  auto kv = make_kv_manager(kc, 64);
  Sequence s;
  s.id = 1;
  s.tokens = prompt_tokens(20, 1);
  s.n_prompt = 20;
  Batch batch;
  batch.entries.push_back({&s, 20, true});
  EXPECT_THROW(run_batch(b, batch, *kv), std::out_of_range);  // the step builder asks the KV manager
  kv->allocate(s, 20);
  Step step = make_step(b, batch, *kv);
  const StepOutput r = b.execute(step);
  ASSERT_EQ(r.tokens.size(), 1u);
  ASSERT_TRUE(r.predicted_s.has_value());
  EXPECT_GT(*r.predicted_s, 0.0);
  EXPECT_EQ(b.cost_counts().roofline, 1);
  EXPECT_EQ(b.cost_counts().total(), 1);
  step.in.slot_mapping[3] = 64;  // past the 64-slot arena
  EXPECT_THROW(b.execute(step), std::invalid_argument);
}

TEST(SimBackend, PricesWithItsOwnCopiesOfTheModelAndCostModel) {
  // SimBackend prices with terms computed once (StepPricer): they must point into the backend,
  // not into the arguments it was built from, and give what step_seconds gives, to the bit.
  SimCostModel cost = SimCostModel::roofline(SimDevice::preset("h100"), 2);
  cost.formats.kv_cache_dtype = KvCacheDType::fp8;
  cost.scale = 1.25;
  auto model = std::make_unique<ModelConfig>(preset("llama2-7b"));
  auto b = std::make_unique<SimBackend>(*model, cost);
  const SimCostModel kept = cost;
  const ModelConfig kept_model = *model;
  cost.device.mem_bw_bytes_s *= 10.0;  // the backend holds its own copies: these do not reach it
  model->n_layers = 1;
  model.reset();
  b->init_kv(4096);
  KvConfig kc;
  auto kv = make_kv_manager(kc, 4096);
  std::vector<Sequence> seqs(3);
  Batch batch;
  for (int i = 0; i < 3; ++i) {
    seqs[i].id = uint64_t(i) + 1;
    seqs[i].tokens = prompt_tokens(17 + 40 * i, uint64_t(i));
    seqs[i].n_prompt = seqs[i].n_tokens();
    kv->allocate(seqs[i], seqs[i].n_tokens());
    batch.entries.push_back({&seqs[i], seqs[i].n_tokens(), true});
  }
  for (int round = 0; round < 2; ++round) {  // the second prices with the same pricer again
    const Step step = make_step(*b, batch, *kv);
    const StepOutput r = b->execute(step);
    ASSERT_TRUE(r.predicted_s.has_value());
    EXPECT_EQ(*r.predicted_s, kept.step_seconds(kept_model, StepShape::of(step)));
  }
}

TEST(SimDevice, PresetsAndValidation) {
  for (const auto& name : SimDevice::preset_names()) EXPECT_NO_THROW(SimDevice::preset(name).validate());
  try {
    SimDevice::preset("a100");  // the preset is a100-80gb
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("h200"), std::string::npos);
  }
  SimDevice d = SimDevice::preset("h100");
  d.mem_bw_bytes_s = 0;
  EXPECT_THROW(d.validate(), std::invalid_argument);
}

TEST(MakeBackend, BuildsSimAndCpuFromAPreset) {
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "llama3-8b";
  spec.sim_device = SimDevice::preset("h200");
  auto sim = make_backend(spec);
  EXPECT_EQ(sim->name(), "sim");
  EXPECT_EQ(sim->config().name, "llama3-8b");
  spec.kind = BackendKind::cpu;
  spec.model = "tiny";
  spec.threads = 1;
  auto cpu = make_backend(spec);
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->config().hidden_size, 256);
  spec.model = "no-such-model";
  EXPECT_THROW(make_backend(spec), std::invalid_argument);
  // The slot a scenario's arena is checked and sized with is the one the built sim has: from a cpu
  // profile (fp32 K/V) even with the default GPU device, 2 × 24 layers × 2 × 64 × 4 bytes.
  BackendSpec cpu_profiled;
  cpu_profiled.kind = BackendKind::sim;
  cpu_profiled.model = "qwen2.5-0.5b";
  cpu_profiled.sim_profile = std::string(SERVELAB_SOURCE_DIR) + "/tests/data/profiles/qwen2.5-0.5b-profile-v1.json";
  EXPECT_EQ(make_backend(cpu_profiled)->kv_bytes_per_slot(), 2 * 24 * 2 * 64 * 4);
  EXPECT_EQ(kv_bytes_per_slot(cpu_profiled), 2 * 24 * 2 * 64 * 4);
  EXPECT_EQ(parse_backend_kind("sim"), BackendKind::sim);
  EXPECT_THROW(parse_backend_kind("gpu"), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
