// roofline_meter: a step's roofline at given ceilings is the cost model's bound (hand-counted for a
// tiny model), padding rows are not work, steps are classed by their chunks, ceilings files are
// read with errors naming the file, and a wrapped backend leaves one roofline per executed step.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/make_backend.h"
#include "engine/backend/profiler.h"
#include "engine/model/quantize_weights.h"
#include "engine/engine.h"
#include "loadgen/roofline_meter.h"
#include "tests/backend/roofline_hand_model.h"
#include "tests/engine/engine_test_support.h"
#include "tests/loadgen/loadgen_test_util.h"

namespace servelab {
namespace roofline_meter_test {

using namespace enginetest;

using roofline_test::hand_model;

RooflineCeilings giga() { return RooflineCeilings{1e9, 1e9, CeilingSource::profile, "test"}; }

StepShape three_decodes() {
  StepShape s;
  s.n_tokens = 3;
  s.n_sampled = 3;
  s.n_seqs = 3;
  s.sum_context = 60;
  s.max_context = 30;
  s.attention_pairs = 60;
  s.decode_context = 60;
  return s;
}

TEST(RooflineMeter, PricesAtTheCeilingsNotThePresets) {
  const RooflineMeter meter(hand_model(), SimDevice::preset("cpu-2core"), giga(), 1);
  const StepRoofline r = meter.price(three_decodes());
  EXPECT_EQ(r.step_class, StepClass::decode);
  EXPECT_DOUBLE_EQ(r.flops, 12528.0);  // 2·1192·3 + 2·256·3 + 64·60
  EXPECT_DOUBLE_EQ(r.bytes, 9824.0);   // (1192 + 256)·4 + 64·63
  EXPECT_DOUBLE_EQ(r.seconds, 12528e-9);
  // Ten times the bandwidth leaves it compute bound; a tenth makes it memory bound.
  const RooflineMeter slow_memory(hand_model(), SimDevice::preset("cpu-2core"),
                                  RooflineCeilings{1e8, 1e9, CeilingSource::probe, ""}, 1);
  EXPECT_DOUBLE_EQ(slow_memory.price(three_decodes()).seconds, 9824e-8);
}

TEST(RooflineMeter, PaddingRowsAreNotWork) {
  const RooflineMeter meter(hand_model(), SimDevice::preset("cpu-2core"), giga(), 1);
  StepShape padded = three_decodes();
  padded.n_padding_tokens = 2;
  padded.attention_pairs += 2.0 * padded.max_context;  // as StepShape::of charges them
  const StepRoofline a = meter.price(three_decodes()), b = meter.price(padded);
  EXPECT_DOUBLE_EQ(b.flops, a.flops);
  EXPECT_DOUBLE_EQ(b.bytes, a.bytes);
  EXPECT_EQ(b.step_class, StepClass::decode);
}

TEST(RooflineMeter, CountsTheStrategysWeightAndKvFormats) {
  // A quantized strategy's Linears are read in their own bytes and an FP8 cache's K/V as codes
  // and scales: a meter in bf16 counts FP8 weights at twice their bytes (efficiency over 1).
  const ModelConfig m = hand_model();
  const SimDevice h100 = SimDevice::preset("h100-sxm");
  const RooflineMeter plain(m, h100, giga(), 1);
  StorageFormats fp8;
  fp8.quant = scheme_for_model(Quantization::fp8, m);
  const RooflineMeter weights_fp8(m, h100, giga(), 1, fp8);
  const double linear_params = double(linear_weight_bytes(m, QuantScheme{})) / 2.0;
  const StepShape s = three_decodes();
  EXPECT_NEAR(plain.price(s).bytes - weights_fp8.price(s).bytes,
              linear_params * h100.weight_dtype_bytes - double(linear_weight_bytes(m, fp8.quant)), 1e-6);
  EXPECT_LT(weights_fp8.price(s).seconds, plain.price(s).seconds);
  ModelConfig wide = m;  // heads of 16: an FP8 slot (1 byte a value + a 4-byte scale a head) is smaller
  wide.hidden_size = 32;
  StorageFormats kv8;
  kv8.kv_cache_dtype = KvCacheDType::fp8;
  const RooflineMeter wide_plain(wide, h100, giga(), 1);
  const RooflineMeter kv_fp8(wide, h100, giga(), 1, kv8);
  EXPECT_NEAR(wide_plain.price(s).bytes - kv_fp8.price(s).bytes,
              double(s.sum_context + s.n_tokens) * 2 * wide.n_layers * wide.n_kv_heads * (16 * 2 - (16 + 4)), 1e-6);
  EXPECT_EQ(kv_fp8.price(s).flops, wide_plain.price(s).flops);
}

TEST(RooflineMeter, KeepsTheStepsShapeThroughItsJson) {
  const RooflineMeter meter(hand_model(), SimDevice::preset("cpu-2core"), giga(), 1);
  const StepShape shape = three_decodes();
  const StepRoofline r = meter.price(shape);
  ASSERT_TRUE(r.shape.has_value());
  EXPECT_EQ(r.shape->n_seqs, shape.n_seqs);
  EXPECT_EQ(r.shape->sum_context, shape.sum_context);
  EXPECT_DOUBLE_EQ(r.shape->decode_context, shape.decode_context);
  const StepRoofline back = nlohmann::json(r).get<StepRoofline>();
  ASSERT_TRUE(back.shape.has_value());
  EXPECT_EQ(back.shape->n_sampled, shape.n_sampled);
  EXPECT_EQ(back.shape->sum_context, shape.sum_context);
  EXPECT_DOUBLE_EQ(back.shape->prefill_pairs, shape.prefill_pairs);
  // Files written before the shape was recorded read without one.
  nlohmann::json old = r;
  old.erase("shape");
  EXPECT_FALSE(old.get<StepRoofline>().shape.has_value());
}

TEST(RooflineMeter, ClassesStepsByTheirChunks) {
  StepShape s = three_decodes();
  EXPECT_EQ(step_class_of(s), StepClass::decode);
  s.prefill_pairs = 136;
  EXPECT_EQ(step_class_of(s), StepClass::mixed);
  s.decode_context = 0;
  EXPECT_EQ(step_class_of(s), StepClass::prefill);
}

TEST(RooflineMeter, BadCeilingsAreRefused) {
  EXPECT_THROW(RooflineMeter(hand_model(), SimDevice::preset("cpu-2core"), RooflineCeilings{0, 1e9, CeilingSource::probe, ""}, 1),
               std::invalid_argument);
}

TEST(RooflineCeilingsFile, ReadsTopLevelOrUnderCeilings) {
  const std::string flat = testing_util::write_temp("flat.json", R"({"copy_bytes_s": 2.5e10, "gemm_flops": 1e11})");
  const RooflineCeilings a = read_ceilings_file(flat);
  EXPECT_DOUBLE_EQ(a.copy_bytes_s, 2.5e10);
  EXPECT_DOUBLE_EQ(a.gemm_flops, 1e11);
  EXPECT_EQ(a.source, CeilingSource::profile);
  EXPECT_EQ(a.detail, flat);
  const std::string nested =
      testing_util::write_temp("nested.json", R"({"schema": "servelab.profile/2", "ceilings": {"copy_bytes_s": 3e12, "gemm_flops": 8e14}})");
  EXPECT_DOUBLE_EQ(read_ceilings_file(nested).gemm_flops, 8e14);
}

TEST(RooflineCeilingsFile, ACpuProfileIsACeilingsFile) {
  ProfileReport report;
  report.backend = "cpu";
  report.model = hand_model();
  report.ceilings = ProbedCeilings{1.5e10, 9e10, "probe: test"};
  const std::string path = testing_util::write_temp("profile.json", profile_json(report));
  const RooflineCeilings c = read_ceilings_file(path);
  EXPECT_DOUBLE_EQ(c.copy_bytes_s, 1.5e10);
  EXPECT_DOUBLE_EQ(c.gemm_flops, 9e10);
  EXPECT_EQ(c.source, CeilingSource::profile);
  report.ceilings.reset();  // a profile without them (cuda, older ones) is refused, naming the keys
  EXPECT_THROW(read_ceilings_file(testing_util::write_temp("no_ceilings.json", profile_json(report))), std::runtime_error);
}

TEST(RooflineCeilingsFile, ErrorsNameTheFileAndTheField) {
  const std::string missing = testing_util::write_temp("missing.json", R"({"copy_bytes_s": 1e10})");
  try {
    read_ceilings_file(missing);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gemm_flops"), std::string::npos) << e.what();
  }
  const std::string negative = testing_util::write_temp("negative.json", R"({"copy_bytes_s": -1, "gemm_flops": 1e10})");
  try {
    read_ceilings_file(negative);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("copy_bytes_s"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_ceilings_file(testing_util::write_temp("bad.json", "{")), std::runtime_error);
}

TEST(RooflineRecorder, LeavesOneRooflinePerExecutedStep) {
  const std::string file = testing_util::write_temp("ceil.json", R"({"copy_bytes_s": 1e10, "gemm_flops": 1e11})");
  RooflineRecorder recorder(BackendKind::cpu, file, 1, 1);
  std::unique_ptr<Backend> wrapped = recorder.wrap(sim_backend());
  ASSERT_TRUE(recorder.ceilings());
  EXPECT_EQ(recorder.ceilings()->source, CeilingSource::profile);
  EXPECT_EQ(recorder.note(), "");
  // No chunked prefill: the first step is the prompts, the rest one-token decodes.
  Engine engine(paged_config(continuous_sched(8, 256, false), 64 << 20), std::move(wrapped));
  std::vector<Timed> items;
  for (uint64_t id = 0; id < 3; ++id) items.push_back({0.0, make_request(id, 20, 4, id)});
  VirtualClock clock;
  ListSource source(std::move(items));
  RunnerCallbacks cb;
  std::vector<std::pair<StepOutcome, std::optional<StepRoofline>>> steps;
  cb.on_step = [&](const StepOutcome& s) { steps.emplace_back(s, recorder.take()); };
  run_engine(engine, source, clock, cb);
  int n_busy = 0;
  for (const auto& [s, r] : steps) {
    if (s.idle()) {
      EXPECT_FALSE(r);
      continue;
    }
    ASSERT_TRUE(r);
    EXPECT_GT(r->seconds, 0.0);
    EXPECT_EQ(r->step_class, n_busy == 0 ? StepClass::prefill : StepClass::decode);
    ++n_busy;
  }
  EXPECT_EQ(n_busy, 4);  // the prompts, then three more tokens each
  EXPECT_FALSE(recorder.take());  // taken once
}

TEST(RooflineRecorder, EachBackendIsPricedInItsOwnFormats) {
  const std::string file = testing_util::write_temp("ceil2.json", R"({"copy_bytes_s": 1e10, "gemm_flops": 1e11})");
  RooflineRecorder recorder(BackendKind::cpu, file, 1, 1);
  StorageFormats kv8;
  kv8.kv_cache_dtype = KvCacheDType::fp8;
  std::unique_ptr<Backend> plain = recorder.wrap(sim_backend());
  std::unique_ptr<Backend> fp8 = recorder.wrap(sim_backend(), kv8);
  auto step_bytes = [&](std::unique_ptr<Backend> b) {
    Engine engine(paged_config(continuous_sched(8, 256, false), 64 << 20), std::move(b));
    std::vector<Timed> items{{0.0, make_request(0, 20, 2, 0)}};
    VirtualClock clock;
    ListSource source(std::move(items));
    RunnerCallbacks cb;
    double bytes = 0.0;
    cb.on_step = [&](const StepOutcome&) {
      if (auto r = recorder.take()) bytes += r->bytes;
    };
    run_engine(engine, source, clock, cb);
    return bytes;
  };
  const double plain_bytes = step_bytes(std::move(plain)), fp8_bytes = step_bytes(std::move(fp8));
  EXPECT_GT(plain_bytes, 0.0);
  EXPECT_LT(fp8_bytes, plain_bytes);
}

TEST(BackendFactoryFormats, CpuDequantizesOthersReadTheirScheme) {
  BackendSpec sim;
  sim.kind = BackendKind::sim;
  sim.model = "tiny";
  const StorageFormats s = BackendFactory(sim).formats(Quantization::int4_awq, KvCacheDType::fp8);
  EXPECT_EQ(s.quant.method, Quantization::int4_awq);
  EXPECT_EQ(s.kv_cache_dtype, KvCacheDType::fp8);
  BackendSpec cpu = sim;
  cpu.kind = BackendKind::cpu;
  cpu.threads = 1;
  const StorageFormats c = BackendFactory(cpu).formats(Quantization::int4_awq, KvCacheDType::fp8);
  EXPECT_FALSE(c.quant.quantized());  // the cpu backend multiplies its dequantized fp32 weights
  EXPECT_EQ(c.kv_cache_dtype, KvCacheDType::fp8);
}

TEST(RooflineRecorder, UnknownGpuGetsNoRooflineAndSaysWhy) {
  RooflineRecorder recorder(BackendKind::cuda, "", 0, 1);
  std::unique_ptr<Backend> inner = sim_backend(micro_model(), "cpu-2core");  // "simulated cpu-2core": no GPU
  Backend* raw = inner.get();
  std::unique_ptr<Backend> out = recorder.wrap(std::move(inner));
  EXPECT_EQ(out.get(), raw);  // unwrapped
  EXPECT_FALSE(recorder.ceilings());
  EXPECT_NE(recorder.note().find("no device preset matches"), std::string::npos) << recorder.note();
}

}  // namespace roofline_meter_test
}  // namespace servelab
