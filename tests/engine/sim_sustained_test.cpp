// The sustained-load state (engine/backend/sim_sustained.h): a step's price moves from the probe's
// cold ratio to its hot one as the GPU's recent compute share rises, and back during idle time;
// the profile's probe (engine/backend/profile_sustained.h) writes the figures and the sim reads them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/profile_sustained.h"
#include "engine/backend/profiler.h"
#include "engine/backend/sim_backend.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace sim_sustained_test {  // named, not anonymous: a unity batch shares one translation unit

StepShape prefill_shape(int64_t tokens) {
  StepShape s;
  s.n_tokens = tokens;
  s.n_sampled = 1;
  s.n_seqs = 1;
  s.sum_context = tokens;
  s.max_context = tokens;
  s.prefill_pairs = double(tokens) * double(tokens + 1) / 2.0;
  s.attention_pairs = s.prefill_pairs;
  return s;
}

StepShape decode_shape(int64_t seqs, int64_t context) {
  StepShape s;
  s.n_tokens = seqs;
  s.n_sampled = seqs;
  s.n_seqs = seqs;
  s.sum_context = seqs * context;
  s.max_context = context;
  s.decode_context = double(seqs * context);
  s.attention_pairs = s.decode_context;
  return s;
}

/// Heavy: hot 1.15 of the grid (cold 0.95: recorded, not priced); decode 0.98 / 1.04; tau 0.1 s.
SustainedLoad probe() {
  SustainedLoad l;
  l.heavy = {prefill_shape(2048), 0.100, 0.095, 0.115};
  l.decode = {decode_shape(8, 512), 0.010, 0.0098, 0.0104};
  l.tau_s = 0.1;
  l.seconds = 4.0;
  return l;
}

struct Llama {
  ModelConfig model = preset("llama2-7b");
  SimDevice device = SimDevice::preset("h200");
  RooflineTerms terms = RooflineTerms::of(model, device, 1);
};

TEST(SimSustained, TheFactorRisesToTheHeavyProbesSlowdownScaledByTheStepsComputeShare) {
  const Llama l;
  const SustainedLoad p = probe();
  SustainedState s(p, l.terms);
  const double wh = s.compute_share(p.heavy.shape), wd = s.compute_share(p.decode.shape);
  EXPECT_GT(wh, 0.9);  // a 2,048-token prefill is compute-bound
  EXPECT_LT(wd, 0.2);  // an 8-sequence decode is not
  EXPECT_GT(s.u_probe(), wd);
  EXPECT_LT(s.u_probe(), wh);
  EXPECT_DOUBLE_EQ(s.factor(wh, 0.0), 1.0);  // no recent load: the grid's price
  EXPECT_NEAR(s.factor(wh, s.u_probe()), 1.15, 1e-12);
  EXPECT_NEAR(s.factor(wh, 1.0), 1.15, 1e-12);  // held at the probe's steady state
  EXPECT_NEAR(s.factor(wh, 0.5 * s.u_probe()), 1.075, 1e-12);
  EXPECT_NEAR(s.factor(wd, s.u_probe()), 1.0 + 0.15 * wd / wh, 1e-12);  // a decode: its compute share of it
  EXPECT_DOUBLE_EQ(s.factor(0.0, 1.0), 1.0);
}

TEST(SimSustained, BackToBackHeavyStepsSlowToTheHotTimeAndIdleTimeBringsThemBack) {
  const Llama l;
  const SustainedLoad p = probe();
  SustainedState s(p, l.terms);
  const StepShape heavy = p.heavy.shape;
  double last = s.price(0.0, 0.100, heavy);
  EXPECT_DOUBLE_EQ(last, 0.100);  // the first step after idle: the grid's
  for (int i = 0; i < 40; ++i) {  // back to back (start -1: right after the previous one)
    const double next = s.price(-1.0, 0.100, heavy);
    EXPECT_GE(next, last);
    last = next;
  }
  EXPECT_NEAR(last, 0.115, 1e-6);  // 4 s of it: hot
  // Ten time constants of idle: the grid's price again.
  EXPECT_NEAR(s.price(100.0, 0.100, heavy), 0.100, 1e-4);
  // Decodes alone keep u at their share: nearer cold than the probe's mix.
  for (int i = 0; i < 200; ++i) s.price(-1.0, 0.010, p.decode.shape);
  EXPECT_LT(s.price(-1.0, 0.100, heavy), 0.105);
}

TEST(SimSustained, APricedRealStepAdvancesTheStateByTheTimeItRan) {
  const Llama l;
  const SustainedLoad p = probe();
  SustainedState fast(p, l.terms), slow(p, l.terms);
  fast.price(0.0, 0.1, p.heavy.shape, 0.01);  // ran 10 ms: u barely moved
  slow.price(0.0, 0.1, p.heavy.shape, 1.0);   // ran 1 s: u at the heavy share
  EXPECT_LT(fast.u(), 0.2);
  EXPECT_GT(slow.u(), 0.9);
}

TEST(SimSustained, JsonRoundTripAndErrorsNameTheField) {
  SustainedLoad p = probe();
  p.trace = {{0.0, 0.0, 0.095}, {0.1, 1.0, 0.0098}};
  const SustainedLoad q = sustained_from_json(nlohmann::json::parse(sustained_json(p).dump()));
  EXPECT_DOUBLE_EQ(q.heavy.hot_s, 0.115);
  EXPECT_DOUBLE_EQ(q.decode.cold_s, 0.0098);
  EXPECT_EQ(q.heavy.shape.n_tokens, 2048);
  EXPECT_DOUBLE_EQ(q.decode.shape.decode_context, 8.0 * 512);
  EXPECT_EQ(q.trace.size(), 2u);
  EXPECT_DOUBLE_EQ(q.tau_s, 0.1);
  nlohmann::json j = nlohmann::json::parse(sustained_json(p).dump());
  j.erase("tau_s");
  try {
    sustained_from_json(j);
    FAIL() << "no tau_s accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tau_s"), std::string::npos) << e.what();
  }
  j = nlohmann::json::parse(sustained_json(p).dump());
  j["heavy"]["hot_s"] = -1.0;
  try {
    sustained_from_json(j);
    FAIL() << "a negative time accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sustained.heavy.hot_s"), std::string::npos) << e.what();
  }
}

TEST(SimSustained, TheProbesTraceGivesColdHotAndTheTimeConstant) {
  SustainedLoad l = probe();
  l.trace.clear();
  l.seconds = 4.0;
  // Heavy steps of 10 ms slowing to 12 ms with a time constant of 0.5 s, a 5 ms decode after every 4.
  double t = 0.0;
  while (t < 4.0) {
    for (int k = 0; k < 4; ++k) {
      const double s = 0.012 - 0.002 * std::exp(-t / 0.5);
      l.trace.push_back({t, 0.0, s});
      t += s;
    }
    const double d = 0.005 + 0.0005 * (1.0 - std::exp(-t / 0.5));
    l.trace.push_back({t, 1.0, d});
    t += d;
  }
  summarize_sustained(l);
  EXPECT_NEAR(l.heavy.cold_s, 0.010, 1e-4);
  EXPECT_NEAR(l.heavy.hot_s, 0.012, 1e-4);
  EXPECT_NEAR(l.decode.cold_s, 0.005, 1e-4);
  EXPECT_NEAR(l.decode.hot_s, 0.0055, 1e-4);
  EXPECT_NEAR(l.tau_s, 0.5, 0.06);
}

TEST(SimSustained, TheSimBackendFollowsTheLoadOnlyWithAProbe) {
  const Llama l;
  SimCostModel plain = SimCostModel::roofline(l.device);
  SimCostModel loaded = plain;
  loaded.sustained = std::make_shared<const SustainedLoad>(probe());
  SimBackend a(l.model, plain), b(l.model, loaded);
  a.init_kv(1 << 16);
  b.init_kv(1 << 16);
  const StepShape heavy = prefill_shape(2048);
  const double base = a.price(heavy);
  EXPECT_EQ(a.price(heavy), base);  // no probe: every step alike
  b.at_time(0.0);
  const double first = b.price(heavy);
  EXPECT_DOUBLE_EQ(first, base);
  double t = first, last = first;
  for (int i = 0; i < 200; ++i) {
    b.at_time(t);
    last = b.price(heavy);
    t += last;
  }
  EXPECT_NEAR(last, 1.15 * base, 1e-3 * base);
  b.at_time(t + 100.0);  // a long idle gap
  EXPECT_NEAR(b.price(heavy), base, 1e-3 * base);

}

TEST(SimSustained, TheProfileProbesSustainedLoadAndTheSimReadsItUnlessRetargeted) {
  CpuBackend backend(ModelWeights::random(testing::small_config(4), 2), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o;
  o.prefill_lens = {4, 16};
  o.batch_sizes = {1, 3};
  o.contexts = {6, 12};
  o.prompt_lens = {6};
  o.chunk_lens = {5};
  o.repeats = 1;
  o.sustained_s = 0.2;
  ProfileReport r = profile_backend(backend, o);
  ASSERT_TRUE(r.sustained.has_value());
  EXPECT_EQ(r.sustained->heavy.shape.n_tokens, 18);  // the batched prefill of 3 x 6 rows: the most rows
  EXPECT_EQ(r.sustained->decode.shape.n_seqs, 3);    // the middle batch (of 1, 3) at the middle context
  EXPECT_GT(r.sustained->trace.size(), 5u);
  EXPECT_GT(r.sustained->heavy.hot_s, 0.0);
  EXPECT_NE(profile_table(r).find("sustained load"), std::string::npos);
  r.device = "test";
  r.hardware = "cpu-2core";
  const auto path = std::filesystem::temp_directory_path() / "servelab_sim_sustained_test.json";
  std::ofstream(path) << profile_json(r);
  const SimCostModel cost = SimCostModel::from_profile_json(path.string(), r.model);
  ASSERT_TRUE(cost.sustained);
  EXPECT_DOUBLE_EQ(cost.sustained->heavy.hot_s, r.sustained->heavy.hot_s);
  EXPECT_NE(cost.source.find("(sustained load)"), std::string::npos) << cost.source;  // reports say so
  const SimCostModel moved = SimCostModel::from_profile_json(path.string(), r.model, SimDevice::preset("h200"), 1, true);
  EXPECT_FALSE(moved.sustained);  // another device's power cap is its own
  EXPECT_EQ(moved.source.find("(sustained load)"), std::string::npos);
  std::filesystem::remove(path);
  o.sustained_s = -1.0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

}  // namespace sim_sustained_test
}  // namespace servelab
