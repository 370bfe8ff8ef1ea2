// WorkloadAdapters (loadgen/lora_workload.h): a run's adapters drawn when a request first names
// one, at most max_cpu_loras kept, one dropped and asked for again drawn again identically; and
// random_lora's per-layer streams.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "engine/lora/lora_adapter.h"
#include "engine/model/config.h"
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

}  // namespace lora_workload_test
}  // namespace servelab
