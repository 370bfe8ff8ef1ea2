#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/step_input.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/profiler.h"
#include "engine/backend/sim_backend.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/profiler_test_util.h"

namespace servelab {
namespace {

using profiler_testing::CountingBackend;
using profiler_testing::small_options;


TEST(Profiler, TimesEveryPointOfTheGrid) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  const ProfileReport r = profile_backend(backend, small_options());
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.kv_dtype_bytes, 4);
  // prefill 4, 8; batched prefill 3 × 6; decode {1,3} × {6,12}; a padded decode (batch 3: 2 sequences
  // + 1 padding row at context 12); chunk 5 at {6,12}; mixed at batch 3 (and 1? no: middle = 3 = max)
  ASSERT_EQ(r.samples.size(), 2u + 1u + 4u + 1u + 2u + 1u);
  EXPECT_EQ(r.samples[0].phase, ProfilePhase::prefill);
  EXPECT_EQ(r.samples[0].shape.n_tokens, 4);
  EXPECT_DOUBLE_EQ(r.samples[0].shape.prefill_pairs, 10.0);  // 1 + 2 + 3 + 4
  EXPECT_EQ(r.samples[2].shape.n_seqs, 3);
  EXPECT_EQ(r.samples[2].shape.n_tokens, 18);
  const ProfileSample& d = r.samples[6];  // decode, batch 3, context 12
  EXPECT_EQ(d.phase, ProfilePhase::decode);
  EXPECT_EQ(d.shape.n_tokens, 3);
  EXPECT_EQ(d.shape.n_sampled, 3);
  EXPECT_EQ(d.shape.max_context, 13);
  EXPECT_DOUBLE_EQ(d.shape.decode_context, 39.0);
  const ProfileSample& p = r.samples[7];  // padded decode
  EXPECT_EQ(p.phase, ProfilePhase::decode);
  EXPECT_TRUE(p.shape.padded_decode());
  EXPECT_EQ(p.shape.n_seqs, 2);
  EXPECT_EQ(p.shape.n_sampled, 2);
  EXPECT_EQ(p.shape.n_padding_tokens, 1);
  EXPECT_EQ(p.shape.n_rows(), 3);
  EXPECT_DOUBLE_EQ(p.shape.decode_context, 26.0);
  const ProfileSample& c = r.samples[8];  // chunk of 5 after 6 cached
  EXPECT_EQ(c.phase, ProfilePhase::chunk);
  EXPECT_DOUBLE_EQ(c.shape.prefill_pairs, 5.0 * 6 + 15);
  const ProfileSample& m = r.samples.back();
  EXPECT_EQ(m.phase, ProfilePhase::mixed);
  EXPECT_EQ(m.shape.n_seqs, 4);
  EXPECT_EQ(m.shape.n_tokens, 3 + 5);
  for (const ProfileSample& s : r.samples) {
    EXPECT_EQ(s.times_s.size(), 2u);
    EXPECT_GT(s.step_s, 0.0);
  }
  EXPECT_NE(profile_table(r).find("decode"), std::string::npos);
}

TEST(Profiler, JsonCalibratesTheSimForItsModelOnly) {
  CpuBackend backend(ModelWeights::random(testing::small_config(4), 2), CpuBackendOptions{.n_threads = 1});
  ProfileReport r = profile_backend(backend, small_options());
  r.device = "test";
  r.hardware = "cpu-2core";
  r.commit = "abc";
  EXPECT_FALSE(nlohmann::json::parse(profile_json(r)).contains("host_overhead"));  // not measured
  r.host_overhead = HostOverhead{2e-6, 3e-7};
  r.host_points = {{1.0, 2.3e-6}, {8.0, 4.4e-6}};
  const std::string text = profile_json(r);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("schema"), "servelab.profile/2");
  EXPECT_DOUBLE_EQ(j.at("host_overhead").at("per_seq_s").get<double>(), 3e-7);
  EXPECT_EQ(j.at("host_overhead").at("points").size(), 2u);
  EXPECT_NE(profile_table(r).find("per sequence"), std::string::npos);
  EXPECT_EQ(j.at("samples").size(), r.samples.size());
  EXPECT_EQ(j.at("samples")[0].at("phase"), "prefill");
  EXPECT_EQ(j.at("model").at("n_kv_heads"), 4);
  EXPECT_EQ(j.at("model").at("shape_hash"), model_shape_hash(r.model));
  EXPECT_EQ(j.at("commit"), "abc");

  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_test.json";
  std::ofstream(path) << text;
  const SimCostModel cost = SimCostModel::from_profile_json(path.string(), r.model);
  EXPECT_EQ(cost.kind, SimCostModel::Kind::profile);
  EXPECT_DOUBLE_EQ(cost.host.per_step_s, 2e-6);  // read back into the sim
  for (const ProfileSample& s : r.samples) EXPECT_TRUE(cost.profiled->inside(s.shape));
  ModelConfig other = r.model;
  other.intermediate_size += 8;
  EXPECT_THROW(SimCostModel::from_profile_json(path.string(), other), std::runtime_error);
  std::filesystem::remove(path);
}

TEST(Profiler, NaiveKvTimesTheSameGridInContiguousRegions) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o = small_options();
  o.kv_kind = KvKind::naive;
  ProfileReport r = profile_backend(backend, o);
  ASSERT_EQ(r.samples.size(), profile_backend(backend, small_options()).samples.size());
  for (const ProfileSample& s : r.samples) EXPECT_GT(s.step_s, 0.0);
  r.hardware = "cpu-2core";
  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_naive_test.json";
  std::ofstream(path) << profile_json(r);
  EXPECT_EQ(nlohmann::json::parse(profile_json(r)).at("options").at("kv"), "naive");
  EXPECT_EQ(SimCostModel::from_profile_json(path.string(), r.model).kv_layout, "naive");
  std::filesystem::remove(path);
}

TEST(Profiler, RejectsOptionsTheModelCannotRun) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o = small_options();
  o.contexts = {600};  // max_position is 512
  EXPECT_THROW(profile_backend(backend, o), std::invalid_argument);
  o = small_options();
  o.batch_sizes = {0};
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.batch_sizes = {};
  EXPECT_THROW(o.validate(), std::invalid_argument);
}


TEST(ProfileRunner, SpreadPlacesNaiveRegionsAcrossTheWholeArena) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  const ProfilePoint decode4{ProfilePhase::decode, std::vector<ProfilePoint::Seq>(4, {32, 1})};
  CountingBackend b(cpu);
  {
    ProfileRunner packed(b, 4000, 64, 1, false, int64_t(1) << 20, KvKind::naive, false);
    packed.run(decode4, 0, 1, 0.0);
    EXPECT_EQ(b.first_slots, (std::vector<int64_t>{0, 33, 66, 99}));  // regions of exactly 33 slots, packed
  }
  ProfileRunner spread(b, 4000, 64, 1, false, int64_t(1) << 20, KvKind::naive, true);
  for (int round = 0; round < 2; ++round) {  // the spacers are released with the point: same places again
    spread.run(decode4, 0, 1, 0.0);
    EXPECT_EQ(b.first_slots, (std::vector<int64_t>{0, 1000, 2000, 3000})) << "round " << round;  // gaps of 967
  }
  // Uneven regions still fit: the free room is shared, not the arena.
  const ProfilePoint mixed{ProfilePhase::mixed, {{32, 1}, {32, 1}, {32, 1}, {32, 1}, {32, 2000}}};
  spread.run(mixed, 0, 1, 0.0);
  EXPECT_EQ(b.first_slots, (std::vector<int64_t>{0, 400, 800, 1200, 1600}));  // (4000 - 2164) / 5 = 367 apart
}

TEST(Profiler, RecordsTheBackendsDecodeBucketsForTheSim) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  CountingBackend b(cpu);
  b.buckets = {1, 2, 4, 8};
  ProfileOptions o = small_options();
  o.repeats = 1;
  const ProfileReport r = profile_backend(b, o);
  EXPECT_EQ(r.decode_row_buckets, (std::vector<int>{1, 2, 4, 8}));
  const nlohmann::json j = nlohmann::json::parse(profile_json(r));
  EXPECT_EQ(j.at("decode_row_buckets"), nlohmann::json({1, 2, 4, 8}));
  // Bucket 2 is one no --batch size (1, 3) runs as: decodes of 2 are timed too, at every context.
  EXPECT_EQ(r.options.extra_decode_batches, (std::vector<int>{2}));
  int twos = 0;
  for (const ProfileSample& s : r.samples)  // (the padded decode of batch 3 has 2 sequences too)
    twos += s.phase == ProfilePhase::decode && s.shape.n_seqs == 2 && s.shape.n_padding_tokens == 0;
  EXPECT_EQ(twos, int(o.contexts.size()));
  EXPECT_EQ(r.samples.size(), profile_grid(o).size() + o.contexts.size() + 1);  // + a padded decode of 2
  // A backend without buckets adds nothing and writes no key; --no-bucket-edges adds nothing.
  b.buckets.clear();
  const ProfileReport plain = profile_backend(b, o);
  EXPECT_TRUE(plain.options.extra_decode_batches.empty());
  EXPECT_FALSE(nlohmann::json::parse(profile_json(plain)).contains("decode_row_buckets"));
  b.buckets = {1, 2, 4, 8};
  o.bucket_edges = false;
  EXPECT_EQ(profile_backend(b, o).samples.size(), profile_grid(o).size());
}

TEST(ProfilerPlan, BucketEdgesMeasureEveryBucketUpToTheLargestBatch) {
  const std::vector<int> cuda = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256};
  EXPECT_EQ(bucket_edge_batches({1, 2, 4, 8, 16, 32, 48, 64, 96, 128}, cuda), (std::vector<int>{24}));
  // A scenario's grid: 1-16 and powers of two; 17 runs as 24, so 24 is measured already.
  EXPECT_EQ(bucket_edge_batches({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32, 64, 128, 256}, cuda),
            (std::vector<int>{24, 48, 96, 160, 192}));
  EXPECT_EQ(bucket_edge_batches({1, 17, 40}, cuda), (std::vector<int>{2, 4, 8, 16, 32}));  // 17 runs as 24, 40 as 48
  EXPECT_EQ(bucket_edge_batches({1, 3, 4}, cuda), (std::vector<int>{2}));  // 3 and 4 run as 4
  EXPECT_TRUE(bucket_edge_batches({1, 2, 4}, {}).empty());
}

TEST(Profiler, SpreadNeedsAnArenaSizeAndIsRecordedInTheProfile) {
  ProfileOptions o = small_options();
  o.kv_spread = true;
  o.kv_kind = KvKind::naive;
  EXPECT_THROW(o.validate(), std::invalid_argument);  // no arena size
  o.kv_kind = KvKind::paged;
  o.max_kv_bytes = int64_t(64) << 20;
  EXPECT_THROW(o.validate(), std::invalid_argument);  // paged
  o.kv_kind = KvKind::naive;
  o.max_kv_bytes = int64_t(64) << 20;
  o.validate();
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  const ProfilePlan plan = plan_profile(o, backend.kv_bytes_per_slot());
  EXPECT_EQ(plan.n_slots, o.max_kv_bytes / backend.kv_bytes_per_slot());  // the whole budget
  const ProfileReport r = profile_backend(backend, o);
  EXPECT_EQ(nlohmann::json::parse(profile_json(r)).at("options").at("kv_spread"), true);
}

/// batch {1, 4} x contexts {32, 256}: the grid's two points with batch 4 at context 256 (decode:
/// 4 x 272 slots; mixed: 5 x 272) are the only ones over 500 slots.
ProfileOptions budget_options() {
  ProfileOptions o = small_options();
  o.batch_sizes = {1, 4};
  o.contexts = {32, 256};
  o.repeats = 1;
  o.min_point_s = 0.0;
  return o;
}

TEST(ProfilerPlan, SkipsPointsOverTheKvBudgetAndSizesTheArenaToTheRest) {
  ProfileOptions o = budget_options();
  const ProfilePlan all = plan_profile(o, 1000);
  EXPECT_TRUE(all.skipped.empty());
  EXPECT_EQ(all.points.size(), profile_grid(o).size());
  EXPECT_EQ(all.n_slots, 5 * 272);  // the mixed step: 4 decodes + a chunk at context 256
  EXPECT_EQ(all.max_len, 261);

  o.max_kv_bytes = 500 * 1000;
  const ProfilePlan capped = plan_profile(o, 1000);
  ASSERT_EQ(capped.skipped.size(), 3u);
  EXPECT_EQ(capped.skipped[0].phase, ProfilePhase::decode);
  EXPECT_EQ(capped.skipped[0].seqs.size(), 4u);
  EXPECT_EQ(capped.skipped[0].seqs[0].context, 256);
  EXPECT_EQ(capped.skipped[1].n_padding, 2);  // the padded decode of batch 4: 2 sequences at 256
  EXPECT_NE(capped.skipped[1].describe().find("+ 2 padding rows"), std::string::npos);
  EXPECT_EQ(capped.skipped[2].phase, ProfilePhase::mixed);
  EXPECT_NE(capped.skipped[0].describe().find("decode 4 seqs"), std::string::npos);
  EXPECT_EQ(capped.points.size() + 3, all.points.size());
  for (const ProfilePoint& p : capped.points) EXPECT_LE(p.n_slots(), 500);
  EXPECT_EQ(capped.n_slots, 272);  // decode 1 x 256 and the chunk at 256: 17 blocks
}

// A mixed step's chunk takes what the token budget leaves beside its decodes, as chunked prefill
// does: chunks of 125 and 512 beside 11 decodes under a budget of 512 run as 125 and 501 rows.
TEST(ProfilerGrid, MixedChunksFitTheTokenBudgetBesideTheirDecodes) {
  ProfileOptions o;
  o.prefill_lens = {16};
  o.batch_sizes = {1, 11};
  o.contexts = {3773};
  o.prompt_lens = {16};
  o.chunk_lens = {125, 512, 505};
  o.max_rows = 512;
  std::vector<int> chunks;
  for (const ProfilePoint& p : profile_grid(o)) {
    if (p.phase != ProfilePhase::mixed) continue;
    ASSERT_EQ(p.seqs.size(), 12u);
    int rows = 0;
    for (const ProfilePoint::Seq& s : p.seqs) rows += s.n_new;
    EXPECT_LE(rows, 512);
    chunks.push_back(p.seqs.back().n_new);
  }
  EXPECT_EQ(chunks, (std::vector<int>{125, 501}));  // 512 and 505 both cap to 501: one point
  o.max_rows = 1024;  // room for every chunk: as given
  chunks.clear();
  for (const ProfilePoint& p : profile_grid(o))
    if (p.phase == ProfilePhase::mixed) chunks.push_back(p.seqs.back().n_new);
  EXPECT_EQ(chunks, (std::vector<int>{125, 512, 505}));
}

TEST(ProfilerPlan, BatchedPrefillsForEveryPromptLengthUpToMaxRows) {
  ProfileOptions o;
  o.prefill_lens = {8};
  o.batch_sizes = {1, 2, 4, 16};
  o.contexts = {32};
  o.chunk_lens = {8};
  o.prompt_lens = {16, 64};
  o.max_rows = 256;  // 16 x 16 fits, 4 x 64 fits, 16 x 64 does not
  std::vector<std::pair<size_t, int>> batched;  // (sequences, tokens each)
  for (const ProfilePoint& p : profile_grid(o))
    if (p.phase == ProfilePhase::prefill && p.seqs.size() > 1) batched.emplace_back(p.seqs.size(), p.seqs[0].n_new);
  const std::vector<std::pair<size_t, int>> want = {{2, 16}, {4, 16}, {16, 16}, {2, 64}, {4, 64}};
  EXPECT_EQ(batched, want);
  o.prompt_lens = {16, 0};
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.prompt_lens.clear();
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(ProfilerPlan, PaddedDecodesHalfRealAtTheMiddleContextUnlessTurnedOff) {
  ProfileOptions o = small_options();
  o.batch_sizes = {1, 2, 5, 8};
  o.contexts = {6, 12, 24};
  auto padded = [](const std::vector<ProfilePoint>& points) {
    std::vector<std::pair<int, int>> out;  // (sequences, padding rows)
    for (const ProfilePoint& p : points)
      if (p.n_padding > 0) {
        EXPECT_EQ(p.phase, ProfilePhase::decode);
        for (const ProfilePoint::Seq& q : p.seqs) EXPECT_EQ(q.context, 12);
        out.emplace_back(int(p.seqs.size()), p.n_padding);
      }
    return out;
  };
  EXPECT_EQ(padded(profile_grid(o)), (std::vector<std::pair<int, int>>{{1, 1}, {3, 2}, {4, 4}}));
  o.extra_decode_batches = {3, 9};  // bucket edges get padded decodes too
  EXPECT_EQ(padded(profile_grid(o)), (std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {3, 2}, {4, 4}, {5, 4}}));
  EXPECT_NE(profile_grid(o)[0].describe().find("context"), std::string::npos);
  o.padded_decodes = false;
  EXPECT_TRUE(padded(profile_grid(o)).empty());
  // The default grid times every decode batch up to 16 (costs need not be monotone in the rows).
  EXPECT_EQ(ProfileOptions{}.batch_sizes.size(), 16u);
}

TEST(Profiler, PaddedDecodeSamplesCalibrateTheSimsPaddedSteps) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 3), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o = small_options();
  o.batch_sizes = {1, 4, 8};
  o.repeats = 1;
  ProfileReport r = profile_backend(backend, o);
  r.hardware = "cpu-2core";
  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_padded.json";
  std::ofstream(path) << profile_json(r);
  const SimCostModel cost = SimCostModel::from_profile_json(path.string(), r.model);
  std::filesystem::remove(path);
  ASSERT_TRUE(cost.profiled);
  EXPECT_EQ(cost.profiled->padded_knots(), (std::vector<double>{4, 8}));
  int n_padded = 0;
  for (const ProfileSample& s : r.samples)  // one sample per padded knot: the fit reproduces each
    if (s.shape.padded_decode()) {
      ++n_padded;
      EXPECT_NEAR(cost.step_seconds(r.model, s.shape), s.step_s, 1e-6 * s.step_s) << s.shape.n_rows() << " rows";
    }
  EXPECT_EQ(n_padded, 2);
}

TEST(ProfilerPlan, RefusesABudgetNoPointFits) {
  ProfileOptions o = budget_options();
  o.max_kv_bytes = 15 * 1000;  // under one block of 16 slots
  try {
    plan_profile(o, 1000);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no profile grid point fits"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_profile(budget_options(), 0), std::invalid_argument);
}

TEST(ProfilerPlan, ValidateNamesWarmupAndBudget) {
  ProfileOptions o = small_options();
  o.warmup = -1;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.warmup = 2;
  o.validate();
  o.max_kv_bytes = -1;
  try {
    o.validate();
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_kv_bytes"), std::string::npos);
  }
}

TEST(ProfilerPlan, SimHardwareFromTheGpuName) {
  EXPECT_EQ(sim_hardware_for_device("NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90, 132 SMs"), "h100");
  EXPECT_EQ(sim_hardware_for_device("NVIDIA H200, 139.8 GiB, sm_90, 132 SMs"), "h200");
  EXPECT_EQ(sim_hardware_for_device("NVIDIA A100-SXM4-80GB, 79.2 GiB, sm_80, 108 SMs"), "a100-80gb");
  EXPECT_EQ(sim_hardware_for_device("NVIDIA A100-SXM4-40GB, 39.4 GiB, sm_80, 108 SMs"), "");
  EXPECT_EQ(sim_hardware_for_device("NVIDIA L40S, 44.4 GiB, sm_89, 142 SMs"), "l40s");
  EXPECT_EQ(sim_hardware_for_device("cuda device 0 (servelab built without CUDA)"), "");
  for (const char* name : {"h100", "h200", "a100-80gb", "l40s"}) EXPECT_NO_THROW(SimDevice::preset(name));
}

TEST(Profiler, BudgetedRunListsSkippedPointsAndStillCalibrates) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 3), CpuBackendOptions{.n_threads = 1});
  CountingBackend backend(cpu);
  ProfileOptions o = budget_options();
  o.max_kv_bytes = 500 * backend.kv_bytes_per_slot();
  o.warmup = 2;
  ProfileReport r = profile_backend(backend, o);
  const ProfilePlan plan = plan_profile(o, backend.kv_bytes_per_slot());
  ASSERT_EQ(r.samples.size(), plan.points.size());
  ASSERT_EQ(r.skipped.size(), 3u);
  EXPECT_EQ(backend.arena_slots, 272);
  EXPECT_EQ(r.kv_arena_bytes, 272 * backend.kv_bytes_per_slot());
  // One warm-up step for the whole grid, then per point 2 untimed runs and 1 timed.
  EXPECT_EQ(backend.n_forward, 1 + 3 * static_cast<int>(plan.points.size()));
  for (const ProfileSample& s : r.samples) EXPECT_EQ(s.times_s.size(), 1u);
  EXPECT_EQ(backend.n_loaded, 272);  // the fill wrote every slot

  r.hardware = "cpu-2core";
  const auto j = nlohmann::json::parse(profile_json(r));
  EXPECT_EQ(j.at("kv_arena_bytes"), r.kv_arena_bytes);
  EXPECT_EQ(j.at("options").at("warmup"), 2);
  ASSERT_EQ(j.at("skipped").size(), 3u);
  EXPECT_EQ(j.at("skipped")[1].at("n_padding_tokens"), 2);
  EXPECT_EQ(j.at("skipped")[0].at("phase"), "decode");
  EXPECT_EQ(j.at("skipped")[0].at("n_seqs"), 4);
  EXPECT_EQ(j.at("skipped")[0].at("max_context"), 257);
  EXPECT_EQ(j.at("skipped")[0].at("kv_bytes"), 4 * 272 * backend.kv_bytes_per_slot());
  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_budget_test.json";
  std::ofstream(path) << profile_json(r);
  EXPECT_NO_THROW(SimCostModel::from_profile_json(path.string(), r.model));
  std::filesystem::remove(path);
}

TEST(Profiler, RunnerFillsTheArenaWithRandomKv) {
  for (bool fill : {false, true}) {
    CpuBackend backend(ModelWeights::random(testing::small_config(2), 4), CpuBackendOptions{.n_threads = 1});
    ProfileRunner runner(backend, 64, 32, 7, fill);
    const std::vector<int64_t> slots = {0, 31, 63};
    const std::vector<std::byte> host = testing::read_slots(backend, slots);
    ASSERT_EQ(host.size(), 3 * static_cast<size_t>(backend.kv_bytes_per_slot()));
    const float* v = reinterpret_cast<const float*>(host.data());
    const size_t n = host.size() / sizeof(float);
    size_t n_zero = 0;
    float lo = 0.0f, hi = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      n_zero += v[i] == 0.0f;
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    if (fill) {
      EXPECT_LT(n_zero, n / 100) << "filled arena still mostly zeros";
      EXPECT_GE(lo, -1.0f);
      EXPECT_LE(hi, 1.0f);
      EXPECT_LT(lo, -0.5f);
      EXPECT_GT(hi, 0.5f);
    } else {
      EXPECT_EQ(n_zero, n);
    }
    // The runner still times a decode over that context.
    const ProfileSample s = runner.run(ProfilePoint{ProfilePhase::decode, {{20, 1}, {10, 1}}}, 1, 2, 1e9);
    EXPECT_EQ(s.shape.n_seqs, 2);
    EXPECT_EQ(s.times_s.size(), 2u);
    EXPECT_THROW(runner.run(ProfilePoint{ProfilePhase::decode, std::vector<ProfilePoint::Seq>(5, {20, 1})}, 0, 1, 0.0),
                 std::logic_error);  // 5 x 32 slots > 64
    EXPECT_NO_THROW(runner.run(ProfilePoint{ProfilePhase::decode, {{20, 1}, {20, 1}}}, 0, 1, 0.0));  // released again
  }
}

TEST(Profiler, RunnerFillsPastTheFirstChunkByCopies) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 5), CpuBackendOptions{.n_threads = 1});
  CountingBackend backend(cpu);
  ProfileRunner runner(backend, 64, 32, 9, true, 10 * backend.kv_bytes_per_slot());
  EXPECT_EQ(backend.n_loaded, 10);  // then copied to 10..19, 20..29, ..., 60..63
  const std::vector<int64_t> s3 = {3}, s63 = {63}, s4 = {4};
  const std::vector<std::byte> a = testing::read_slots(backend, s3);
  const std::vector<std::byte> b = testing::read_slots(backend, s63);  // 63 <- 3
  const std::vector<std::byte> c = testing::read_slots(backend, s4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  size_t n_zero = 0;
  for (size_t i = 0; i + 4 <= b.size(); i += 4) {
    float x;
    std::memcpy(&x, &b[i], 4);
    n_zero += x == 0.0f;
  }
  EXPECT_LT(n_zero, b.size() / 400);
}

TEST(Profiler, CommittedCudaProfileCalibratesTheSimOnItsDevice) {
  const std::string path = std::string(SERVELAB_SOURCE_DIR) + "/results/profiles/llama2-7b-cuda-h100.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not committed";
  const ModelConfig model = preset("llama2-7b");
  const SimCostModel cost = SimCostModel::from_profile_json(path, model);
  EXPECT_EQ(cost.kind, SimCostModel::Kind::profile);
  EXPECT_EQ(cost.device.name, "h100");
  EXPECT_EQ(cost.device.kv_dtype_bytes, 2);
  // A decode step inside the grid (batch 8, context 1024) is priced between 1 and 100 ms.
  StepShape s;
  s.n_tokens = s.n_sampled = s.n_seqs = 8;
  s.sum_context = 8 * 1025;
  s.max_context = 1025;
  s.decode_context = s.attention_pairs = 8 * 1025;
  const double t = cost.step_seconds(model, s);
  EXPECT_GT(t, 1e-3);
  EXPECT_LT(t, 0.1);
  EXPECT_THROW(SimCostModel::from_profile_json(path, model, SimDevice::preset("h200")), std::runtime_error);
}

}  // namespace
}  // namespace servelab

