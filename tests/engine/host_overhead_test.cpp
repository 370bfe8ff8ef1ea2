// HostOverhead: the line it fits and how a profile carries it into the sim (the probe that
// measures it: tests/loadgen/host_overhead_probe_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/step_input.h"
#include "engine/backend/host_overhead.h"
#include "engine/backend/sim_backend.h"
#include "engine/kv/kv_manager.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

TEST(HostOverhead, FitsALineExactlyAndClampsNegativeTerms) {
  std::vector<std::pair<double, double>> pts;
  for (double x : {1.0, 8.0, 32.0, 128.0}) pts.push_back({x, 3e-6 + 2e-7 * x});
  const HostOverhead h = HostOverhead::fit(pts);
  EXPECT_NEAR(h.per_step_s, 3e-6, 1e-15);
  EXPECT_NEAR(h.per_seq_s, 2e-7, 1e-16);
  EXPECT_NEAR(h.seconds(10), 5e-6, 1e-15);
  // One batch size: a constant.
  const std::vector<std::pair<double, double>> one = {{4.0, 1e-5}, {4.0, 3e-5}};
  EXPECT_EQ(HostOverhead::fit(one).per_seq_s, 0.0);
  EXPECT_NEAR(HostOverhead::fit(one).per_step_s, 2e-5, 1e-15);
  // Falling with batch size (noise): the mean, no negative slope.
  const std::vector<std::pair<double, double>> falling = {{1.0, 4e-6}, {64.0, 2e-6}};
  EXPECT_EQ(HostOverhead::fit(falling).per_seq_s, 0.0);
  EXPECT_NEAR(HostOverhead::fit(falling).per_step_s, 3e-6, 1e-15);
  // A line that would cross below zero at no sequences: through the origin instead.
  const std::vector<std::pair<double, double>> steep = {{10.0, 1e-6}, {20.0, 5e-6}};
  const HostOverhead s = HostOverhead::fit(steep);
  EXPECT_EQ(s.per_step_s, 0.0);
  EXPECT_GT(s.per_seq_s, 0.0);
  EXPECT_THROW(HostOverhead::fit(std::vector<std::pair<double, double>>{}), std::invalid_argument);
  const std::vector<std::pair<double, double>> bad = {{1.0, NAN}};
  EXPECT_THROW(HostOverhead::fit(bad), std::invalid_argument);
}

/// A profile written to a temporary file, removed with the object.
class ProfileFile {
 public:
  explicit ProfileFile(const std::string& text)
      : path_(testing::TempDir() + "host_overhead_profile_" + std::to_string(counter()++) + ".json") {
    std::ofstream(path_) << text;
  }
  ~ProfileFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string path_;
};

/// A one-sample profile of `m` on h100 with an optional host_overhead object.
std::string profile_with_host(const ModelConfig& m, const nlohmann::json& host) {
  nlohmann::json j;
  j["backend"] = "cuda";
  j["hardware"] = "h100";
  j["model"] = {{"name", m.name}, {"hidden_size", m.hidden_size}, {"n_layers", m.n_layers}, {"n_heads", m.n_heads},
                {"n_kv_heads", m.n_kv_heads}, {"intermediate_size", m.intermediate_size}, {"vocab_size", m.vocab_size}};
  j["samples"] = nlohmann::json::array();
  for (int rows : {1, 64})
    j["samples"].push_back({{"phase", "x"}, {"n_seqs", rows}, {"n_tokens", rows}, {"n_sampled", rows},
                            {"sum_context", rows * 32}, {"max_context", 32}, {"prefill_pairs", 0},
                            {"decode_context", rows * 32}, {"step_s", 1e-3 + 1e-5 * rows}});
  if (!host.is_null()) j["host_overhead"] = host;
  return j.dump();
}

TEST(HostOverhead, AProfileCarriesItIntoEverySimStep) {
  const ModelConfig m = micro_model();
  ProfileFile with(profile_with_host(m, {{"per_step_s", 4e-5}, {"per_seq_s", 1e-6}}));
  ProfileFile without(profile_with_host(m, nullptr));
  const SimCostModel a = SimCostModel::from_profile_json(with.path(), m);
  const SimCostModel b = SimCostModel::from_profile_json(without.path(), m);
  EXPECT_DOUBLE_EQ(a.host.per_step_s, 4e-5);
  EXPECT_DOUBLE_EQ(a.host.per_seq_s, 1e-6);
  EXPECT_TRUE(b.host.zero());
  // The same step on both: the difference is exactly the host term for its 3 sequences.
  auto predict = [&](const SimCostModel& cost) {
    SimBackend backend(m, cost);
    backend.init_kv(256);
    KvConfig kc;
    auto kv = make_kv_manager(kc, 256);
    std::vector<Sequence> seqs(3);
    Batch batch;
    for (int i = 0; i < 3; ++i) {
      seqs[i].id = i + 1;
      seqs[i].tokens = prompt_tokens(8, i + 1);
      seqs[i].n_prompt = 8;
      kv->allocate(seqs[i], 8);
    }
    for (Sequence& s : seqs) batch.entries.push_back({&s, 8, true});
    return *run_batch(backend, batch, *kv).predicted_s;
  };
  EXPECT_NEAR(predict(a) - predict(b), 4e-5 + 3 * 1e-6, 1e-12);
  // step_seconds (forward() alone, what validate-sim compares per step) leaves it out.
  StepShape shape;
  shape.n_tokens = shape.n_sampled = shape.n_seqs = 1;
  shape.sum_context = shape.max_context = 32;
  shape.decode_context = shape.attention_pairs = 32;
  EXPECT_DOUBLE_EQ(a.step_seconds(m, shape), b.step_seconds(m, shape));
  // A bad value names the field and the file.
  ProfileFile bad(profile_with_host(m, {{"per_step_s", -1.0}, {"per_seq_s", 0.0}}));
  try {
    SimCostModel::from_profile_json(bad.path(), m);
    FAIL() << "a negative host overhead was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("host_overhead.per_step_s"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(bad.path()), std::string::npos) << e.what();
  }
  ProfileFile missing(profile_with_host(m, {{"per_step_s", 1e-6}}));
  EXPECT_THROW(SimCostModel::from_profile_json(missing.path(), m), std::runtime_error);
}

}  // namespace
}  // namespace servelab
