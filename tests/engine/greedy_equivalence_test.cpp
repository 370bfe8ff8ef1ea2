// The real CPU backend with a micro random model: greedy outputs must not depend on how requests
// were batched, how KV was allocated, whether prompts were chunked, or whether sequences were
// preempted (recomputed or swapped) — each request must generate what it generates alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "engine/backend/cpu_backend.h"
#include "engine/model/weights.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace greedy_equivalence_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::shared_ptr<const ModelWeights> weights() {
  static const auto w = std::make_shared<const ModelWeights>(ModelWeights::random(micro_model(), 7));
  return w;
}

std::unique_ptr<Backend> cpu_backend() {
  CpuBackendOptions options;
  options.n_threads = 1;
  return std::make_unique<CpuBackend>(weights(), options);
}

constexpr int64_t kSlotBytes = 2 * 2 * 32 * 4;  // K and V × 2 layers × kv_dim 32 × fp32

/// Ten requests of varied lengths; 8 and 9 share request 4's first 32 tokens (prefix cache),
/// 2 and 7 ask for two samples each.
std::vector<Request> workload() {
  const int prompts[10] = {5, 17, 33, 9, 40, 3, 25, 12, 45, 38};
  const int outputs[10] = {6, 3, 10, 1, 8, 12, 4, 7, 5, 9};
  std::vector<Request> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back(make_request(i, prompts[i], outputs[i]));
  for (int i : {8, 9}) std::copy_n(reqs[4].prompt.begin(), 32, reqs[i].prompt.begin());
  reqs[2].sampling.n = 2;
  reqs[7].sampling.n = 2;
  return reqs;
}

std::vector<Timed> staggered(const std::vector<Request>& reqs) {
  std::vector<Timed> out;
  for (size_t i = 0; i < reqs.size(); ++i) out.push_back({0.0005 * static_cast<double>(i), reqs[i]});
  return out;
}

/// What each request generates alone in a roomy engine (sample 0; greedy samples are all alike).
const std::map<uint64_t, std::vector<TokenId>>& alone() {
  static const auto outputs = [] {
    std::map<uint64_t, std::vector<TokenId>> m;
    for (Request r : workload()) {
      r.sampling.n = 1;
      Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), cpu_backend());
      RunResult res = run_virtual(engine, at_zero({r}));
      m[r.id] = res.at(r.id).outputs.at(0);
    }
    return m;
  }();
  return outputs;
}

struct Case {
  std::string name;
  EngineConfig config;
  bool all_at_zero = false;
  bool expect_preemption = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

EngineConfig with_kv(SchedulerConfig sched, KvKind kind, int64_t bytes) {
  EngineConfig c;
  c.sched = sched;
  c.kv.kind = kind;
  c.kv.block_size = 16;
  c.kv.reserve = NaiveReserve::max;
  c.kv.max_model_len = 64;
  c.kv_cache_bytes = bytes;
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t roomy = 2048 * kSlotBytes;
  for (KvKind kv : {KvKind::naive, KvKind::paged}) {
    const std::string k = to_string(kv);
    out.push_back({"static_" + k, with_kv(static_sched(4, 1.0), kv, roomy)});
    out.push_back({"dynamic_" + k, with_kv(dynamic_sched(4, 1.0), kv, roomy)});
    out.push_back({"continuous_" + k, with_kv(continuous_sched(6, 256, false), kv, roomy)});
    out.push_back({"continuous_chunked_" + k, with_kv(continuous_sched(6, 16, true), kv, roomy)});
  }
  // 10 blocks of 16 slots: every request fits alone, the whole load does not.
  const int64_t tight = 10 * 16 * kSlotBytes;
  for (PreemptMode mode : {PreemptMode::recompute, PreemptMode::swap})
    for (bool chunked : {false, true}) {
      const std::string name = std::string("tight_") + to_string(mode) + (chunked ? "_chunked" : "");
      out.push_back({name, with_kv(continuous_sched(8, chunked ? 24 : 128, chunked, mode), KvKind::paged, tight),
                     true, true});
    }
  // Naive exact reservations in 110 slots: a forked sample often finds no region of its own and
  // computes its prompt itself once one frees up; a long one waits for the arena to drain.
  EngineConfig naive_tight = with_kv(continuous_sched(8, 128, false), KvKind::naive, 110 * kSlotBytes);
  naive_tight.kv.reserve = NaiveReserve::oracle;
  out.push_back({"tight_naive_oracle", naive_tight, true, false});
  return out;
}

class GreedyEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(GreedyEquivalence, OutputsEqualRunningEachRequestAlone) {
  const Case& c = GetParam();
  Engine engine(c.config, cpu_backend());
  const std::vector<Request> reqs = workload();
  RunResult r = run_virtual(engine, c.all_at_zero ? at_zero(reqs) : staggered(reqs));
  ASSERT_EQ(r.finished.size(), reqs.size());
  if (c.expect_preemption) { EXPECT_GT(r.n_preemptions(), 0); }
  for (const Request& q : reqs) {
    const FinishedRequest& f = r.at(q.id);
    ASSERT_EQ(f.reason, FinishReason::length) << "request " << q.id << ": " << f.error;
    ASSERT_EQ(f.outputs.size(), static_cast<size_t>(q.sampling.n));
    for (int s = 0; s < q.sampling.n; ++s)
      EXPECT_EQ(f.outputs[s], alone().at(q.id)) << "request " << q.id << " sample " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Engine, GreedyEquivalence, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

/// Swap preemption with a host pool too small for every victim: the ones that do not fit are
/// recomputed (and reported), the others swapped, and every request still generates what it
/// generates alone. swap_space 0: every preemption recomputes.
TEST(GreedyEquivalenceSwap, FullHostPoolFallsBackToRecomputeWithTheSameTokens) {
  for (const int64_t pool_blocks : {int64_t{0}, int64_t{2}}) {
    SCOPED_TRACE("swap pool of " + std::to_string(pool_blocks) + " blocks");
    for (bool chunked : {false, true}) {
      EngineConfig c = with_kv(continuous_sched(8, chunked ? 24 : 128, chunked, PreemptMode::swap), KvKind::paged,
                               6 * 16 * kSlotBytes);  // 6 blocks: each request fits alone
      c.swap_space_bytes = pool_blocks * 16 * kSlotBytes;
      Engine engine(c, cpu_backend());
      ASSERT_NE(engine.swap_space(), nullptr);
      EXPECT_EQ(engine.swap_space()->capacity_slots(), pool_blocks * 16);
      const std::vector<Request> reqs = workload();
      RunResult r = run_virtual(engine, at_zero(reqs));
      int pool_full = 0;
      for (const StepOutcome& s : r.steps) {
        pool_full += static_cast<int>(s.swap_pool_full.size());
        for (uint64_t id : s.swap_pool_full)
          EXPECT_NE(std::find(s.preempted.begin(), s.preempted.end(), id), s.preempted.end());
      }
      EXPECT_GT(pool_full, 0) << r.n_preemptions() << " preemptions";
      if (pool_blocks == 0) EXPECT_EQ(pool_full, r.n_preemptions());
      else EXPECT_LT(pool_full, r.n_preemptions()) << "some victims fit the pool and were swapped";
      for (const Request& q : reqs) {
        const FinishedRequest& f = r.at(q.id);
        ASSERT_EQ(f.reason, FinishReason::length) << "request " << q.id << ": " << f.error;
        for (int k = 0; k < q.sampling.n; ++k) EXPECT_EQ(f.outputs[k], alone().at(q.id)) << "request " << q.id;
      }
      EXPECT_EQ(engine.swap_space()->free_slots(), engine.swap_space()->capacity_slots());
    }
  }
}

}  // namespace greedy_equivalence_test
}  // namespace servelab
