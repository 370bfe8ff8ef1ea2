// WorkloadAdapters (loadgen/lora_workload.h): a run's adapters drawn when a request first names
// one, at most max_cpu_loras kept, one dropped and asked for again drawn again identically; and
// random_lora's per-layer streams; fetch() drawing on the worker once per adapter, and LoraSource
// attaching the adapter once its draw is done.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "engine/lora/lora_adapter.h"
#include "engine/model/config.h"
#include "loadgen/lora_source.h"
#include "loadgen/lora_workload.h"

namespace servelab {
namespace lora_workload_test {  // named, not anonymous: a unity batch shares one translation unit

LoraWorkloadSpec spec(int count, int max_loras, int max_cpu_loras) {
  LoraWorkloadSpec s;
  s.adapters = LoraWorkloadSpec::numbered(count);
  s.rank = 4;
  s.max_loras = max_loras;
  s.max_cpu_loras = max_cpu_loras;
  return s;
}

bool same_weights(const LoraAdapter& a, const LoraAdapter& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (int t = 0; t < kLoraTargets; ++t)
      if (a.layers[l][size_t(t)].a != b.layers[l][size_t(t)].a || a.layers[l][size_t(t)].b != b.layers[l][size_t(t)].b)
        return false;
  return true;
}

TEST(WorkloadAdapters, DrawnOnFirstUseKeptUpToMaxCpuLorasAndDrawnAgainIdentically) {
  const ModelConfig model = preset("tiny");
  WorkloadAdapters w(spec(5, 1, 2), model, 7, true);
  EXPECT_EQ(w.size(), 5u);
  EXPECT_EQ(w.kept(), 0);
  EXPECT_EQ(w.drawn(), 0) << "nothing drawn before a request names it";
  const auto a0 = w.get("lora-0");
  ASSERT_TRUE(a0);
  EXPECT_EQ(a0->name, "lora-0");
  EXPECT_EQ(a0->id, 1u);
  EXPECT_EQ(a0->rank, 4);
  EXPECT_TRUE(a0->targets_any());
  EXPECT_EQ(a0->layers.size(), size_t(model.n_layers));
  EXPECT_EQ(w.get("lora-0"), a0) << "kept: the same object";
  EXPECT_EQ(w.drawn(), 1);
  const auto a3 = w.get("lora-3");
  EXPECT_EQ(a3->id, 4u);
  EXPECT_FALSE(same_weights(*a0, *a3));
  w.get("lora-0");  // lora-3 is now the least recently asked for
  w.get("lora-1");  // past max_cpu_loras 2: lora-3 dropped here (a3 still alive through its holder)
  EXPECT_EQ(w.kept(), 2);
  const auto again = w.get("lora-3");
  EXPECT_NE(again, a3) << "dropped, so drawn again";
  EXPECT_EQ(again->id, a3->id);
  EXPECT_TRUE(same_weights(*again, *a3)) << "the same seed: the same weights";
  EXPECT_EQ(w.drawn(), 4);
  EXPECT_THROW(w.get("lora-9"), std::invalid_argument);
  EXPECT_FALSE(w.has("sql"));

  // max_cpu_loras 0 keeps max_loras; without weights none has weights, kept and dropped alike
  WorkloadAdapters one(spec(3, 1, 0), model, 7, true);
  one.get("lora-0");
  one.get("lora-1");
  EXPECT_EQ(one.kept(), 1);
  WorkloadAdapters names(spec(3, 2, 0), model, 7, false);
  for (const char* n : {"lora-0", "lora-1", "lora-2"}) EXPECT_TRUE(names.get(n)->layers.empty());
  EXPECT_EQ(names.kept(), 2);
  EXPECT_EQ(names.get("lora-1")->id, 2u);
}

TEST(WorkloadAdapters, RandomLoraIsSeededPerLayerAndTarget) {
  const ModelConfig model = preset("tiny");
  const std::vector<LoraTarget> qv = {LoraTarget::q, LoraTarget::v};
  const LoraAdapter a = random_lora(model, "a", 8, 8.0f, qv, 3), b = random_lora(model, "b", 8, 8.0f, qv, 3);
  EXPECT_TRUE(same_weights(a, b));
  EXPECT_FALSE(same_weights(a, random_lora(model, "c", 8, 8.0f, qv, 4)));
  // every layer drawn (one thread a layer here or not), and the layers differ from each other
  ASSERT_GE(a.layers.size(), 2u);
  EXPECT_TRUE(a.layers[1][size_t(LoraTarget::q)].present());
  EXPECT_NE(a.layers[0][size_t(LoraTarget::q)].a, a.layers[1][size_t(LoraTarget::q)].a);
  EXPECT_FALSE(a.layers[0][size_t(LoraTarget::o)].present());
}

bool ready_now(const WorkloadAdapters::Future& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

TEST(WorkloadAdapters, FetchDrawsOnTheWorkerOnceAndTheSameWeightsAsGet) {
  const ModelConfig model = preset("tiny");
  WorkloadAdapters w(spec(5, 1, 2), model, 7, true);
  const WorkloadAdapters::Future f1 = w.fetch("lora-2"), f2 = w.fetch("lora-2");
  const auto a = f1.get();
  EXPECT_EQ(f2.get(), a) << "one draw for both";
  EXPECT_EQ(w.drawn(), 1);
  EXPECT_EQ(a->id, 3u);
  WorkloadAdapters other(spec(5, 1, 2), model, 7, true);
  EXPECT_TRUE(same_weights(*other.get("lora-2"), *a)) << "drawn on the worker's threads or here: the same weights";
  const WorkloadAdapters::Future kept = w.fetch("lora-2");
  EXPECT_TRUE(ready_now(kept));
  EXPECT_EQ(kept.get(), a);
  EXPECT_EQ(w.get("lora-2"), a);
  EXPECT_THROW(w.fetch("lora-9"), std::invalid_argument);
  WorkloadAdapters names(spec(3, 2, 0), model, 7, false);
  EXPECT_TRUE(ready_now(names.fetch("lora-1"))) << "names and shapes only: nothing to wait for";
}

/// Requests 0..n-1 at time 0, in order.
class Inner final : public RequestSource {
 public:
  explicit Inner(int n) : n_(n) {}
  std::optional<double> next_time() const override { return next_ < n_ ? std::optional<double>(0.0) : std::nullopt; }
  Request take() override {
    Request r;
    r.id = uint64_t(next_++);
    r.prompt = {5, 6, 7};
    return r;
  }
  bool exhausted() const override { return next_ >= n_; }

 private:
  int n_, next_ = 0;
};

TEST(WorkloadAdapters, LoraSourceAttachesEachAdapterOnceItsDrawIsDone) {
  const ModelConfig model = preset("tiny");
  auto adapters = std::make_shared<WorkloadAdapters>(spec(5, 1, 2), model, 7, true);
  Plan plan;
  for (int i = 0; i < 3; ++i) {
    PlannedRequest r;
    r.id = uint64_t(i);
    r.lora = i == 1 ? "" : "lora-4";
    plan.requests.push_back(r);
  }
  LoraSource source(std::make_unique<Inner>(3), plan, adapters);
  Request r0 = source.take();  // lora-4 drawn on the worker (or already done)
  Request r1 = source.take();  // the base model: ready at once
  EXPECT_TRUE(source.ready(r1));
  EXPECT_EQ(r1.lora, nullptr);
  EXPECT_EQ(r0.lora_name, "lora-4") << "named when taken, for its record";
  source.finish(r0);  // blocks until drawn
  ASSERT_NE(r0.lora, nullptr);
  EXPECT_EQ(r0.lora->name, "lora-4");
  EXPECT_TRUE(source.ready(r0));
  Request r2 = source.take();  // kept by now: attached when taken
  EXPECT_TRUE(source.ready(r2));
  EXPECT_EQ(r2.lora, r0.lora);
  EXPECT_EQ(adapters->drawn(), 1);
}

TEST(WorkloadAdapters, OnTheSimLoraSourcePricesEachReadOnOneReader) {
  // Names only (the sim): a request naming an adapter not held is ready once the front end's one
  // reader has read it (price_reads), counted from the request's intended time.
  const ModelConfig model = preset("tiny");
  auto adapters = std::make_shared<WorkloadAdapters>(spec(5, 2, 0), model, 7, false);
  adapters->price_reads([](const LoraAdapter&) { return 0.25; });
  Plan plan;
  const std::vector<std::string> names = {"lora-4", "", "lora-4", "lora-1"};
  for (size_t i = 0; i < names.size(); ++i) {
    PlannedRequest r;
    r.id = uint64_t(i);
    r.lora = names[i];
    plan.requests.push_back(r);
  }
  LoraSource source(std::make_unique<Inner>(4), plan, adapters);
  std::vector<Request> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(source.take());
  EXPECT_EQ(source.ready_at(taken[0]), 0.25);
  EXPECT_EQ(source.ready_at(taken[1]), std::nullopt) << "the base model";
  EXPECT_EQ(source.ready_at(taken[2]), std::nullopt) << "held already (its read is under way)";
  EXPECT_EQ(source.ready_at(taken[3]), 0.5) << "after the first read";
  for (Request& r : taken) {
    EXPECT_TRUE(source.ready(r));
    source.finish(r);
  }
  EXPECT_EQ(source.ready_at(taken[0]), std::nullopt) << "finished";
  EXPECT_EQ(taken[3].lora->name, "lora-1");
}

}  // namespace lora_workload_test
}  // namespace servelab
